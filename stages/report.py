"""Stage report: the stage outputs -> reports/report.html (one self-contained file with
figures), reports/report.md (the same without figures) and the confusion-matrix PNG,
all logged to the training run in MLflow (its lineage: datasets and the dvc.lock train logged)."""
from __future__ import annotations

from textclf.stage import run_stage, setup_logging, stage_parser
from textclf.report.run import ReportPaths, run


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    for name in ("ingest-report", "token-stats", "split-counts", "histogram", "curve", "metrics",
                 "per-class-json", "data-diff", "predictions", "corpus", "model-dir", "run-file", "out-md",
                 "out-html", "confusion-png"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--label-issues", help="stage labels' table (without it: no label-issues section)")
    parser.add_argument("--label-summary", help="stage labels' summary JSON")
    parser.add_argument("--lock", default="dvc.lock", help="dvc.lock, read for the lineage table")
    args = vars(parser.parse_args(argv))
    del args["params"]  # every stage takes --params; the report reads none
    setup_logging()
    run(ReportPaths(**args))


if __name__ == "__main__":
    run_stage(main)
