"""Stage export: the trained model in the format serve.format names (ONNX float32 or int8
weights, for ONNX Runtime) -> models/export, beside the PyTorch folder, each ONNX format
calibrated on its own validation probabilities; evaluate checks it against the PyTorch model
on the test split before it is logged and served."""
from __future__ import annotations

from textclf.common import run_stage, setup_logging, stage_parser
from textclf.evaluate.export_calibration import calibrator
from textclf.model.export import ExportPaths, run_export


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True, help="token ids: the validation split each format is calibrated on")
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True, help="output folder: the exported model")
    args = vars(parser.parse_args(argv))
    setup_logging()
    run_export(ExportPaths(**{k: args[k] for k in ("params", "model_dir", "out")}),
               calibrator(args["tokens"], args["splits"]))


if __name__ == "__main__":
    run_stage(main)
