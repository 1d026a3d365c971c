"""Stage ingest: a folder (or archive) of class folders -> data/interim/corpus.parquet, with
near-duplicates found and grouped (column `group`).

    python -m stages.ingest --corpus data/interim/corpus.parquet --report data/interim/ingest_report.json
"""
from __future__ import annotations

import logging
from pathlib import Path

from textclf.config import load_params
from textclf.data.corpus import build_corpus
from textclf.io import run_stage, setup_logging, stage_parser, write_json, write_parquet

log = logging.getLogger("ingest")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True, help="output parquet")
    parser.add_argument("--report", required=True, help="output accounting JSON")
    args = parser.parse_args(argv)
    setup_logging()
    params = load_params(args.params)["ingest"]
    frame, report = build_corpus(Path(params.source), params.max_bytes, params.min_per_class,
                                 params.near_duplicates)
    write_parquet(frame, args.corpus)
    write_json(args.report, report)
    log.info("seen %d files, kept %d in %d classes, skipped %s",
             report["files_seen"], report["kept"], len(report["per_class"]), report["skipped"])


if __name__ == "__main__":
    run_stage(main)
