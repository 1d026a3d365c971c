"""The training loop. It knows nothing about the model: anything mapping
(input_ids, attention_mask) -> logits trains the same way.

Accelerate places model and batches: CUDA (bf16 autocast where supported),
then MPS, then CPU; the same code runs under `accelerate launch` on several GPUs.
"""
from __future__ import annotations

import logging
import math
from typing import Callable

import numpy as np
import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from textclf.batching import Collator, LengthGroupedBatchSampler, Split, TokenDataset, sorted_batches
from textclf.config import TrainParams
from textclf.evaluation import classification_scores

log = logging.getLogger(__name__)
LOG_EVERY = 10  # steps between loss reads: each read is a host sync


def make_accelerator() -> Accelerator:
    bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return Accelerator(mixed_precision="bf16" if bf16 else "no")


def lr_factor(total_steps: int, warmup_ratio: float, schedule: str) -> Callable[[int], float]:
    """Linear warmup, then linear decay to 0 (`linear`) or flat (`constant`)."""
    warmup = math.ceil(total_steps * warmup_ratio)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    return factor


@torch.inference_mode()
def predict_proba(model: nn.Module, input_ids: list[list[int]], batch_size: int, pad_id: int,
                  accelerator: Accelerator) -> np.ndarray:
    """Class probabilities (N, C) in input order. Validation and evaluation both use
    this one forward path, so the attention mask cannot be dropped at eval time."""
    was_training = model.training
    model.eval()
    collate = Collator(pad_id)
    lengths = [len(s) for s in input_ids]
    out = [None] * len(input_ids)
    for idx in sorted_batches(lengths, batch_size):
        batch = collate([(input_ids[i], -1) for i in idx])
        with accelerator.autocast():
            logits = model(batch["input_ids"].to(accelerator.device),
                           batch["attention_mask"].to(accelerator.device))  # (B, C)
        probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()
        for row, i in enumerate(idx):
            out[i] = probs[row]
    model.train(was_training)
    return np.stack(out)


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, train: Split, val: Split,
        cfg: TrainParams, pad_id: int, accelerator: Accelerator,
        on_epoch: Callable[[dict, np.ndarray], None]) -> nn.Module:
    """Train `model`; after each epoch call on_epoch(row, validation probabilities) with
    row = {'epoch', 'train_loss', 'val_accuracy', 'val_macro_f1'}."""
    sampler = LengthGroupedBatchSampler([len(s) for s in train.input_ids], cfg.batch_size, cfg.seed)
    loader = DataLoader(TokenDataset(train.input_ids, train.labels), batch_sampler=sampler,
                        collate_fn=Collator(pad_id))
    total = cfg.epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_factor(total, cfg.warmup_ratio, cfg.scheduler))
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(1, cfg.epochs + 1):
        loader.set_epoch(epoch)
        model.train()
        loss_sum = torch.zeros((), device=accelerator.device)
        bar = tqdm(loader, desc=f"epoch {epoch}/{cfg.epochs}",
                   disable=not accelerator.is_local_main_process)
        for step, batch in enumerate(bar, 1):
            with accelerator.autocast():
                logits = model(batch["input_ids"], batch["attention_mask"])  # (B, C)
                loss = loss_fn(logits.float(), batch["labels"])
            accelerator.backward(loss)
            if cfg.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            if step % LOG_EVERY == 0:
                bar.set_postfix(loss=f"{loss_sum.item() / step:.4f}")
        train_loss = accelerator.reduce(loss_sum, "mean").item() / len(loader)
        probs = predict_proba(accelerator.unwrap_model(model), val.input_ids,
                              cfg.batch_size * 2, pad_id, accelerator)
        scores = classification_scores(val.labels, probs.argmax(axis=1))
        row = {"epoch": epoch, "train_loss": train_loss,
               "val_accuracy": scores["accuracy"], "val_macro_f1": scores["macro_f1"]}
        log.info("epoch %d: %s", epoch, row)
        if accelerator.is_main_process:
            on_epoch(row, probs)
    return accelerator.unwrap_model(model)
