"""Stage baseline: TF-IDF + logistic regression on the same train/test split ->
reports/baseline.json, so every run shows whether fine-tuning beat the simple thing."""
from __future__ import annotations

import logging

import pandas as pd

from textclf.baseline import fit_and_score
from textclf.config import load_params
from textclf.io import run_stage, setup_logging, stage_parser, write_json

log = logging.getLogger("baseline")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--out", required=True, help="output JSON: baseline test scores")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_params(args.params)["baseline"]
    frame = pd.read_parquet(args.corpus).merge(
        pd.read_parquet(args.splits)[["doc_id", "split"]], on="doc_id", validate="one_to_one")
    train, test = frame[frame["split"] == "train"], frame[frame["split"] == "test"]
    scores = fit_and_score(train["text"].tolist(), train["label"].tolist(),
                           test["text"].tolist(), test["label"].tolist(), cfg)
    write_json(args.out, scores)
    log.info("baseline test accuracy %.4f, macro-F1 %.4f", scores["accuracy"], scores["macro_f1"])


if __name__ == "__main__":
    run_stage(main)
