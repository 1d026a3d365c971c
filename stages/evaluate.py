"""Stage evaluate: model folder + test split -> reports/metrics.json (a bounded set of numbers)
and reports/per_class.json (what grows with the classes), confusion plot data,
and the same numbers logged into the training run in MLflow; the exported model checked
against the PyTorch one, and the one that passes logged, registered and served."""
from __future__ import annotations

from textclf.evaluate.run import EvaluatePaths, run
from textclf.stage import run_stage, setup_logging, stage_parser


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--run-file", required=True, help="JSON naming the training run")
    parser.add_argument("--guards", required=True, help="guard results from train")
    parser.add_argument("--baseline", required=True, help="baseline scores JSON")
    parser.add_argument("--baseline-predictions", required=True,
                        help="the baseline's per-document test predictions (parquet)")
    parser.add_argument("--corpus", required=True,
                        help="the corpus parquet: texts of the test documents a champion on other data is scored on")
    parser.add_argument("--export", required=True,
                        help="the exported model (serve.format), checked against --model-dir before it is served")
    parser.add_argument("--metrics", required=True, help="output metrics JSON")
    parser.add_argument("--data-diff", required=True,
                        help="output JSON: documents added, removed, relabelled, edited since the champion's data")
    parser.add_argument("--ingest-report",
                        help="ingest's report: why a removed document still in the source was dropped")
    parser.add_argument("--confusion", required=True, help="output CSV of (actual, predicted)")
    parser.add_argument("--per-class", required=True, help="output CSV: per-class F1, precision, recall")
    parser.add_argument("--per-class-json", required=True,
                        help="output JSON: the per-class and per-pair figures (per-class scores, confusion "
                             "counts, model vs baseline per class, set coverage per class), kept out of --metrics")
    parser.add_argument("--predictions", required=True,
                        help="output parquet: per test document, label, prediction, probabilities")
    parser.add_argument("--review-curve",
                        help="output CSV: per serve.review_below, the share of test documents answered and their accuracy")
    args = parser.parse_args(argv)
    setup_logging()
    run(EvaluatePaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
