"""Class weights for imbalanced corpora (train.class_weights), one rule for the fine-tune's
loss and the TF-IDF baseline, so that the two stay comparable."""
from __future__ import annotations

import numpy as np

CLASS_WEIGHTS = ("none", "balanced")


def class_weights(labels, n_classes: int, mode: str) -> np.ndarray | None:
    """Integer training labels (N,) -> (C,) weights, or None for `none`. `balanced` is
    scikit-learn's: n / (k * n_c) over the k classes the training split holds, so a class's
    documents weigh in all as much as any other class's, and the mean weight of a training
    document is 1 (the loss keeps its scale, and the learning rates their meaning). A class
    with no training document gets 0: no document carries it."""
    if mode == "none":
        return None
    if mode != "balanced":
        raise ValueError(f"class weights {mode!r} is not one of {CLASS_WEIGHTS}")
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=n_classes).astype(np.float64)
    present = int((counts > 0).sum())
    return np.divide(counts.sum(), present * counts, out=np.zeros(n_classes), where=counts > 0)


def positive_weights(hot, mode: str) -> np.ndarray | None:
    """Multi-hot training labels (N, C) -> (C,) weights of each label's positive documents in
    its binary cross-entropy (`pos_weight`), or None for `none`. `balanced`: negatives over
    positives, so a label's positives weigh in all as much as its negatives, which is what
    scikit-learn's balanced weights give each one-vs-rest problem of the baseline (up to a
    factor common to both sides). A label with no positive training document gets 1."""
    if mode == "none":
        return None
    if mode != "balanced":
        raise ValueError(f"class weights {mode!r} is not one of {CLASS_WEIGHTS}")
    hot = np.asarray(hot, dtype=np.float64)
    positives = hot.sum(axis=0)
    return np.divide(len(hot) - positives, positives, out=np.ones(hot.shape[1]), where=positives > 0)
