"""Stage split: corpus.parquet -> seeded, group-aware split assignment (each near-duplicate
group in one split; stable under added and removed documents by default) + per-split class
counts and the groups moved to give every class every split."""
from __future__ import annotations

import logging
import pandas as pd

from textclf.config import load_params
from textclf.io import run_stage, setup_logging, stage_parser, write_json, write_parquet
from textclf.data.splitting import class_counts, split_corpus

log = logging.getLogger("split")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True, help="output parquet: doc_id -> split")
    parser.add_argument("--counts", required=True, help="output JSON: class counts per split")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_params(args.params).split
    columns = ["doc_id", "label", "content_hash", "group", "source_path"]  # the path names it in diffs
    if cfg.method == "stable":
        columns.append("split_key")
    corpus = pd.read_parquet(args.corpus, columns=columns)
    assignment, repairs = split_corpus(corpus, cfg.fractions, cfg.seed, cfg.method)
    write_parquet(assignment, args.splits)
    counts = class_counts(assignment)
    write_json(args.counts, {**counts, "method": cfg.method, "repairs": repairs})
    log.info("split (%s) sizes: %s; %d near-duplicate groups, none in two splits; %d group(s) "
             "moved so that every class is in every split", cfg.method,
             {s: sum(c.values()) for s, c in counts.items()},
             int((assignment["group"].value_counts() > 1).sum()), len(repairs))


if __name__ == "__main__":
    run_stage(main)
