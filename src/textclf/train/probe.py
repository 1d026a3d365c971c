"""LP-FT's first half (Kumar et al., ICLR 2022): the classifier's last linear layer fitted by
logistic regression on the frozen encoder's features, so fine-tuning starts from a head that
already answers instead of a random one, which on many classes spends its first epoch
undoing the random head and distorting the encoder's features on the way.

The features are what the head's last linear layer reads (a forward hook on it, in eval
mode): any head, no head-specific code. The stage `features` computes them once per data
version and model (a DVC output, so a new learning rate does not pay the forward pass again);
train fits the regression (seconds) and copies it into the layer before the first step, so the
model's validation answers before that step are the regression's.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from sklearn.linear_model import LogisticRegression
from torch import nn

from textclf.errors import UserError
from textclf.files import atomic_path
from textclf.config import Params
from textclf.inference.pooling import pool_logits
from textclf.inference.proba import row_outputs
from textclf.model.batching import Split
from textclf.train.selection import validation_scores

log = logging.getLogger(__name__)
PROBE_C = 1.0  # scikit-learn's default (SetFit's head keeps it too); features are standardised first


def final_linear(model: nn.Module, classes: int) -> nn.Linear:
    """The layer that writes the logits: the last nn.Linear with `classes` outputs
    (classifier, or RoBERTa's classifier.out_proj)."""
    found = [m for m in model.modules() if isinstance(m, nn.Linear) and m.out_features == classes]
    if not found:
        raise UserError(f"this model has no linear layer with {classes} outputs to fit a probe into: "
                        "set train.head_init: random.")
    return found[-1]


class _HeadInput(nn.Module):
    """The model with its logits replaced by what its last linear layer reads: (B, T) -> (B, H)."""

    def __init__(self, model: nn.Module, linear: nn.Linear):
        super().__init__()
        self.model, self.linear = model, linear

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seen: list[torch.Tensor] = []
        handle = self.linear.register_forward_hook(lambda _m, inputs, _out: seen.append(inputs[0]))
        try:
            self.model(input_ids, attention_mask)
        finally:
            handle.remove()
        return seen[-1]


def head_features(model: nn.Module, linear: nn.Linear, input_ids, batch_size: int, pad_id: int,
                  device: torch.device, mixed: str, desc: str) -> np.ndarray:
    """(rows, H) float32: each row's input to `linear`, in eval mode (no dropout), in row order."""
    return row_outputs(_HeadInput(model, linear), input_ids, batch_size, pad_id, device, mixed, None,
                       desc=desc).astype(np.float32)


@dataclass(frozen=True)
class FeatureKey:
    """What the features depend on besides the token ids: a probe fitted on other features
    would start the head somewhere else than where its figures say."""
    model: str
    head: str
    pooling: str
    hidden_layer: int
    seed: int
    precision: str


def write_features(path: str | Path, key: FeatureKey, train: np.ndarray, validation: np.ndarray) -> None:
    with atomic_path(path) as tmp:  # a kill mid-write leaves no half file that train would trust
        save_file({"train": train, "validation": validation}, str(tmp), metadata={"key": json.dumps(asdict(key))})


def write_skipped(path: str | Path, why: str) -> None:
    """train.head_init random (or setfit): an output DVC can track, holding no features."""
    with atomic_path(path) as tmp:
        save_file({"none": np.zeros(0, np.float32)}, str(tmp), metadata={"skipped": why})


def read_features(path: str | Path, key: FeatureKey) -> dict[str, np.ndarray]:
    """The stage's features, refused when computed for another model or seed."""
    from safetensors import safe_open
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} not found: train.head_init: probe reads the features stage's output; run "
                        "`dvc repro features` (or set train.head_init: random).")
    with safe_open(str(path), "np") as f:
        meta = f.metadata() or {}
    if "key" not in meta:
        raise UserError(f"{path} holds no features ({meta.get('skipped', 'written by another version')}); "
                        "rerun `dvc repro features`.")
    if json.loads(meta["key"]) != asdict(key):
        raise UserError(f"{path} was computed for {meta['key']}, not {json.dumps(asdict(key))}: rerun "
                        "`dvc repro features` (dvc repro does it when params.yaml changes).")
    return load_file(str(path))


def row_weights(labels: np.ndarray, windows: np.ndarray | None, class_weight: np.ndarray | None) -> np.ndarray:
    """Per training row (`labels`, one a row), its weight as fit weighs its loss: a document's
    windows together one document, times train.class_weights."""
    weight = np.ones(len(labels)) if windows is None else windows.astype(np.float64)
    return weight if class_weight is None else weight * np.asarray(class_weight)[labels]


def fit_linear_head(features: np.ndarray, labels: np.ndarray, weight: np.ndarray, linear: nn.Linear,
                    what: str, standardise: bool = True) -> LogisticRegression:
    """A multinomial logistic regression on `features` (rows, H), standardised unless told
    not to (SetFit's head is fitted on the raw embeddings), folded into `linear` (its weight
    and bias) so that linear(features) gives the regression's logits -> the regression (on
    the features as it saw them)."""
    classes = linear.out_features
    mean, scale = standard(features) if standardise else (np.zeros(features.shape[1]), np.ones(features.shape[1]))
    head = LogisticRegression(C=PROBE_C, max_iter=1000).fit((features - mean) / scale, labels, sample_weight=weight)
    if len(head.classes_) != classes:
        missing = sorted(set(range(classes)) - set(head.classes_.tolist()))
        raise UserError(f"{what}: classes {missing} have no training document; each class needs at least "
                        "one (ingest.min_per_class).")
    coef, bias = head.coef_, head.intercept_
    if classes == 2:  # one logit s for class 1: softmax([-s/2, s/2]) is sigmoid(s)
        coef, bias = np.vstack([-coef / 2, coef / 2]), np.r_[-bias / 2, bias / 2]
    coef = coef / scale  # (C, H): w·(x - m)/s + b = (w/s)·x + (b - (w/s)·m)
    bias = bias - coef @ mean
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(coef, dtype=linear.weight.dtype))
        linear.bias.copy_(torch.as_tensor(bias, dtype=linear.bias.dtype))
    return head


def standard(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each feature's mean and scale: lbfgs converges in far fewer steps on standardised features."""
    return features.mean(axis=0), features.std(axis=0) + 1e-6


def fit_multilabel_head(features: np.ndarray, hot: np.ndarray, weight: np.ndarray, linear: nn.Linear) -> None:
    """Multi-label: one binary logistic regression per label (its logit is the layer's row); a
    label with no positive (or no negative) training row keeps a zero row and its prior's logit."""
    mean, scale = standard(features)
    x = (features - mean) / scale
    coef, bias = np.zeros((hot.shape[1], x.shape[1])), np.zeros(hot.shape[1])
    for c in range(hot.shape[1]):
        y = hot[:, c] > 0.5
        if y.all() or not y.any():
            prior = np.clip(y.mean(), 1e-4, 1 - 1e-4)
            bias[c] = np.log(prior / (1 - prior))
            continue
        head = LogisticRegression(C=PROBE_C, max_iter=1000).fit(x, y, sample_weight=weight)
        coef[c], bias[c] = head.coef_[0], head.intercept_[0]
    coef = coef / scale
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(coef, dtype=linear.weight.dtype))
        linear.bias.copy_(torch.as_tensor(bias - coef @ mean, dtype=linear.bias.dtype))


def feature_key(params: Params) -> FeatureKey:
    m = params.model
    return FeatureKey(model=m.name, head=m.head, pooling=m.pooling, hidden_layer=m.hidden_layer,
                      seed=params.train.seed, precision=params.train.precision)


def skipped_why(params: Params) -> str | None:
    """Why the probe does not apply to these params (None: it does)."""
    if params.train.method == "setfit":
        return "train.method is setfit, which fits its own head"
    if params.train.head_init == "random":
        return "train.head_init is random"
    return None


def init_from_probe(features: dict[str, np.ndarray], model: nn.Module, classes: int, splits: dict[str, Split],
                    class_weight: np.ndarray | None, pooling: str) -> dict[str, float]:
    """The regression fitted on the training rows' features (rows weighted as fit weighs
    them), copied into the model's last linear layer -> its validation scores (accuracy,
    macro-F1, loss): the model's own before its first step, validation pooled per document
    as fit's is."""
    train, val = splits["train"], splits["validation"]
    linear = final_linear(model, classes)
    y = np.asarray(train.row_labels())
    if train.multilabel:  # class_weight is then each label's positive weight: the loss's, not the rows'
        fit_multilabel_head(features["train"], y, row_weights(y, train.row_weights(), None), linear)
    else:
        fit_linear_head(features["train"], y, row_weights(y, train.row_weights(), class_weight), linear,
                        "train.head_init=probe")
    with torch.no_grad():
        logits = linear(torch.from_numpy(features["validation"])).numpy()  # (rows, C)
    if val.owner is not None:
        logits = pool_logits(logits, val.owner, pooling)
    scores = torch.from_numpy(logits)
    probs = torch.sigmoid(scores) if val.multilabel else torch.softmax(scores, dim=-1)
    return validation_scores(probs.numpy(), val)
