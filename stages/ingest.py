"""Stage ingest: a folder (or archive) of class folders, or tables -> data/interim/corpus.parquet, with
near-duplicates found and grouped (column `group`).

    python -m stages.ingest --corpus data/interim/corpus.parquet --report data/interim/ingest_report.json
"""
from __future__ import annotations

import logging

from textclf.config import load_params
from textclf.data.corpus import write_corpus
from textclf.data.tables import Columns
from textclf.io import run_stage, setup_logging, stage_parser, write_json

log = logging.getLogger("ingest")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True, help="output parquet")
    parser.add_argument("--report", required=True, help="output accounting JSON")
    args = parser.parse_args(argv)
    setup_logging()
    params = load_params(args.params).ingest
    columns = Columns(params.text_column, params.label_column, params.id_column, params.tsv_quoting)
    report = write_corpus(params.source, args.corpus, params.max_bytes, params.min_per_class,
                          params.near_duplicates, columns)
    write_json(args.report, report.to_json())
    log.info("seen %d %s, kept %d in %d classes, skipped %s", report.seen, report.unit, report.kept,
             len(report.per_class), report.counts())


if __name__ == "__main__":
    run_stage(main)
