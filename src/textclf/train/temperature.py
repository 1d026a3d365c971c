"""Fitting what calibration.json holds, at the end of training: the temperature on the kept
weights' validation probabilities and the validation scores prediction sets are cut from
(textclf.model.calibration applies them; scipy stays out of what a served model imports)."""
from __future__ import annotations

import logging
import math

import numpy as np

from textclf.model.calibration import Calibration, lac_scores, nll, softmax_t

log = logging.getLogger(__name__)


def fit_temperature(probs: np.ndarray, y: np.ndarray) -> float:
    """The T in [0.05, 20] of the lowest validation NLL (bounded Brent on log T: the NLL is
    convex in 1/T)."""
    from scipy.optimize import minimize_scalar

    found = minimize_scalar(lambda log_t: nll(softmax_t(probs, math.exp(log_t)), y),
                            bounds=(math.log(0.05), math.log(20.0)), method="bounded",
                            options={"xatol": 1e-6})
    return float(math.exp(found.x))


def fit(probs: np.ndarray, y: np.ndarray) -> Calibration:
    """(N, C) validation probabilities of the kept weights and (N,) given classes -> Calibration."""
    y = np.asarray(y)
    t = round(fit_temperature(probs, y), 6)  # as saved
    calibrated = softmax_t(probs, t)
    scores = np.sort(lac_scores(calibrated, y)).round(8)
    out = Calibration(temperature=t, scores=scores.tolist(), nll_before=round(nll(probs, y), 6),
                      nll_after=round(nll(calibrated, y), 6))
    log.info("temperature %.4f fitted on %d validation documents: NLL %.4f -> %.4f", t, len(y),
             out.nll_before, out.nll_after)
    return out
