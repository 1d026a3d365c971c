"""Stage export: the trained model in the format serve.format names (ONNX float32 or int8
weights, for ONNX Runtime) -> models/export, beside the PyTorch folder; evaluate checks it
against the PyTorch model on the test split before it is logged and served."""
from __future__ import annotations

from textclf.common import run_stage, setup_logging, stage_parser
from textclf.model.export import ExportPaths, run_export


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True, help="output folder: the exported model")
    args = parser.parse_args(argv)
    setup_logging()
    run_export(ExportPaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
