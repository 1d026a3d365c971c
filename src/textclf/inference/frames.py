"""Prediction frames: the label, its probability and one `prob_<class>` column per class; the
inputs every predictor refuses, and its length-sorted batches. numpy and pandas only, so the
baseline and the ONNX predictor (no torch) share them."""
from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from textclf.common import UserError

PROB_PREFIX = "prob_"  # one column of probabilities per class


class TextPredictor(Protocol):
    """What predict, serve and the champion check call: the PyTorch Predictor and the
    OnnxPredictor alike."""
    labels: list[str]

    def predict_proba(self, texts: list[str]) -> np.ndarray: ...  # (N, C)

    def predict(self, texts: list[str]) -> pd.DataFrame: ...  # probability_frame's columns


def probability_frame(probs: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """(N, C) probabilities -> columns label (the most probable), probability (of that
    label), prob_<class> for every class."""
    best = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=int)
    frame = pd.DataFrame({"label": [labels[i] for i in best],
                          "probability": probs[np.arange(len(best)), best].astype(float)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i].astype(float)
    return frame


def check_texts(texts: list) -> None:
    """Refuse what no model can classify: a value that is not a string, an empty text."""
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise UserError(f"inputs {bad[:10]} are not strings (got "
                        f"{type(texts[bad[0]]).__name__}); pass one text per row.")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise UserError(f"inputs {empty[:10]} are empty or whitespace-only; there is nothing "
                        "to classify: send text, or drop those rows.")


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Longest first, for inference: least padding, and any out-of-memory shows up at once."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]
