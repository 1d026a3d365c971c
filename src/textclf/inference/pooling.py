"""A document read in windows (tokenize.truncation chunks) scored as one: its windows' logits
pooled by model.chunk_pooling, before the softmax. numpy only: the PyTorch path (proba) and the
ONNX predictor pool with this one function, so validation, evaluate, predict and serving agree."""
from __future__ import annotations

import numpy as np

from textclf.errors import UserError

POOLINGS = ("mean", "max")


def pool_logits(logits: np.ndarray, owner: np.ndarray, how: str, documents: int | None = None) -> np.ndarray:
    """(W, C) logits of windows, `owner[w]` the document of window w (documents 0, 1, … each
    with a window; their number, by default the largest owner + 1) -> (documents, C): per
    document the mean of its windows' logits, or each class's largest. A document of one window
    keeps its logits exactly (a mean of one value is that value): it scores as without chunks."""
    if how not in POOLINGS:
        raise UserError(f"model.chunk_pooling={how!r} must be one of {list(POOLINGS)}.")
    owner = np.asarray(owner, dtype=np.int64)
    n = (int(owner.max()) + 1 if len(owner) else 0) if documents is None else documents
    counts = np.bincount(owner, minlength=n)
    if len(owner) and counts.min() == 0:
        raise ValueError("every document needs at least one window")  # a bug, not a user's input
    if how == "max":
        out = np.full((n, logits.shape[1]), -np.inf, dtype=logits.dtype)
        np.maximum.at(out, owner, logits)
        return out
    out = np.zeros((n, logits.shape[1]), dtype=np.float64)  # summed in float64, then back
    np.add.at(out, owner, logits)
    return (out / counts[:, None]).astype(logits.dtype)
