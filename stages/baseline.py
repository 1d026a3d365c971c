"""Stage baseline: TF-IDF + logistic regression on the same train/test split ->
reports/baseline.json and its per-document test predictions, so every run shows whether
fine-tuning beat the simple thing (evaluate compares the two document by document). Past
baseline.hashing_from training documents: hashed n-grams + SGD (evaluate/baseline.py)."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from textclf.evaluate.baseline import fit_and_predict, fit_hashed
from textclf.config import load_params
from textclf.evaluate.metrics import classification_scores
from textclf.inference.frames import PROB_PREFIX
from textclf.io import UserError, run_stage, setup_logging, stage_parser, write_json, write_parquet

log = logging.getLogger("baseline")
BATCH = 10_000  # corpus rows read, and test documents scored, at a time


def read_split(corpus: str, splits: pd.DataFrame, name: str):
    """The corpus rows in split `name`, in corpus order, one record batch at a time ->
    (doc ids, labels, texts as Arrow strings): no Python str per text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = set(splits.loc[splits["split"] == name, "doc_id"])
    parts = []
    for batch in pq.ParquetFile(corpus).iter_batches(batch_size=BATCH, columns=["doc_id", "label", "text"]):
        keep = [d in wanted for d in batch.column("doc_id").to_pylist()]
        parts.append(batch.filter(pa.array(keep)))
    table = pa.Table.from_batches(parts)
    if len(table) != len(wanted):
        raise UserError(f"{len(wanted) - len(table)} {name} document(s) of the split are not in "
                        f"{corpus}: the split was made from another corpus; rerun `dvc repro split`.")
    return (table.column("doc_id").to_numpy(), table.column("label").to_numpy(),
            table.column("text"))


def predict(corpus: str, splits: pd.DataFrame, cfg) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """-> (test doc ids, their labels, classes, test probabilities (N, C))."""
    _, train_y, train_texts = read_split(corpus, splits, "train")
    test_ids, test_y, test_texts = read_split(corpus, splits, "test")
    if len(train_y) < cfg.hashing_from:
        classes, probs = fit_and_predict(train_texts.to_pylist(), train_y.tolist(),
                                         test_texts.to_pylist(), cfg)
        return test_ids, test_y, classes, probs
    log.info("%d training documents >= baseline.hashing_from=%d: hashed n-grams + SGD",
             len(train_y), cfg.hashing_from)
    features, model = fit_hashed(train_texts, train_y, cfg)
    probs = np.concatenate([model.predict_proba(features(test_texts.slice(i, BATCH).to_pylist()))
                            for i in range(0, len(test_y), BATCH)])
    return test_ids, test_y, [str(c) for c in model.classes_], probs


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--out", required=True, help="output JSON: baseline test scores")
    parser.add_argument("--predictions", required=True,
                        help="output parquet: per test document, label, prediction, probabilities")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_params(args.params)["baseline"]
    splits = pd.read_parquet(args.splits, columns=["doc_id", "split"])
    doc_ids, labels, classes, probs = predict(args.corpus, splits, cfg)  # probs: (N, C)
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
