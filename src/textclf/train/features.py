"""The features stage's work: the frozen encoder's features for LP-FT's probe (textclf.train.probe),
computed once per data version and model and kept as a DVC output."""
from __future__ import annotations

import logging
import time

import numpy as np
import torch
from accelerate.utils import set_seed
from torch import nn

from textclf.config import Params, load_params
from textclf.inference.proba import inference_device
from textclf.model.batching import Split, read_token_splits
from textclf.model.modeling import build_model, load_tokenizer, pad_id
from textclf.train.probe import (feature_key, final_linear, head_features, init_from_probe, read_features, skipped_why,
                                write_features, write_skipped)

log = logging.getLogger("features")
BATCH = 32  # rows a forward pass: fixed, so that train.batch_size does not rerun the stage


def run_features(tokens: str, splits: str, out: str, params_path: str = "params.yaml") -> None:
    """What the last linear layer of train's model reads, for each training and validation row
    -> `out` (safetensors: train, validation; the key they were computed for in its metadata).
    The model is built as train builds it (same seed), so a random part before that layer
    (TextCNN's filters) is the same too."""
    params = load_params(params_path)
    why = skipped_why(params)
    if why:
        log.info("no features: %s", why)
        write_skipped(out, why)
        return
    started = time.perf_counter()
    parts, labels = read_token_splits(tokens, splits, names=("train", "validation"))
    tokenizer = load_tokenizer(params.model.name)
    set_seed(params.train.seed)  # as train_rank, before the model is built
    model, _ = build_model(params.model, labels, multilabel=parts["train"].multilabel)
    device, mixed = inference_device(params.train.precision)
    found = compute_features(model.to(device), len(labels), parts, pad_id(tokenizer), device, mixed)
    write_features(out, feature_key(params), found["train"], found["validation"])
    log.info("features of %d training and %d validation rows (%d each) in %.1f s: %s", len(found["train"]),
             len(found["validation"]), found["train"].shape[1], time.perf_counter() - started, out)


def compute_features(model: nn.Module, classes: int, parts: dict[str, Split], pad: int, device: torch.device,
                     mixed: str) -> dict[str, np.ndarray]:
    """{split: (rows, H)} for the train and validation Splits of `parts`: what the model's
    last linear layer reads (eval mode)."""
    linear = final_linear(model, classes)
    return {name: head_features(model, linear, parts[name].input_ids, BATCH, pad, device, mixed, f"features: {name}")
            for name in ("train", "validation")}


def head_from_probe(params: Params, path: str, model: nn.Module, labels: list[str], parts: dict[str, Split], pad: int,
                    accelerator, class_weight: np.ndarray | None) -> dict[str, float]:
    """train.head_init probe, before the first step: the features stage's features at `path`
    (or, with "", computed now on the accelerator), the regression fitted and copied into the
    model's last layer (said in one line) -> its validation scores."""
    started = time.perf_counter()
    features = (read_features(path, feature_key(params)) if path else
                compute_features(model.to(accelerator.device), len(labels), parts, pad, accelerator.device,
                                 accelerator.mixed_precision))
    scores = init_from_probe(features, model, len(labels), parts, class_weight, params.model.chunk_pooling)
    log.info("train.head_init probe: the head starts as a logistic regression on the frozen encoder's features "
             "(%.1f s): validation accuracy %.4f, macro-F1 %.4f before the first step", time.perf_counter() - started,
             scores["val_accuracy"], scores["val_macro_f1"])
    return scores
