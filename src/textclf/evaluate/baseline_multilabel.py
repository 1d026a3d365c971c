"""The baseline for several labels per document: the same TF-IDF features, one logistic
regression per label (one-vs-rest), each label's threshold tuned on the validation split as
the fine-tune's are, so the two are compared like for like on the test split.

In memory only: past baseline.hashing_from training documents the single-label baseline
hashes its features and learns by SGD; the multi-label one stops and says so instead.
"""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline

from textclf.config import BaselineParams
from textclf.errors import UserError
from textclf.data.labelsets import hot, label_sets, labels_of
from textclf.data.weights import resolve
from textclf.evaluate.baseline import fit_tfidf, tfidf
from textclf.evaluate.multilabel import decide, multilabel_scores, tune_thresholds
from textclf.inference.frames import PROB_PREFIX

log = logging.getLogger(__name__)


def fit_sets(texts: list[str], y: np.ndarray, cfg: BaselineParams, weights: str):
    """The multi-label baseline's one fit, for the baseline stage and every labels fold: texts,
    (N, C) multi-hot -> the single-label baseline's features and a logistic regression per
    label (a label with one answer in y predicts that answer). In memory only: past
    baseline.hashing_from documents it stops and says so."""
    if len(texts) >= cfg.hashing_from:
        raise UserError(f"{len(texts)} training documents >= baseline.hashing_from={cfg.hashing_from}: the "
                        "multi-label baseline fits in memory only; raise baseline.hashing_from if "
                        "this machine holds the TF-IDF matrix (about 1 GB per 100 000 documents).")
    # lbfgs, as before issue 50: a binary regression holds ten gradients of n-grams, not of
    # n-grams x classes; and on the demo's multi-label table SGD's probabilities flagged 4-6
    # of 54 clean rows where the regression's flagged 1-2 (docs/benchmarks.md)
    model = LogisticRegression(C=cfg.C, max_iter=2000, random_state=cfg.seed,
                               class_weight="balanced" if weights == "balanced" else None)
    pipeline = make_pipeline(tfidf(cfg), OneVsRestClassifier(model))
    fit_tfidf(pipeline, texts, y, cfg.min_df)
    return pipeline


def fit_multilabel(texts: dict[str, list[str]], sets: dict[str, np.ndarray], cfg: BaselineParams,
                   weights: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Per split (train, validation, test) its texts and label sets -> (labels, validation-tuned
    thresholds (C,), test probabilities (N, C)). weights: train.class_weights; `balanced`
    weighs each label's positives and negatives alike in its regression, as the fine-tune's
    positive weights do."""
    labels = sorted({label for s in sets["train"] for label in labels_of(s)})
    weights = resolve(weights, hot(sets["train"], labels))  # auto: as the fine-tune resolves it
    model = fit_sets(texts["train"], hot(sets["train"], labels), cfg, weights)
    thresholds = tune_thresholds(hot(sets["validation"], labels), model.predict_proba(texts["validation"]))
    return labels, thresholds, model.predict_proba(texts["test"])


def multilabel_predictions(doc_ids, test_sets, labels: list[str], probs: np.ndarray,
                           thresholds: np.ndarray) -> tuple[pd.DataFrame, dict]:
    """-> (per test document: doc_id, label, predicted (label sets), prob_<label>; the scores)."""
    predicted = decide(probs, thresholds)
    frame = pd.DataFrame({"doc_id": doc_ids, "label": test_sets, "predicted": label_sets(predicted, labels)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i]
    scores = multilabel_scores(hot(test_sets, labels), predicted)
    log.info("multi-label baseline (one-vs-rest, thresholds tuned on validation): %s", scores)
    return frame, {**scores, "thresholds": dict(zip(labels, np.round(thresholds, 6).tolist()))}
