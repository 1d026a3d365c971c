"""Calibrated probabilities and prediction sets (docs/calibration.md). numpy only: the ONNX
predictor (no torch) applies them as the PyTorch one does; train fits them for the PyTorch
model and the export stage for each ONNX format (textclf.model.temperature, scipy).

- Temperature scaling (Guo et al., 2017): one scalar T fitted on validation by the negative
  log-likelihood; p = softmax(log p_raw / T). Labels never change (argmax is kept).
- Split-conformal sets with the LAC score 1 - p(given label) (Sadinle et al., 2019): the
  validation documents' scores, sorted, are saved with the model; a coverage 1 - alpha is
  then the ceil((n + 1)(1 - alpha))-th smallest score q, and a document's set every label
  with p >= 1 - q. On exchangeable data the set holds the true label with probability at
  least 1 - alpha (tests/test_calibration.py checks it against crepes). Fewer than
  needed_documents scores have no such q: every label is in the set (crepes' infinite
  threshold) and every answer needs_review (docs/few_shot.md).
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textclf.errors import UserError
from textclf.coverage import too_few

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"
TINY = 1e-12  # log(0) guard: a float32 softmax can round a probability to 0
SAID: set[tuple[int, float]] = set()  # (documents, coverage) whose too_few line was logged (warn_once)


def softmax_t(probs: np.ndarray, temperature: float) -> np.ndarray:
    """(N, C) probabilities -> the same at temperature T: softmax(log p / T)."""
    z = np.log(np.clip(np.asarray(probs, dtype=np.float64), TINY, None)) / temperature  # (N, C)
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def nll(probs: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-likelihood of the (N,) given classes."""
    return float(-np.log(np.clip(probs[np.arange(len(y)), y], TINY, None)).mean())


def lac_scores(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(N,) conformity scores: 1 - the probability of each document's given class."""
    return 1.0 - probs[np.arange(len(y)), y]


def conformal_threshold(scores: np.ndarray, coverage: float) -> float | None:
    """The ceil((n + 1) * coverage)-th smallest of n validation scores; None where n is too
    few for that (no finite threshold: every label belongs in the set, as crepes answers)."""
    n = len(scores)
    k = math.ceil((n + 1) * coverage - 1e-9)
    if k > n:
        return None
    return float(np.sort(scores)[k - 1])


@dataclass(frozen=True)
class Calibration:
    """What the model carries (calibration.json): the temperature and the validation scores."""
    temperature: float
    scores: list[float]  # sorted LAC scores of the validation documents, at `temperature`
    nll_before: float
    nll_after: float

    def apply(self, probs: np.ndarray) -> np.ndarray:
        if self.temperature == 1.0:  # kept raw (validation all right): the very numbers, not a float round trip
            return probs
        return softmax_t(probs, self.temperature)

    def to_dict(self) -> dict:
        return {"method": "temperature", "temperature": self.temperature, "documents": len(self.scores),
                "nll_before": self.nll_before, "nll_after": self.nll_after, "scores": self.scores}


def from_dict(data: dict, where: str) -> Calibration:
    try:
        return Calibration(temperature=float(data["temperature"]), scores=[float(s) for s in data["scores"]],
                           nll_before=float(data["nll_before"]), nll_after=float(data["nll_after"]))
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"{where}: its calibration is malformed ({err!r}); retrain the model "
                        "(dvc repro train) or restore the file.") from None


def save(calibration: Calibration, folder: str | Path) -> None:
    Path(folder, CALIBRATION_FILE).write_text(json.dumps(calibration.to_dict(), indent=1))


def load(folder: str | Path) -> Calibration | None:
    """The folder's calibration, or None for a folder saved before models carried one (its
    probabilities are served raw, and it says so once)."""
    path = Path(folder, CALIBRATION_FILE)
    if not path.is_file():
        no_calibration(folder)
        return None
    return from_dict(json.loads(path.read_text()), str(path))


def no_calibration(where: str | Path) -> None:
    """A single-label model without a calibration, said once a process: served as before.
    (A stage loads its model several times, each format and each check: a repro said it 9 times.)"""
    if _say_once(f"{Path(where).resolve()}"):
        log.warning("%s has no calibration (a model saved before models carried one, or train.calibration: "
                    "none): its probabilities are the raw softmax and it gives no prediction sets", where)


_SAID: set[str] = set()


def _say_once(key: str) -> bool:
    """True the first time this process asks for `key`."""
    first = key not in _SAID
    _SAID.add(key)
    return first


@dataclass(frozen=True)
class Review:
    """What a served answer adds (serve.coverage, serve.review_below): a single-label model's
    prediction set at `coverage` (labels with a calibrated probability >= `cut`), its size,
    and needs_review: a set of other than one label, or a top probability (a multi-label
    model's: its label set's) below `review_below`."""
    coverage: float | None  # None: no sets, the flag from the probability alone
    review_below: float
    cut: float | None = None  # 1 - the conformal threshold; 0: every label (validation too small)
    unguaranteed: str | None = None  # too_few's line: the coverage has no threshold, every answer is flagged

    def flags(self, probability: np.ndarray, set_size: np.ndarray | None) -> np.ndarray:
        flagged = np.asarray(probability) < self.review_below
        if self.unguaranteed:
            return np.ones_like(flagged)
        return flagged if set_size is None else flagged | (set_size != 1)

    def sets(self, probs: np.ndarray) -> np.ndarray:
        """(N, C) calibrated probabilities -> (N, C) membership of each label in the set."""
        return np.asarray(probs) >= self.cut

    def to_config(self) -> dict:
        return {"coverage": self.coverage, "review_below": self.review_below}


def warn_once(n: int, coverage: float, line: str | None) -> None:
    """too_few's line once a process per (documents, coverage): evaluate and train load the
    same calibration in several formats and copies."""
    if (n, coverage) not in SAID:
        SAID.add((n, coverage))
        log.warning("%s", line)


def review_for(calibration: Calibration | None, coverage: float | None, review_below: float,
               where: str, multilabel: bool = False) -> Review:
    """serve.coverage and serve.review_below for a model with `calibration` (None: one saved
    without: no sets, it says why). A multi-label model's answer is a set already: the flag
    alone, and its serve.coverage is still checked."""
    if coverage is not None and not 0 < coverage < 1:
        raise UserError(f"serve.coverage={coverage} must be in (0, 1): the share of answers whose "
                        "prediction set holds the true label, e.g. 0.9.")
    if not 0 <= review_below <= 1:
        raise UserError(f"serve.review_below={review_below} must be in [0, 1]: a top probability under "
                        "it flags the answer needs_review (0: never for that reason).")
    if multilabel:
        return Review(coverage=None, review_below=review_below)
    if coverage is None or calibration is None:
        if coverage is not None and _say_once(f"{where} {coverage}"):
            log.warning("%s has no calibration: no prediction sets at serve.coverage=%s", where, coverage)
        return Review(coverage=None, review_below=review_below)
    threshold = conformal_threshold(np.asarray(calibration.scores), coverage)
    if threshold is None:  # no finite threshold: every label in every set, every answer flagged
        line = too_few(len(calibration.scores), coverage, where)
        warn_once(len(calibration.scores), coverage, line)
        return Review(coverage=coverage, review_below=review_below, cut=0.0, unguaranteed=line)
    if threshold >= WHOLE_SET and _say_once(f"{where} whole {coverage}"):  # guaranteed, but sets of every class
        log.warning("%s", whole_sets(np.asarray(calibration.scores), coverage, where))
    return Review(coverage=coverage, review_below=review_below, cut=1.0 - threshold)


# a conformal threshold this close to 1: its cut (1 - it) lets nearly every class into every set
WHOLE_SET = 0.999


def whole_sets(scores: np.ndarray, coverage: float, where: str) -> str:
    """The line for a coverage whose threshold is a validation document its judges all but ruled
    out (its label got under 0.001): every set holds (nearly) every class. The validation
    scores guarantee it, and answer nothing useful; names the largest coverage that does."""
    steps = [c / 100 for c in range(int(round(coverage * 100)) - 1, 49, -1)]
    useful = next((c for c in steps if (t := conformal_threshold(scores, c)) is not None and t < WHOLE_SET), None)
    return (f"serve.coverage={coverage} on {where}'s {len(scores)} validation documents: its threshold is a document "
            "whose label got a probability under 0.001, so every prediction set holds nearly every class"
            + (f"; serve.coverage {useful} gives sets that tell classes apart" if useful else ""))
