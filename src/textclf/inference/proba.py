"""Class probabilities from a trained classifier, without the training loop: the device,
the autocast and one batched forward path. Validation, evaluate, predict and the served
model all call predict_proba, so the attention mask cannot be dropped at eval time.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from textclf.inference.frames import sorted_batches
from textclf.inference.pooling import pool_logits
from textclf.model.batching import Collator
from textclf.errors import UserError

log = logging.getLogger(__name__)


def precision_for(setting: str, cuda_available: bool, bf16_supported: bool) -> str:
    """train.precision / evaluate.precision -> Accelerate's mixed_precision. `auto`: bf16
    autocast on a CUDA device that has it, else fp32, so CPU results do not move unless
    asked; `bf16` also on a CPU (faster on cores with native bf16, see docs/benchmarks.md).
    fp16 is not offered: it would need loss scaling."""
    if setting == "fp32" or (setting == "auto" and not (cuda_available and bf16_supported)):
        return "no"
    if setting not in ("auto", "bf16"):
        raise UserError(f"precision={setting!r} must be one of auto, fp32, bf16.")
    if cuda_available and not bf16_supported:
        raise UserError("precision=bf16, but this CUDA device has no bf16: set train.precision "
                         "and evaluate.precision to auto or fp32.")
    return "bf16"


def native_cpu_bf16() -> bool | None:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX); None where torch cannot
    say. torch's own probes, private: a torch without them gets None, not an error."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    found = [probe for probe in probes if probe is not None]
    return any(probe() for probe in found) if len(found) == len(probes) else None


def mixed_precision_here(precision: str) -> str:
    """precision_for on this machine's device; a warning for bf16 on a CPU that emulates it."""
    cuda = torch.cuda.is_available()
    mixed = precision_for(precision, cuda, cuda and torch.cuda.is_bf16_supported())
    if mixed == "bf16" and not cuda and native_cpu_bf16() is False:
        # an AVX2-only AMD EPYC ran a BBC step in 28 s in bf16 against 1.25 s in float32 (2026-12-03)
        log.warning("precision=bf16 on a CPU without native bf16 (no AVX512-BF16, no AMX): torch "
                    "emulates it, many times slower than float32 (28 s a step against 1.25 s, "
                    "docs/benchmarks.md). Set train.precision and evaluate.precision to auto.")
    return mixed


def inference_device(precision: str = "auto") -> tuple[torch.device, str]:
    """Device and autocast ("no" | "bf16") for predict_proba. Inference needs no Accelerator,
    so evaluating or serving in float32 works in a process that trained in bf16 (the train
    stage loads its logged model to check the input example)."""
    mixed = mixed_precision_here(precision)
    if torch.cuda.is_available():
        return torch.device("cuda"), mixed
    return torch.device("mps" if torch.backends.mps.is_available() else "cpu"), mixed


@torch.inference_mode()
def predict_proba(model: nn.Module, input_ids: list[list[int]], batch_size: int, pad_id: int,
                  device: torch.device, mixed: str = "no", owner: np.ndarray | None = None,
                  pooling: str = "mean", multilabel: bool = False, desc: str = "",
                  each_batch: Callable[[], None] | None = None) -> np.ndarray:
    """Class probabilities (N, C) in input order, with bf16 autocast when mixed == "bf16";
    `multilabel`: each label's own probability (sigmoid), not a distribution over classes.
    Validation and evaluation both use this one forward path, so the attention mask cannot
    be dropped at eval time. With `owner` (tokenize.truncation chunks: the document of each
    row), a document's probabilities are the softmax of its rows' logits pooled by `pooling`
    (model.chunk_pooling) -> (documents, C). `desc` names a progress bar (validation, test:
    minutes on a large split); "" shows none (a served request). `each_batch` is called before
    each batch (training's validation: a signal stops the pass there)."""
    activation = activate_sigmoid if multilabel else activate_softmax
    if owner is not None:
        pooled = pool_logits(row_outputs(model, input_ids, batch_size, pad_id, device, mixed, None, desc,
                                         each_batch), owner, pooling)
        return activation(torch.from_numpy(pooled)).numpy()
    return row_outputs(model, input_ids, batch_size, pad_id, device, mixed, activation, desc, each_batch)


def activate_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, dim=-1)


def activate_sigmoid(logits: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(logits)


@torch.inference_mode()
def row_outputs(model: nn.Module, input_ids: list[list[int]], batch_size: int, pad_id: int,
                device: torch.device, mixed: str, activation, desc: str = "",
                each_batch: Callable[[], None] | None = None) -> np.ndarray:
    """(N, C) probabilities (`activation` of the float32 logits) or, with None, the logits of
    every row, in input order; a progress bar named `desc` unless it is ""."""
    was_training = model.training
    model.eval()
    collate = Collator(pad_id)
    lengths = [len(s) for s in input_ids]
    out: list = [None] * len(input_ids)  # (C,) rows, filled batch by batch
    for idx in tqdm(sorted_batches(lengths, batch_size), desc=desc, disable=not desc, leave=False, unit="batch"):
        if each_batch is not None:
            each_batch()
        batch = collate([(input_ids[i], -1) for i in idx])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed == "bf16"):
            logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device))  # (B, C)
        rows = (logits.float() if activation is None else activation(logits.float())).cpu().numpy()
        for row, i in enumerate(idx):
            out[i] = rows[row]
    model.train(was_training)
    return np.stack(out)
