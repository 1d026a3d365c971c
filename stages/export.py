"""Stage export: the trained model in the format serve.format names (ONNX float32 or int8
weights, for ONNX Runtime) -> models/export, beside the PyTorch folder, holding the format that
agrees with the PyTorch model on validation (int8, else float32, else none: PyTorch serves),
calibrated on its own validation probabilities, and blended with the baseline where the blend
scores better on validation (serve.blend); evaluate confirms it on the test split and logs it."""
from __future__ import annotations

from textclf.stage import run_stage, setup_logging, stage_parser
from textclf.export.check import BlendInputs, export_check
from textclf.model.export import ExportPaths, run_export


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True, help="token ids: the validation split each format is checked and calibrated on")
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--out", required=True, help="output folder: the exported model")
    parser.add_argument("--baseline", help="the baseline stage's saved model: blended in where it helps (serve.blend)")
    parser.add_argument("--corpus", help="the corpus the blend reads the validation texts from (with --baseline)")
    args = vars(parser.parse_args(argv))
    if bool(args["baseline"]) != bool(args["corpus"]):
        parser.error("--baseline and --corpus go together: the blend scores the baseline on the validation texts")
    setup_logging()
    blend = BlendInputs(args["baseline"], args["corpus"]) if args["baseline"] else None
    run_export(ExportPaths(**{k: args[k] for k in ("params", "model_dir", "out")}),
               export_check(args["tokens"], args["splits"], args["model_dir"], args["params"], blend))


if __name__ == "__main__":
    run_stage(main)
