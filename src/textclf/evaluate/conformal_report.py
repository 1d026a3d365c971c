"""evaluate's confidence numbers (issue 41, docs/calibration.md): calibration before and after
the temperature, the prediction sets' coverage on test, the review flag, and the
coverage-accuracy curve a team picks serve.review_below from. numpy and pandas only: the
report stage (no torch) draws the curve from the test predictions with the same function."""
from __future__ import annotations

import numpy as np
import pandas as pd

from textclf.evaluate.metrics import brier, calibration

# serve.review_below values the curve is drawn at: 0 (never flagged for its probability) to 0.95
REVIEW_STEPS = tuple(round(0.05 * i, 2) for i in range(20))


def calibration_scores(raw: np.ndarray, served: np.ndarray, y: np.ndarray, temperature: float | None) -> dict:
    """Raw and served (calibrated) (N, C) probabilities of single-label test documents with
    their (N,) classes -> ece, ece_raw, brier, brier_raw, temperature (1.0: none fitted), and
    calibration_warning where the temperature made test ECE worse."""
    correct = raw.argmax(axis=1) == y  # a temperature keeps every argmax: one `correct` for both
    out = {"ece": calibration(served.max(axis=1), correct)["ece"],
           "ece_raw": calibration(raw.max(axis=1), correct)["ece"],
           "brier": brier(served, y), "brier_raw": brier(raw, y),
           "temperature": 1.0 if temperature is None else float(temperature)}
    warning = calibration_warning(out)
    return out | ({"calibration_warning": warning} if warning else {})


def calibration_warning(scores: dict) -> str | None:
    """A line for a calibration that made test ECE worse than the raw softmax's: the report
    shows it near the headline rather than a silent "improvement"."""
    if scores.get("ece_raw") is None or scores["ece"] <= scores["ece_raw"]:
        return None
    return (f"calibration made test ECE worse: {scores['ece_raw']:.4f} before, {scores['ece']:.4f} after "
            f"(temperature {scores.get('temperature', 1.0):.3f} fitted on validation); validation may be too "
            "small or unlike test: look at the reliability diagrams, or set train.calibration: none")


def set_metrics(frame: pd.DataFrame, labels: list[str], coverage: float, unguaranteed: str | None = None) -> dict:
    """A single-label test frame with prediction sets (`labels`, `set_size`) -> coverage_target,
    coverage (share of documents whose set holds their label), mean_size, sizes ({size:
    count}), empty_sets, per_class_coverage ({class: share}; None without test documents)
    and never_covered (classes with test documents none of whose sets holds them); with
    `unguaranteed` (validation too small for the coverage: every class in every set), that line."""
    covered = np.array([given in chosen for given, chosen in zip(frame["label"], frame["labels"])], dtype=bool)
    sizes = frame["set_size"].to_numpy()
    per_class = {c: (float(covered[(frame["label"] == c).to_numpy()].mean())
                     if (frame["label"] == c).any() else None) for c in labels}
    return {"coverage_target": float(coverage), "coverage": float(covered.mean()) if len(covered) else 0.0,
            "mean_size": float(sizes.mean()) if len(sizes) else 0.0,
            "sizes": {str(k): int(v) for k, v in sorted(pd.Series(sizes).value_counts().items())},
            "empty_sets": int((sizes == 0).sum()), "per_class_coverage": per_class,
            "never_covered": [c for c, share in per_class.items() if share == 0.0]} | (
        {"unguaranteed": unguaranteed} if unguaranteed else {})


def review_metrics(frame: pd.DataFrame, review_below: float) -> dict:
    """A judged frame with `needs_review` -> review_below, flagged (count), flagged_share,
    answered_accuracy (on the documents not flagged; None when all are) and accuracy (all)."""
    flagged = frame["needs_review"].to_numpy(dtype=bool)
    correct = frame["correct"].to_numpy(dtype=bool)
    n = len(frame)
    return {"review_below": float(review_below), "flagged": int(flagged.sum()),
            "flagged_share": float(flagged.mean()) if n else 0.0,
            "answered_accuracy": float(correct[~flagged].mean()) if (~flagged).any() else None,
            "accuracy": float(correct.mean()) if n else 0.0}


def review_curve(frame: pd.DataFrame, steps=REVIEW_STEPS) -> pd.DataFrame:
    """Per review_below step: the share of documents answered (served top probability at or
    above it) and the accuracy on them; with prediction sets (`set_size`), the same where a
    set of other than one label is flagged too (serve's rule). Accuracy is empty where
    nothing is answered."""
    probability = frame["probability"].to_numpy(dtype=float)
    correct = frame["correct"].to_numpy(dtype=bool)
    single = frame["set_size"].to_numpy() == 1 if "set_size" in frame else None
    rows = []
    for step in steps:
        row = {"review_below": step, **_answered(probability >= step, correct, "")}
        if single is not None:
            row |= _answered((probability >= step) & single, correct, "_sets")
        rows.append(row)
    return pd.DataFrame(rows)


def _answered(answered: np.ndarray, correct: np.ndarray, suffix: str) -> dict:
    share = float(answered.mean()) if len(answered) else 0.0
    accuracy = float(correct[answered].mean()) if answered.any() else None
    return {f"answered_share{suffix}": round(share, 6),
            f"accuracy{suffix}": np.nan if accuracy is None else round(accuracy, 6)}  # NaN: an empty CSV cell


def uncalibrated(probs: np.ndarray, temperature: float) -> np.ndarray:
    """Served (N, C) probabilities back to the raw softmax: softmax(log p / T) undone is p^T
    normalised (the report draws the reliability before calibration from the test predictions)."""
    powered = np.asarray(probs, dtype=float) ** temperature
    return powered / powered.sum(axis=1, keepdims=True)
