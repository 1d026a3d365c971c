"""A blended export (issue 59): the fine-tune's calibrated probabilities and the saved
baseline's, p = w · model + (1 − w) · baseline, then the blend's own temperature; its
prediction sets are cut from its own validation scores. The export stage fits w and that
calibration on validation and serves the blend only where it scores a better validation
macro-F1 than the fine-tune alone (evaluate.blend); every path loads it through
inference.loading, so a text gets one answer from the folder, --table, REST and Spark, in
every format: where PyTorch serves (serve.format torch, or no ONNX format passed its check),
the export folder carries a copy of the PyTorch model for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from textclf.inference.base import TextPredictor
from textclf.inference.frames import check_texts
from textclf.model.calibration import Calibration, from_dict
from textclf.model.checksums import verify_folder
from textclf.model.exported import BASELINE_FILES, EXPORT_FILE
from textclf.model.linear_text import LinearText


def blended(p_model: np.ndarray, p_base: np.ndarray, weight: float) -> np.ndarray:
    """(N, C) calibrated model probabilities and the baseline's, in the same class order."""
    return (weight * p_model + (1.0 - weight) * p_base).astype(np.float32)


def baseline_proba(baseline: LinearText, texts: list[str], labels: list[str]) -> np.ndarray:
    """The saved baseline's (N, C) probabilities in `labels` order; a class it never saw in
    training: 0 (the fine-tune alone answers it)."""
    probs = baseline.predict_proba(texts)  # (N, C') in baseline.classes order
    return pd.DataFrame(probs, columns=baseline.classes).reindex(columns=labels, fill_value=0.0).to_numpy()


class BlendPredictor(TextPredictor):
    """An exported model's predictor (the OnnxPredictor, or the PyTorch Predictor of the copy
    a folder carries where PyTorch serves) with the baseline blended in: the same interface
    and columns."""

    def __init__(self, inner: TextPredictor, folder: str | Path, blend: dict):
        folder = Path(folder)
        verify_folder(folder, (EXPORT_FILE, *BASELINE_FILES))  # the weight and calibration too
        self.inner, self.labels = inner, list(inner.labels)
        self.thresholds: np.ndarray | None = None  # single-label only
        self.where = str(folder)
        self.baseline = LinearText(folder)
        self.weight = float(blend["weight"])
        self.calibration: Calibration = from_dict(blend["calibration"], str(folder / EXPORT_FILE))

    def raw_proba(self, texts: list[str]) -> np.ndarray:
        """The blend before its own temperature (what evaluate calibrates and checks)."""
        return blended(self.inner.predict_proba(texts), baseline_proba(self.baseline, texts, self.labels),
                       self.weight)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        check_texts(texts)
        return self.calibration.apply(self.raw_proba(list(texts))).astype(np.float32)
