"""Stage baseline: TF-IDF + logistic regression on the same train/test split ->
reports/baseline.json and its per-document test predictions, so every run shows whether
fine-tuning beat the simple thing (evaluate compares the two document by document). Past
baseline.hashing_from training documents: hashed n-grams + SGD (evaluate/baseline.py)."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from textclf.evaluate.baseline import predict_test
from textclf.config import load_params
from textclf.evaluate.metrics import classification_scores
from textclf.inference.frames import PROB_PREFIX
from textclf.io import run_stage, setup_logging, stage_parser, write_json, write_parquet

log = logging.getLogger("baseline")
def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--out", required=True, help="output JSON: baseline test scores")
    parser.add_argument("--predictions", required=True,
                        help="output parquet: per test document, label, prediction, probabilities")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_params(args.params).baseline
    splits = pd.read_parquet(args.splits, columns=["doc_id", "split"])
    doc_ids, labels, classes, probs = predict_test(args.corpus, splits, cfg)  # probs: (N, C)
    predictions = pd.DataFrame({"doc_id": doc_ids, "label": labels,
                                "predicted": np.asarray(classes, dtype=object)[probs.argmax(axis=1)]})
    for i, c in enumerate(classes):
        predictions[PROB_PREFIX + c] = probs[:, i]
    scores = classification_scores(predictions["label"], predictions["predicted"])
    write_json(args.out, scores)
    write_parquet(predictions, args.predictions)
    log.info("baseline test accuracy %.4f, macro-F1 %.4f", scores["accuracy"], scores["macro_f1"])


if __name__ == "__main__":
    run_stage(main)
