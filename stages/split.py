"""Stage split: corpus.parquet -> stratified, seeded, group-aware split assignment (each
near-duplicate group in one split) + per-split class counts."""
from __future__ import annotations

import logging
import pandas as pd

from textclf.config import load_params
from textclf.io import run_stage, setup_logging, stage_parser, write_json, write_parquet
from textclf.data.splitting import class_counts, stratified_split

log = logging.getLogger("split")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True, help="output parquet: doc_id -> split")
    parser.add_argument("--counts", required=True, help="output JSON: class counts per split")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_params(args.params)["split"]
    corpus = pd.read_parquet(args.corpus, columns=["doc_id", "label", "content_hash", "group"])
    assignment = stratified_split(corpus, cfg.fractions, cfg.seed)
    write_parquet(assignment, args.splits)
    counts = class_counts(assignment)
    write_json(args.counts, counts)
    log.info("split sizes: %s; %d near-duplicate groups, none in two splits",
             {s: sum(c.values()) for s, c in counts.items()},
             int((assignment["group"].value_counts() > 1).sum()))


if __name__ == "__main__":
    run_stage(main)
