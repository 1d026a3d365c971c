"""Class weights for imbalanced corpora (train.class_weights), one rule for the fine-tune's
loss and the TF-IDF baseline, so that the two stay comparable."""
from __future__ import annotations

import numpy as np

CLASS_WEIGHTS = ("none", "balanced", "auto")
# auto: balanced from this ratio of the largest training class to the smallest, none below it.
# On BBC with two classes cut (benchmarks/labels/class_weight_ratio.py, docs/heads_and_guards.md),
# balanced raised the baseline's macro-F1 in every seed from a ratio of 3, and moved it both
# ways at 2; BBC itself is 1.3 and the demo 1.0 (their models stay as they were), fortunes 53 (a 30 %
# cut), the standard library's docstrings 130 (benchmarks/recipes/many_class.py)
AUTO_RATIO = 3.0


def imbalance(labels) -> float:
    """The largest class's training documents over the smallest's, among the classes present,
    for integer or string labels (N,); for multi-hot rows (N, C), the largest of each present
    label's negatives over its positives: each label is its own binary task, so four labels
    each on 5 % of the documents are imbalanced 19 to 1 (compared with each other, they were 1)."""
    labels = np.asarray(labels)
    if labels.ndim == 2:
        positives = labels.sum(axis=0)
        positives = positives[positives > 0]
        return float(((len(labels) - positives) / positives).max()) if len(positives) else 1.0
    counts = np.unique(labels, return_counts=True)[1]
    counts = counts[counts > 0]
    return float(counts.max() / counts.min()) if len(counts) else 1.0


def resolve(mode: str, labels) -> str:
    """train.class_weights on these training labels -> `none` or `balanced`: auto is balanced
    from an imbalance of AUTO_RATIO, so a balanced corpus keeps its plain loss (and its model)."""
    if mode not in CLASS_WEIGHTS:
        raise ValueError(f"class weights {mode!r} is not one of {CLASS_WEIGHTS}")
    if mode != "auto":
        return mode
    return "balanced" if imbalance(labels) >= AUTO_RATIO else "none"


def class_weights(labels, n_classes: int, mode: str) -> np.ndarray | None:
    """Integer training labels (N,) -> (C,) weights, or None for `none` (and `auto` on a
    corpus below AUTO_RATIO: see resolve). `balanced` is
    scikit-learn's: n / (k * n_c) over the k classes the training split holds, so a class's
    documents weigh in all as much as any other class's, and the mean weight of a training
    document is 1 (the loss keeps its scale, and the learning rates their meaning). A class
    with no training document gets 0: no document carries it."""
    if resolve(mode, labels) == "none":
        return None
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=n_classes).astype(np.float64)
    present = int((counts > 0).sum())
    return np.divide(counts.sum(), present * counts, out=np.zeros(n_classes), where=counts > 0)


def positive_weights(hot, mode: str) -> np.ndarray | None:
    """Multi-hot training labels (N, C) -> (C,) weights of each label's positive documents in
    its binary cross-entropy (`pos_weight`), or None for `none`. `balanced`: negatives over
    positives, so a label's positives weigh in all as much as its negatives, which is what
    scikit-learn's balanced weights give each one-vs-rest problem of the baseline (up to a
    factor common to both sides). A label with no positive training document gets 1."""
    if resolve(mode, hot) == "none":
        return None
    hot = np.asarray(hot, dtype=np.float64)
    positives = hot.sum(axis=0)
    return np.divide(len(hot) - positives, positives, out=np.ones(hot.shape[1]), where=positives > 0)


def silent_advice(used: str) -> str:
    """What to try for a class the model never recalls, given the weighting the training used
    (`resolve`'s answer): advising `balanced` when auto chose it already sends a person in a circle."""
    if used == "balanced":
        return ("the loss weights the classes already (train.class_weights resolved to balanced): give that "
                "class more documents, or train longer (train.epochs)")
    return "try train.class_weights: balanced, more documents of that class, or more epochs (train.epochs)"
