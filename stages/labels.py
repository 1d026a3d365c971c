"""Stage labels: which labels are probably wrong. The TF-IDF baseline cross-fitted over the
whole corpus (folds grouped by near-duplicate group) and the fine-tuned model's validation
and test probabilities, judged by cleanlab -> reports/label_issues.parquet (one row per document,
most suspect first) and reports/label_issues.json (docs/label_issues.md)."""
from __future__ import annotations

from textclf.stage import run_stage, setup_logging, stage_parser
from textclf.evaluate.label_issues import LabelsPaths, run_labels


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--predictions", required=True, help="the model's test predictions (evaluate)")
    parser.add_argument("--val-predictions",
                        help="the kept model's validation predictions (train); without them validation "
                             "documents are judged by the baseline alone")
    parser.add_argument("--table", required=True, help="output parquet: one row per document")
    parser.add_argument("--summary", required=True, help="output JSON: counts, noise rates, pairs")
    args = parser.parse_args(argv)
    setup_logging()
    run_labels(LabelsPaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
