"""Prediction frames: the label, its probability and one `prob_<class>` column per class; the
inputs every predictor refuses, and its length-sorted batches. numpy and pandas only, so the
baseline and the ONNX predictor (no torch) share them."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from textclf.errors import UserError
from textclf.data.labelsets import label_sets

if TYPE_CHECKING:  # the type only: the baseline, which shares these frames, needs no calibration
    from textclf.model.calibration import Review

PROB_PREFIX = "prob_"  # one column of probabilities per class
# The largest difference allowed between a text's probabilities scored alone and in any batch
# (any size, neighbours, padding), for every served format. ONNX float32 and per-row int8
# measured exactly 0 (each row computed from itself, integer products exact); PyTorch's float32
# kernels sum in an order that depends on the batch's shape: 1.2e-7 on MiniLM (2026-12-06,
# docs/benchmarks.md). 1e-6 covers that float rounding and is 40 000 times below the 0.04
# that per-batch int8 scales moved a probability.
SAME_ANSWER_ATOL = 1e-6


def predicted_frame(probs: np.ndarray, labels: list[str], thresholds: np.ndarray | None) -> pd.DataFrame:
    """A predictor's answer: probability_frame, or label_set_frame for a multi-label model."""
    return probability_frame(probs, labels) if thresholds is None else label_set_frame(probs, labels, thresholds)


def answered_frame(probs: np.ndarray, labels: list[str], thresholds: np.ndarray | None,
                   review: Review | None) -> pd.DataFrame:
    """predicted_frame, and with a `review` (serve.coverage, serve.review_below) its columns
    after the probabilities: a single-label model's prediction set `labels` (most probable
    first) and `set_size`, then `needs_review` for every model."""
    frame = predicted_frame(probs, labels, thresholds)
    if review is None:
        return frame
    size = None
    if thresholds is None and review.cut is not None:
        member = review.sets(probs)  # (N, C)
        order = np.argsort(-np.asarray(probs), axis=1, kind="stable")  # (N, C) most probable first
        names = np.asarray(labels, dtype=object)
        frame["labels"] = [names[row[m[row]]].tolist() for row, m in zip(order, member)]
        size = member.sum(axis=1)
        frame["set_size"] = size.astype(np.int64)
    frame["needs_review"] = review.flags(frame["probability"].to_numpy(), size)
    return frame


def probability_frame(probs: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """(N, C) probabilities -> columns label (the most probable), probability (of that
    label), prob_<class> for every class."""
    best = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=int)
    frame = pd.DataFrame({"label": [labels[i] for i in best],
                          "probability": probs[np.arange(len(best)), best].astype(float)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i].astype(float)
    return frame


def label_set_frame(probs: np.ndarray, labels: list[str], thresholds: np.ndarray) -> pd.DataFrame:
    """Multi-label (N, C) probabilities and (C,) thresholds -> columns labels (the list of
    every label at or above its threshold, sorted; [] for none), label (that set as the
    corpus writes it, '["politics", "sport"]'), probability (of exactly that set, the labels
    taken as independent: the product of p for each label given and 1 - p for each other),
    prob_<label> for every label."""
    probs = np.asarray(probs)
    hot = probs >= np.asarray(thresholds)
    sets = label_sets(hot, labels)
    frame = pd.DataFrame({"labels": [json.loads(s) for s in sets], "label": sets,
                          "probability": np.where(hot, probs, 1 - probs).prod(axis=1).astype(float)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i].astype(float)
    return frame


def judged_frame(doc_ids: list[str], y_true, probs: np.ndarray, labels: list[str],
                 thresholds: np.ndarray | None, review: Review | None = None) -> pd.DataFrame:
    """A split's per-document predictions beside its labels (evaluate's test predictions,
    train's validation ones): doc_id, label (given), predicted, correct and the predictor's
    columns (answered_frame's, with `review`). Multi-label: label and predicted are sets as
    the corpus writes them, correct is an exact match."""
    frame = answered_frame(probs, labels, thresholds, review).rename(columns={"label": "predicted"})
    frame.insert(0, "doc_id", doc_ids)
    given = [labels[i] for i in y_true] if thresholds is None else label_sets(np.asarray(y_true), labels)
    frame.insert(1, "label", given)
    frame.insert(4 if thresholds is None else 5, "correct", frame["label"] == frame["predicted"])
    return frame


def check_texts(texts: list) -> None:
    """Refuse what no model can classify: a value that is not a string, an empty text."""
    check_strings(texts)
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise UserError(f"inputs {empty[:10]} are empty or whitespace-only; there is nothing "
                        "to classify: send text, or drop those rows.")


def check_strings(texts: list) -> None:
    """Refuse a value that is not a string, naming its position and type."""
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise UserError(f"inputs {bad[:10]} are not strings (got "
                        f"{type(texts[bad[0]]).__name__}); pass one text per row.")


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Longest first, for inference: least padding, and any out-of-memory shows up at once."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
