"""A table's rows and why some cannot be scored (`skip_reason`): shared by `predict --table`
and the pyfunc's table mode (what Spark scoring calls), so both skip the same rows for the
same reasons and score the others in the same batches. numpy and pandas only."""
from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from textclf.inference.frames import PROB_PREFIX, answered_frame

if TYPE_CHECKING:  # the type only
    from textclf.model.calibration import Review


class Skip(StrEnum):
    """Why a row has no prediction: its `skip_reason`."""
    MISSING_TEXT = "missing_text"
    NON_STRING = "non_string"
    EMPTY_TEXT = "empty_text"
    MALFORMED_LINE = "malformed_line"  # a CSV row with the wrong number of fields, a line not a JSON object


class Scorer(Protocol):
    """What scoring needs of a predictor (PyTorch or exported): nothing else."""
    labels: list[str]
    thresholds: np.ndarray | None  # a multi-label model's; None: one class per text
    review: Review | None  # prediction sets and needs_review (serve.coverage, serve.review_below)

    def predict_proba(self, texts: list[str]) -> np.ndarray: ...


def skip_reason(flag: Skip | None, text) -> Skip | None:
    """The reader's own reason (`flag`) first, else what the text says: None when it can be
    scored."""
    if flag is not None:
        return flag
    if text is None or (isinstance(text, float) and np.isnan(text)):  # pandas' missing string
        return Skip.MISSING_TEXT
    if not isinstance(text, str):
        return Skip.NON_STRING
    return None if text.strip() else Skip.EMPTY_TEXT


def scored(texts: list, flags: list, scorer: Scorer) -> tuple[pd.DataFrame, list[Skip | None]]:
    """-> (answered_frame of the rows that can be scored, in order; every row's reason). The
    scorable rows go to the model together, as one call: a chunk of --table, a batch of Spark."""
    reasons = [skip_reason(f, t) for f, t in zip(flags, texts)]
    ok = [t for t, r in zip(texts, reasons) if r is None]
    probs = scorer.predict_proba(ok) if ok else np.zeros((0, len(scorer.labels)), dtype=np.float32)
    return answered_frame(probs, scorer.labels, scorer.thresholds, scorer.review), reasons


def table_answers(texts: list, scorer: Scorer) -> pd.DataFrame:
    """The pyfunc's table mode: one row per input row, in order, with answered_frame's columns
    and `skip_reason` ('' for a scored row). A skipped row holds placeholders ('', 0.0, [], 0,
    False) that its skip_reason voids: MLflow's Spark UDF casts each column to its Spark type
    (a null becomes 'None', or fails as an int or bool), so the caller (textclf.spark) puts
    the nulls back."""
    frame, reasons = scored(texts, [None] * len(texts), scorer)
    rows = np.flatnonzero([r is None for r in reasons])  # (K,) the scored rows' positions
    out = {}
    for name in frame.columns:
        column = frame[name].to_list()
        fill = placeholder(name)
        values = [fill] * len(texts)
        for i, value in zip(rows, column):
            values[i] = value
        out[name] = values
    answers = pd.DataFrame(out, columns=frame.columns)
    answers["skip_reason"] = [r.value if r else "" for r in reasons]
    return answers


def placeholder(name: str):
    """A skipped row's value of column `name` (see table_answers)."""
    if name == "labels":
        return []
    if name == "set_size":
        return 0
    if name == "needs_review":
        return False
    if name == "probability" or name.startswith(PROB_PREFIX):
        return 0.0
    return ""
