"""Several labels per document: scores of multi-hot predictions, the per-label thresholds
tuned on validation. numpy only, as metrics.py; scikit-learn's formulas with zero_division=0.

A document's prediction is every label whose sigmoid probability reaches that label's
threshold. Each threshold maximises the label's F1 on the validation split (ties to the one
nearest 0.5); the test split never chooses one.
"""
from __future__ import annotations

import numpy as np

from textclf.data.labelsets import hot, labels_of

DEFAULT_THRESHOLD = 0.5  # a label with no validation document keeps it: nothing to tune on


def binary_counts(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, ...]:
    """(N, C) multi-hot truth and prediction -> true positives, false positives, false
    negatives per label, (C,) each."""
    y_true, y_pred = np.asarray(y_true, dtype=bool), np.asarray(y_pred, dtype=bool)
    return ((y_true & y_pred).sum(axis=0), (~y_true & y_pred).sum(axis=0), (y_true & ~y_pred).sum(axis=0))


def _ratio(num, den) -> np.ndarray:
    num = np.asarray(num, dtype=float)
    return np.divide(num, den, out=np.zeros_like(num), where=np.asarray(den) > 0)


def multilabel_scores(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Subset accuracy (`accuracy`: the whole label set right), macro-F1 over the labels,
    micro-F1 over every (document, label) decision, and Hamming loss (the share of those
    decisions wrong). Each F1 is scikit-learn's with zero_division=0."""
    y_true, y_pred = np.asarray(y_true, dtype=bool), np.asarray(y_pred, dtype=bool)
    tp, fp, fn = binary_counts(y_true, y_pred)
    return {"accuracy": float((y_true == y_pred).all(axis=1).mean()),
            "macro_f1": float(_ratio(2 * tp, 2 * tp + fp + fn).mean()),
            "micro_f1": float(_ratio(2 * tp.sum(), 2 * tp.sum() + fp.sum() + fn.sum())),
            "hamming_loss": float((y_true != y_pred).mean())}


def per_label(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict[str, dict]:
    """Per label: precision, recall, F1 and support (documents that carry it)."""
    tp, fp, fn = binary_counts(y_true, y_pred)
    precision, recall, f1 = _ratio(tp, tp + fp), _ratio(tp, tp + fn), _ratio(2 * tp, 2 * tp + fp + fn)
    return {label: {"precision": float(precision[i]), "recall": float(recall[i]), "f1": float(f1[i]),
                    "support": int(tp[i] + fn[i])} for i, label in enumerate(labels)}


def best_threshold(y: np.ndarray, p: np.ndarray) -> float:
    """One label: (N,) truth and probabilities -> the threshold of the highest F1, among the
    midpoints between consecutive distinct probabilities (and beyond both ends); ties go to
    the threshold nearest 0.5. No positive document: 0.5."""
    y, p = np.asarray(y, dtype=bool), np.asarray(p, dtype=float)
    if not y.any():
        return DEFAULT_THRESHOLD
    values = np.unique(p)
    candidates = np.concatenate([[values[0] / 2], (values[:-1] + values[1:]) / 2, [(values[-1] + 1) / 2]])
    predicted = p[None, :] >= candidates[:, None]  # (K, N)
    tp = (predicted & y).sum(axis=1)
    f1 = 2 * tp / (predicted.sum(axis=1) + y.sum())
    best = np.flatnonzero(f1 == f1.max())
    return float(candidates[best[np.argmin(np.abs(candidates[best] - DEFAULT_THRESHOLD))]])


def tune_thresholds(y_true: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """(N, C) validation truth and probabilities -> (C,) thresholds, each label's best_threshold."""
    return np.array([best_threshold(y_true[:, i], probs[:, i]) for i in range(probs.shape[1])])


def decide(probs: np.ndarray, thresholds: np.ndarray | float = DEFAULT_THRESHOLD) -> np.ndarray:
    """(N, C) probabilities -> (N, C) bool: every label at or above its threshold."""
    return np.asarray(probs) >= np.asarray(thresholds)


def bce(probs: np.ndarray, y_true: np.ndarray) -> float:
    """Mean binary cross-entropy over every (document, label): the multi-label validation loss."""
    p = np.clip(np.asarray(probs, dtype=float), 1e-12, 1 - 1e-12)
    y = np.asarray(y_true, dtype=float)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def label_confusion(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict[str, dict[str, int]]:
    """{actual label: {predicted label: documents}}: documents carrying the row's label that
    the model gives the column's (the diagonal is each label's true positives; a document
    counts once in every cell of its labels' rows and its predictions' columns)."""
    counts = np.asarray(y_true, dtype=np.int64).T @ np.asarray(y_pred, dtype=np.int64)  # (C, C)
    return {a: {p: int(counts[i, j]) for j, p in enumerate(labels)} for i, a in enumerate(labels)}


def multilabel_test_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict:
    """test_metrics' keys for a multi-label model (accuracy is subset accuracy), plus micro-F1
    and Hamming loss; `confusion` is label_confusion."""
    return {**multilabel_scores(y_true, y_pred), "n_test": int(len(y_true)), "task": "multilabel",
            "per_class": per_label(y_true, y_pred, labels), "confusion": label_confusion(y_true, y_pred, labels)}


def per_label_recall(labels: list[str], y_true: np.ndarray, model: np.ndarray, baseline: np.ndarray) -> dict:
    """per_class_accuracy's form: {label: {support, model, baseline}}, the share of the label's
    documents each system gives the label (its recall)."""
    y_true, model, baseline = (np.asarray(v, dtype=bool) for v in (y_true, model, baseline))
    support = y_true.sum(axis=0)
    return {label: {"support": int(support[i]),
                    "model": float((model[:, i] & y_true[:, i]).sum() / support[i]) if support[i] else 0.0,
                    "baseline": float((baseline[:, i] & y_true[:, i]).sum() / support[i]) if support[i] else 0.0}
            for i, label in enumerate(labels)}


def set_scores(y_true, y_pred) -> dict[str, float]:
    """multilabel_scores of label sets as the corpus writes them (over every label either holds)."""
    labels = sorted({label for s in [*y_true, *y_pred] for label in labels_of(s)})
    return multilabel_scores(hot(y_true, labels), hot(y_pred, labels))
