"""Prediction frames: the label, its probability and one `prob_<class>` column per class.
numpy and pandas only, so the baseline (no torch) writes the same columns."""
from __future__ import annotations

import numpy as np
import pandas as pd

PROB_PREFIX = "prob_"  # one column of probabilities per class


def probability_frame(probs: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """(N, C) probabilities -> columns label (the most probable), probability (of that
    label), prob_<class> for every class."""
    best = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=int)
    frame = pd.DataFrame({"label": [labels[i] for i in best],
                          "probability": probs[np.arange(len(best)), best].astype(float)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i].astype(float)
    return frame
