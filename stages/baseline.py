"""Stage baseline: TF-IDF + logistic regression on the same train/test split ->
reports/baseline.json, its per-document test predictions and the model itself
(data/processed/baseline_model, beside its predictions: deleting models/ refits nothing), so every
run shows whether fine-tuning beat the simple thing (evaluate compares the two document by document). Past
baseline.hashing_from training documents: hashed n-grams + SGD (evaluate/baseline.py)."""
from __future__ import annotations

from textclf.evaluate.baseline_stage import BaselinePaths, run_baseline
from textclf.stage import run_stage, setup_logging, stage_parser


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--out", required=True, help="output JSON: baseline test scores")
    parser.add_argument("--predictions", required=True,
                        help="output parquet: per test document, label, prediction, probabilities")
    parser.add_argument("--model", help="output folder: the fitted baseline as files, what a blended export "
                                        "serves (single-label; none: not saved)")
    args = parser.parse_args(argv)
    setup_logging()
    run_baseline(BaselinePaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
