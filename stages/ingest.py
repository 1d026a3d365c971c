"""Stage ingest: a folder (or archive) of class folders, or tables -> data/interim/corpus.parquet, with
near-duplicates found and grouped (column `group`).

    python -m stages.ingest --corpus data/interim/corpus.parquet --report data/interim/ingest_report.json
"""
from __future__ import annotations

from textclf.data.corpus import IngestPaths, run_ingest
from textclf.stage import run_stage, setup_logging, stage_parser


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True, help="output parquet")
    parser.add_argument("--report", required=True, help="output accounting JSON")
    parser.add_argument("--corrections", default="", help="a corrections CSV (doc,label) to apply")
    args = parser.parse_args(argv)
    setup_logging()
    run_ingest(IngestPaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
