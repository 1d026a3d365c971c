"""Which epoch a training keeps: each epoch's validation row (accuracy, macro-F1, loss), and the
EpochSelector that keeps the best epoch's weights (train.select) and stops early (train.patience)."""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn

from textclf.evaluate.metrics import classification_scores
from textclf.evaluate.multilabel import bce, decide, multilabel_scores
from textclf.model.batching import Split

log = logging.getLogger(__name__)


def validation_scores(probs: np.ndarray, val: Split) -> dict[str, float]:
    """An epoch's validation row: accuracy, macro-F1 and loss of the (documents, C)
    probabilities. Multi-label: subset accuracy, macro-F1 over the labels at threshold 0.5
    (the per-label thresholds are tuned once, on the kept epoch) and the mean BCE."""
    if val.multilabel:
        y = np.asarray(val.labels, dtype=bool)  # (N, C)
        scores = multilabel_scores(y, decide(probs))
        loss = bce(probs, y)
    else:
        scores, loss = classification_scores(val.labels, probs.argmax(axis=1)), validation_loss(probs, val.labels)
    return {"val_accuracy": scores["accuracy"], "val_macro_f1": scores["macro_f1"], "val_loss": loss}


def validation_loss(probs: np.ndarray, labels: list[int]) -> float:
    """Mean cross-entropy of (N, C) probabilities against the labels."""
    true = probs[np.arange(len(labels)), np.asarray(labels)]
    return float(-np.log(np.clip(true, 1e-12, None)).mean())


class EpochSelector:
    """train.select / train.select_metric / train.patience. Tracks the epoch that scores best
    on validation (macro-F1 with ties to the lower loss, or the loss alone) and, for `best`, a
    CPU copy of its weights, so the test split never chooses anything. Rides in the
    checkpoint (state_dict / load_state_dict), its weights too."""

    def __init__(self, select: str = "last", patience: int = 0, metric: str = "macro_f1"):
        self.select, self.patience, self.metric = select, patience, metric
        self.best_epoch = self.last_epoch = 0
        self.best_key: list[float] | None = None  # key() of the best epoch's row
        self.best_row: dict[str, float] = {}
        self.weights: dict[str, torch.Tensor] | None = None
        # the kept epoch's validation probabilities, when this process computed them: train's
        # last pass over validation reuses them (not in the checkpoint: a resume recomputes)
        self.probs: np.ndarray | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"best_epoch": self.best_epoch, "best_key": self.best_key, "best_row": self.best_row,
                "last_epoch": self.last_epoch, "weights": self.weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_epoch, self.best_key, self.best_row = state["best_epoch"], state["best_key"], state["best_row"]
        self.last_epoch, self.weights = state["last_epoch"], state["weights"]

    def key(self, row: dict) -> list[float]:
        """Larger is better: a tie on macro-F1 (it saturates: every validation document right)
        goes to the lower loss, the epoch that is more sure of its right answers."""
        if self.metric == "loss":
            return [-row["val_loss"]]
        return [row["val_macro_f1"], -row["val_loss"]]

    def update(self, row: dict, model: nn.Module, probs: np.ndarray | None = None) -> None:
        """After an epoch: row holds epoch, val_macro_f1 and val_loss; `probs` the epoch's
        validation probabilities (documents, C), kept with its weights."""
        self.last_epoch = row["epoch"]
        key = self.key(row)
        if self.select == "last":
            self.probs = probs
        if self.best_key is None or key > self.best_key:
            if self.select == "best":
                self.probs = probs
            self.best_epoch, self.best_key, self.best_row = row["epoch"], key, dict(row)
            if self.select == "best":  # separate copies: safetensors refuses shared (tied) storage
                self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}

    def should_stop(self) -> bool:
        return self.patience > 0 and self.last_epoch - self.best_epoch >= self.patience

    @property
    def kept_epoch(self) -> int:
        return self.best_epoch if self.select == "best" else self.last_epoch

    def restore(self, model: nn.Module) -> int:
        """Load the kept epoch's weights into `model` -> that epoch."""
        if self.kept_epoch != self.last_epoch:
            if self.weights is None:  # select: best copies the weights of each better epoch
                raise RuntimeError(f"epoch {self.best_epoch} is kept but its weights were not")
            model.load_state_dict(self.weights)
            log.info("keeping epoch %d (validation macro-F1 %.4f, loss %.4f), not the last epoch %d",
                     self.best_epoch, self.best_row["val_macro_f1"], self.best_row["val_loss"],
                     self.last_epoch)
        return self.kept_epoch
