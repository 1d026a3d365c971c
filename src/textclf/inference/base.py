"""What every predictor is (`TextPredictor`: the PyTorch Predictor, the OnnxPredictor, the
BlendPredictor): its own probabilities (`predict_proba`), and on them, shared, the answer's
frame (`predict`) and the review it answers with (`set_review`). numpy and pandas only, so the
ONNX predictor builds on it without torch."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import pandas as pd

from textclf.inference.frames import answered_frame
from textclf.model.calibration import Calibration, Review, review_for


class TextPredictor(ABC):
    """What predict, serve and the champion check call. A predictor sets `labels`,
    `thresholds`, `calibration` and `where` (its folder, named in what it logs) when built."""
    labels: list[str]
    thresholds: np.ndarray | None  # multi-label: (C,) tuned on validation; None: one class per text
    calibration: Calibration | None  # single-label: the temperature and validation scores; None: none saved
    where: str
    review: Review | None = None  # serve.coverage and serve.review_below, where set (set_review)

    @abstractmethod
    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """(N, C) calibrated probabilities, in `labels` order."""

    def set_review(self, coverage: float | None, review_below: float) -> None:
        """Answer with prediction sets at `coverage` and the needs_review flag (serve.*)."""
        self.review = review_for(self.calibration, coverage, review_below, self.where,
                                 multilabel=self.thresholds is not None)

    def predict(self, texts: list[str]) -> pd.DataFrame:
        return answered_frame(self.predict_proba(list(texts)), self.labels, self.thresholds, self.review)
