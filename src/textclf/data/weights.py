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
