"""Fitting a calibration: the temperature on a model's validation probabilities and the
validation scores prediction sets are cut from. Train fits the PyTorch model's
(calibration.json), the export stage each ONNX format's on its own probabilities (export.json);
textclf.model.calibration applies them, and scipy stays out of what a served model imports."""
from __future__ import annotations

import logging
import math

import numpy as np

from textclf.model.calibration import Calibration, lac_scores, nll, softmax_t

log = logging.getLogger(__name__)

LOW, HIGH = 0.05, 20.0  # the temperatures searched: beyond them a softmax is one-hot or uniform


def fit_temperature(probs: np.ndarray, y: np.ndarray) -> float:
    """The T in [LOW, HIGH] of the lowest validation NLL (bounded Brent on log T: the NLL is
    convex in 1/T)."""
    from scipy.optimize import minimize_scalar

    found = minimize_scalar(lambda log_t: nll(softmax_t(probs, math.exp(log_t)), y),
                            bounds=(math.log(LOW), math.log(HIGH)), method="bounded",
                            options={"xatol": 1e-6})
    return float(math.exp(found.x))


def fit(probs: np.ndarray, y: np.ndarray) -> Calibration:
    """(N, C) validation probabilities of a model (the kept weights, or an export of them) and
    (N,) given classes -> Calibration."""
    y = np.asarray(y)
    if (probs.argmax(axis=1) == y).all():
        # every document right: the NLL falls as T -> 0 with no minimum, and the fit would make
        # every probability 1 on the evidence of a few documents. INFO: a model right on all of
        # validation is healthy, and a healthy run says nothing alarming (issue 60)
        log.info("every one of the %d validation documents is predicted right, so no temperature can be "
                    "fitted (it would make every probability 1): the raw softmax is kept (temperature 1); "
                    "the prediction sets are cut from it", len(y))
        t = 1.0
    else:
        t = round(fit_temperature(probs, y), 6)  # as saved
    calibrated = softmax_t(probs, t)
    scores = np.sort(lac_scores(calibrated, y)).round(8)
    out = Calibration(temperature=t, scores=scores.tolist(), nll_before=round(nll(probs, y), 6),
                      nll_after=round(nll(calibrated, y), 6))
    log.info("temperature %.4f fitted on %d validation documents: NLL %.4f -> %.4f", t, len(y),
             out.nll_before, out.nll_after)
    if not LOW * 1.01 < t < HIGH / 1.01:  # the fit wanted further: the probabilities say little
        log.warning("the temperature %.4f is at its limit [%g, %g]: on these %d validation documents the "
                    "model's probabilities carry almost no information (too few documents, or an "
                    "undertrained model); the report compares test ECE before and after", t, LOW, HIGH, len(y))
    return out
