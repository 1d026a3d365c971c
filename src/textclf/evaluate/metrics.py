"""Test-set metrics: accuracy, macro-F1, per-class precision/recall/F1, confusion matrix.

Plain numpy, not scikit-learn: importing sklearn.metrics (and scipy under it) costs about a
second in each stage that scores, and train, evaluate and report need nothing else from it.
The formulas are sklearn's with zero_division=0 (tests/test_evaluation.py checks them).
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter

import numpy as np

from textclf.errors import UserError



def confusion(y_true: np.ndarray, y_pred: np.ndarray, n: int) -> np.ndarray:
    """(n, n) counts for integer classes 0..n-1; rows actual, columns predicted."""
    return np.bincount(np.asarray(y_true) * n + np.asarray(y_pred), minlength=n * n).reshape(n, n)


def per_class_scores(matrix: np.ndarray) -> tuple[np.ndarray, ...]:
    """-> precision, recall, F1, support per class; 0 where a ratio has nothing to count."""
    tp = np.diag(matrix).astype(float)
    predicted, support = matrix.sum(axis=0), matrix.sum(axis=1)
    fp, fn = predicted - tp, support - tp

    def ratio(num, den):
        return np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den > 0)
    return ratio(tp, predicted), ratio(tp, support), ratio(2 * tp, 2 * tp + fp + fn), support


def classification_scores(y_true, y_pred) -> dict[str, float]:
    """Accuracy and macro-F1 over the classes seen in either (labels of any type)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    classes = np.union1d(y_true, y_pred)
    matrix = confusion(np.searchsorted(classes, y_true), np.searchsorted(classes, y_pred), len(classes))
    return {"accuracy": float((y_true == y_pred).mean()),
            "macro_f1": float(per_class_scores(matrix)[2].mean())}


def test_metrics(y_true: np.ndarray, y_pred: np.ndarray, labels: list[str]) -> dict:
    matrix = confusion(y_true, y_pred, len(labels))  # rows: actual, columns: predicted
    precision, recall, f1, support = per_class_scores(matrix)
    return {
        **classification_scores(y_true, y_pred),
        "n_test": int(len(y_true)),
        "per_class": {label: {"precision": float(precision[i]), "recall": float(recall[i]),
                              "f1": float(f1[i]), "support": int(support[i])}
                      for i, label in enumerate(labels)},
        "confusion": {actual: {pred: int(matrix[i, j]) for j, pred in enumerate(labels)}
                      for i, actual in enumerate(labels)},
    }


def metric_names(labels: list[str]) -> dict[str, str]:
    """Class name -> the name its metrics get in MLflow, one-to-one. MLflow keys allow
    letters, digits, _ - . space and /; a name that needed replacing gets `-` and 6 hex
    digits of its md5, so `C++` (`C__-<hash>`) never meets a class named `C__`, and accent-only
    variants (`Ünïcode`, `Ųnïcode`) stay apart. Logged as class_names.json."""
    names = {}
    for label in labels:
        safe = re.sub(r"[^\w\-. /]", "_", label, flags=re.ASCII)
        names[label] = safe if safe == label else f"{safe}-{hashlib.md5(label.encode()).hexdigest()[:6]}"
    taken = Counter(names.values())
    for label, name in names.items():  # a class literally named like another's hashed name
        if taken[name] > 1 and name == label:
            names[label] = f"{label}-{hashlib.md5(label.encode()).hexdigest()[:6]}"
    if len(set(names.values())) != len(names):
        raise UserError(f"class names {sorted(labels)} map to colliding MLflow metric names "
                         f"{sorted(names.values())}; rename a class folder.")
    return names


def mlflow_metrics(metrics: dict) -> dict[str, float]:
    flat = {"test_accuracy": metrics["accuracy"], "test_macro_f1": metrics["macro_f1"],
            "test_ece": metrics["ece"]}
    for name in ("accuracy", "macro_f1"):
        flat[f"baseline_{name}"] = metrics["baseline"][name]
        flat[f"gap_{name}"] = metrics["gap"][name]
    for name in ("micro_f1", "hamming_loss"):  # a multi-label model's (accuracy is subset accuracy)
        if name in metrics:
            flat[f"test_{name}"], flat[f"baseline_{name}"] = metrics[name], metrics["baseline"][name]
    names = metric_names(list(metrics["per_class"]))
    for label, scores in metrics["per_class"].items():
        for name in ("precision", "recall", "f1"):
            flat[f"test_{name}.{names[label]}"] = scores[name]
    cmp = metrics.get("comparison") or {}
    for name in ("mcnemar_p", "ci_low", "ci_high", "model_only", "baseline_only"):
        if name in cmp:
            flat[f"vs_baseline_{name}"] = cmp[name]
    for name, value in (metrics.get("ensemble") or {}).items():
        flat[f"ensemble_{name}"] = value
    blend = metrics.get("blend") or {}  # the served blend (serve.blend), scored on test
    for name in ("weight", "accuracy", "macro_f1"):
        if name in blend:
            flat[f"blend_{name}"] = blend[name]
    if blend:
        flat["blend_vs_baseline_mcnemar_p"] = blend["comparison"]["mcnemar_p"]
    return flat | confidence_metrics(metrics, names)


def confidence_metrics(metrics: dict, names: dict[str, str]) -> dict[str, float]:
    """Calibration, prediction sets and the review flag (issue 41), named as the rest:
    test_<score>, and test_set_coverage.<MLflow name> per class."""
    flat = {f"test_{k}": metrics[k] for k in ("ece_raw", "brier", "brier_raw") if metrics.get(k) is not None}
    if metrics.get("temperature") is not None:
        flat["calibration_temperature"] = metrics["temperature"]
    sets = metrics.get("sets") or {}
    for name in ("coverage", "mean_size", "empty_sets"):
        if name in sets:
            flat[f"test_set_{name}"] = sets[name]
    for label, share in (sets.get("per_class_coverage") or {}).items():
        if share is not None:
            flat[f"test_set_coverage.{names[label]}"] = share
    review = metrics.get("review") or {}
    for name in ("flagged", "flagged_share", "answered_accuracy"):
        if review.get(name) is not None:
            flat[f"test_review_{name}"] = review[name]
    return flat


def brier(probs: np.ndarray, y: np.ndarray) -> float:
    """Multi-class Brier score: the mean over documents of sum over classes (p - one-hot)^2
    (0 best, 2 worst)."""
    probs = np.asarray(probs, dtype=float)  # (N, C)
    if not len(probs):
        return 0.0
    onehot = np.eye(probs.shape[1])[np.asarray(y)]  # (N, C)
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def calibration(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> dict:
    """Reliability table over equal-width confidence bins and the expected calibration
    error: ECE = sum over bins of (bin share) * |accuracy - mean confidence|."""
    confidence, correct = np.asarray(confidence, dtype=float), np.asarray(correct, dtype=float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    # right-closed bins, so a confidence of exactly 1.0 falls in the last one
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        mask = which == b
        if not mask.any():
            continue
        conf, acc = float(confidence[mask].mean()), float(correct[mask].mean())
        ece += mask.mean() * abs(acc - conf)
        rows.append({"low": float(edges[b]), "high": float(edges[b + 1]), "count": int(mask.sum()),
                     "confidence": conf, "accuracy": acc})
    return {"ece": float(ece), "bins": rows}
