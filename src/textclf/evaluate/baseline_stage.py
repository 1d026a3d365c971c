"""The baseline stage: the TF-IDF baseline (evaluate.baseline) fitted on the train split and
scored on test, its model saved for a blended export; a multi-label corpus one-vs-rest
(evaluate.baseline_multilabel, which builds on the baseline's features)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from textclf.config import BaselineParams, load_params
from textclf.data.labelsets import is_multilabel
from textclf.evaluate.baseline import predict_test, read_split
from textclf.evaluate.baseline_multilabel import fit_multilabel, multilabel_predictions
from textclf.evaluate.metrics import classification_scores, test_metrics
from textclf.files import open_parquet, write_json, write_parquet
from textclf.inference.frames import PROB_PREFIX


@dataclass(frozen=True)
class BaselinePaths:
    """What the baseline stage reads and writes, as its command line names them."""
    params: str
    corpus: str
    splits: str
    out: str  # written: the baseline's test scores (JSON)
    predictions: str  # written: per test document, label, prediction, probabilities (parquet)
    model: str | None = None  # written: the fitted baseline, as a file (model.linear_text); single-label only


def run_baseline(paths: BaselinePaths) -> None:
    """The baseline stage: fit on the train split, score the test split. Its classes are
    weighted as the fine-tune's (train.class_weights), so the two compare like for like."""
    params = load_params(paths.params)
    cfg, weights = params.baseline, params.train.class_weights
    splits = pd.read_parquet(paths.splits, columns=["doc_id", "split"])
    if is_multilabel(open_parquet(paths.corpus).schema_arrow.metadata):
        return run_multilabel(paths, cfg, weights, splits)
    doc_ids, labels, classes, probs = predict_test(paths.corpus, splits, cfg, weights, paths.model)  # (N, C)
    predictions = pd.DataFrame({"doc_id": doc_ids, "label": labels,
                                "predicted": np.asarray(classes, dtype=object)[probs.argmax(axis=1)]})
    for i, c in enumerate(classes):
        predictions[PROB_PREFIX + c] = probs[:, i]
    scores = classification_scores(predictions["label"], predictions["predicted"])
    index = {c: i for i, c in enumerate(classes)}  # beside the model's, per class (per_class.json)
    y_true, y_pred = (np.array([index[x] for x in predictions[c]]) for c in ("label", "predicted"))
    per_class = test_metrics(y_true, y_pred, list(classes))["per_class"]
    write_json(paths.out, {**scores, "class_weights": weights, "per_class": per_class})
    write_parquet(predictions, paths.predictions)
    logging.getLogger("baseline").info("baseline test accuracy %.4f, macro-F1 %.4f", scores["accuracy"],
                                       scores["macro_f1"])


def run_multilabel(paths: BaselinePaths, cfg: BaselineParams, weights: str, splits: pd.DataFrame) -> None:
    """The baseline stage on a multi-label corpus: one-vs-rest, thresholds tuned on validation.
    Its model is not saved (no blend serves label sets): the folder says so."""
    if paths.model:
        Path(paths.model).mkdir(parents=True, exist_ok=True)
        write_json(Path(paths.model) / "baseline.json", {"kind": "none", "why": "a multi-label corpus: "
                                                         "no blend is served for label sets"})
    read = {name: read_split(paths.corpus, splits, name) for name in ("train", "validation", "test")}
    labels, thresholds, probs = fit_multilabel({k: v[2].to_pylist() for k, v in read.items()},
                                               {k: v[1] for k, v in read.items()}, cfg, weights)
    predictions, scores = multilabel_predictions(read["test"][0], read["test"][1], labels, probs, thresholds)
    write_json(paths.out, {**scores, "class_weights": weights})
    write_parquet(predictions, paths.predictions)
