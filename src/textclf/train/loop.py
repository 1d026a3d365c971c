"""The training loop. It knows nothing about the model: anything mapping
(input_ids, attention_mask) -> logits trains the same way.

Accelerate places model and batches: CUDA (bf16 autocast where supported),
then MPS, then CPU; the same code runs under `accelerate launch` on several GPUs.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Callable, cast

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from textclf.model.batching import PAD_LABEL, Collator, LengthGroupedBatchSampler, RankShard, Split, TokenDataset
from textclf.train.checkpoint import Checkpointer, Progress
from textclf.config import TrainParams
from textclf.data.tokens import TokenIds
from textclf.evaluate.metrics import classification_scores
from textclf.evaluate.multilabel import bce, decide, multilabel_scores
from textclf.inference.proba import mixed_precision_here, predict_proba
from textclf.common import UserError

log = logging.getLogger(__name__)
LOG_EVERY = 10  # steps between loss reads: each read is a host sync


def make_accelerator(precision: str = "auto") -> Accelerator:
    """On CUDA, batches (pinned by make_train_loader) are copied without blocking the host,
    so the next step is queued while the GPU works: a copy from pageable memory waits for
    every kernel queued before it (bert-base, batch 32 on an H200: 299 vs 142-258 samples/s)."""
    cuda = torch.cuda.is_available()
    mixed = mixed_precision_here(precision)
    try:
        # split_batches: the prepared scheduler steps once per optimizer step, not once per
        # process; the training loader itself is sharded by make_train_loader (RankShard)
        config = DataLoaderConfiguration(non_blocking=cuda, split_batches=True)
        # Accelerate runs several CPU processes (gloo) only when told cpu=True; without it,
        # each torchrun worker would train alone on all the data
        several_cpus = not cuda and int(os.environ.get("WORLD_SIZE", "1")) > 1
        return Accelerator(mixed_precision=mixed, dataloader_config=config, cpu=several_cpus)
    except ValueError as err:  # Accelerate keeps one precision per process
        if "already been initialized" not in str(err):
            raise
        raise UserError(f"train.precision={precision!r} asks for mixed_precision={mixed!r}, but this "
                         "process already trained with another precision through Accelerate, which "
                         "keeps one per process: train in a new process (each DVC stage is one).") from err


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


def make_train_loader(train: Split, cfg: TrainParams, pad_id: int, rank: int = 0,
                      world: int = 1) -> DataLoader:
    """Length-grouped, dynamically padded training batches (seeded per epoch), in pinned
    memory on CUDA (see make_accelerator). With `world` processes, this process's share of
    each global batch of train.batch_size: not for accelerator.prepare, which would shard again.
    With chunks, a row is a window, with its document's label and weight (Split.row_weights)."""
    ids = train.input_ids
    # TokenIds: from the offsets alone
    lengths = ids.lengths if isinstance(ids, TokenIds) else [len(s) for s in ids]
    grouped = LengthGroupedBatchSampler(lengths, cfg.batch_size, cfg.seed)
    sampler = RankShard(grouped, rank, world) if world > 1 else grouped
    dataset = TokenDataset(train.input_ids, train.row_labels(), train.row_weights())
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=Collator(pad_id),
                      pin_memory=torch.cuda.is_available())


def make_scheduler(optimizer: torch.optim.Optimizer, total_steps: int,
                   cfg: TrainParams) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_factor(total_steps, cfg.warmup_ratio, cfg.scheduler))


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler, loader: DataLoader,
                cfg: TrainParams, accelerator: Accelerator, *, desc: str = "train",
                max_steps: int | None = None, first_step: int = 0, loss_start: float = 0.0,
                on_step: Callable[[int, torch.Tensor], None] | None = None,
                class_weight: np.ndarray | None = None) -> tuple[torch.Tensor, int]:
    """One pass over the prepared `loader`, or its first `max_steps` batches (benchmarks
    time a fixed number of steps) -> (summed loss, a device tensor; steps taken).
    A resumed epoch skips the `first_step` batches already trained on (their summed loss
    is `loss_start`); on_step(step, summed loss) runs after every optimizer step.
    class_weight (C,): each document's loss times its class's weight (train.class_weights)."""
    model.train()
    # summed, then weighted by this process's share of the global batch, so that the gradient
    # averaged over N processes is the global batch's mean, whatever the shares (RankShard).
    # Weighted, the sum is still divided by the documents, not by their weights (PyTorch's
    # "mean"): balanced weights average 1 over the training split, so the loss keeps its scale
    weight = None if class_weight is None else torch.as_tensor(class_weight, dtype=torch.float32,
                                                                device=accelerator.device)
    loss_fn = nn.CrossEntropyLoss(weight=weight, reduction="sum", ignore_index=PAD_LABEL)
    loss_sum = torch.full((), loss_start, device=accelerator.device)
    rng = torch.get_rng_state()  # as the checkpoint left it, when resuming
    batches = iter(loader)
    for skipped in range(first_step):  # resumed: the batches trained on before the checkpoint
        next(batches)
        if skipped == 0:  # fetching the first batch drew from the CPU RNG, as the uninterrupted
            torch.set_rng_state(rng)  # run did before its checkpoint: same dropout masks
    # the bar starts at the resumed step and counts the batches trained on, not those skipped
    # (counted twice, they ran past the epoch's total), its rate and ETA theirs alone
    bar = tqdm(batches, desc=desc, total=min(max_steps or len(loader), len(loader)),
               initial=first_step, disable=not accelerator.is_local_main_process)
    step = first_step
    for step, batch in enumerate(bar, first_step + 1):
        batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
        with accelerator.autocast():
            logits = model(batch["input_ids"], batch["attention_mask"])  # (B, C)
            loss = summed_loss(loss_fn, logits, batch) * accelerator.num_processes / global_count(
                batch["labels"], accelerator)
        accelerator.backward(loss)
        if cfg.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum += loss.detach()  # stays on the device: no host sync per step
        if step % LOG_EVERY == 0:
            bar.set_postfix(loss=f"{loss_sum.item() / step:.4f}")
        if on_step is not None:
            on_step(step, loss_sum)
        if step == max_steps:
            break
    return loss_sum, step


def resident() -> str:
    """This process's resident memory, from /proc (Linux), as "1.23 GB"."""
    try:
        with open("/proc/self/status") as status:
            kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return "unknown"
    return f"{kib / 2**20:.2f} GB"


def summed_loss(loss_fn: nn.CrossEntropyLoss, logits: torch.Tensor,
                batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The batch's summed cross-entropy (class-weighted as loss_fn is); with chunks (a batch
    with `weights`) each window's weighted by Split.row_weights too, so a long document's
    windows together weigh one document. Multi-hot labels (B, C): binary cross-entropy of
    each label's sigmoid, averaged over the labels, per document (multilabel_loss).
    Without weights, exactly the sum it always was (no multiplication by ones)."""
    if batch["labels"].dim() == 2:
        return multilabel_loss(logits, batch["labels"], batch.get("weights"), loss_fn.weight)
    if "weights" not in batch:
        return loss_fn(logits.float(), batch["labels"])
    each = nn.functional.cross_entropy(logits.float(), batch["labels"], weight=loss_fn.weight,
                                       reduction="none", ignore_index=PAD_LABEL)  # (B,), 0 for padding
    return (each * batch["weights"]).sum()


def multilabel_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None,
                    pos_weight: torch.Tensor | None = None) -> torch.Tensor:
    """(B, C) logits and multi-hot targets -> the summed per-document BCE, each document's the
    mean over its labels (so the loss has the scale of transformers' multi-label loss, a mean
    over every label of every document); a padding row (targets PAD_LABEL) counts 0.
    pos_weight (C,): train.class_weights balanced, each label's positives weighted up."""
    real = (targets[:, 0] != PAD_LABEL).to(torch.float32)  # (B,)
    each = nn.functional.binary_cross_entropy_with_logits(
        logits.float(), targets.clamp(min=0.0), reduction="none", pos_weight=pos_weight).mean(dim=1)  # (B,)
    return (each * real * (1.0 if weights is None else weights)).sum()


def global_count(labels: torch.Tensor, accelerator: Accelerator) -> torch.Tensor:
    """Documents (with chunks, windows) in this step's global batch: this process's, summed
    over the processes (one small all-reduce per step, only with several); padding entries do
    not count. The window weights average 1, so the loss keeps its scale either way."""
    count = (labels[:, 0] if labels.dim() == 2 else labels) != PAD_LABEL
    count = count.sum()
    return accelerator.reduce(count, "sum") if accelerator.num_processes > 1 else count


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

    def update(self, row: dict, model: nn.Module) -> None:
        """After an epoch: row holds epoch, val_macro_f1 and val_loss."""
        self.last_epoch = row["epoch"]
        key = self.key(row)
        if self.best_key is None or key > self.best_key:
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


def fit(model: nn.Module, optimizer: torch.optim.Optimizer, train: Split, val: Split,
        cfg: TrainParams, pad_id: int, accelerator: Accelerator,
        on_epoch: Callable[[dict, np.ndarray], None], *, checkpointer: Checkpointer | None = None,
        selector: EpochSelector | None = None, on_saved: Callable[[int], object] | None = None,
        class_weight: np.ndarray | None = None, chunk_pooling: str = "mean") -> nn.Module:
    """Train `model`; after each epoch call on_epoch(row, validation probabilities) with
    row = {'epoch', 'train_loss', 'val_accuracy', 'val_macro_f1', 'val_loss'}, then save the
    checkpoint, then call on_saved(epoch): what goes to a tracking store goes there, so a
    store that fails never costs an epoch the checkpoint does not hold. A checkpointer
    (textclf.train.checkpoint) restores a found checkpoint and saves new ones. A selector picks
    the epoch whose weights are returned and may stop early (every rank decides alike: each
    scores the whole validation split). class_weight (C,) weights the training loss; the
    validation loss stays unweighted, comparable across train.class_weights. Validation scores
    documents: with chunks, each by its windows' logits pooled by `chunk_pooling`
    (model.chunk_pooling), as evaluate does."""
    selector = selector or EpochSelector()
    loader = make_train_loader(train, cfg, pad_id, accelerator.process_index, accelerator.num_processes)
    sampler = cast("LengthGroupedBatchSampler | RankShard", loader.batch_sampler)  # make_train_loader's
    total = cfg.epochs * len(loader) if cfg.max_steps == 0 else min(cfg.max_steps, cfg.epochs * len(loader))
    scheduler = make_scheduler(optimizer, total, cfg)  # the schedule ends where training does
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if accelerator.num_processes == 1:  # one process: Accelerate's loader (device placement, RNG
        loader = accelerator.prepare(loader)  # handling) exactly as before; N: RankShard shards
    start = checkpointer.restore(accelerator) if checkpointer else Progress()
    log.info("before the first step: %s resident (data, model, optimizer)", resident())
    for epoch in range(start.epoch + 1, math.ceil(total / len(loader)) + 1):
        if selector.should_stop():  # checked first, so a resumed training stops alike
            log.info("stopping early before epoch %d: no better validation %s for %d epochs "
                     "(train.patience)", epoch, selector.metric, selector.patience)
            break
        sampler.set_epoch(epoch)
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        first, loss_start = (start.step, start.loss_sum) if epoch == start.epoch + 1 else (0, 0.0)
        on_step = None if checkpointer is None else (
            lambda step, loss, epoch=epoch: checkpointer.after_step(accelerator, epoch, step, loss))
        left = total - (epoch - 1) * len(loader)  # train.max_steps may end this epoch early
        loss_sum, steps = train_steps(model, optimizer, scheduler, loader, cfg, accelerator,
                                      desc=f"epoch {epoch}/{cfg.epochs}", first_step=first,
                                      loss_start=loss_start, on_step=on_step,
                                      max_steps=left if left < len(loader) else None,
                                      class_weight=class_weight)
        train_loss = accelerator.reduce(loss_sum, "mean").item() / steps
        probs = predict_proba(accelerator.unwrap_model(model), val.input_ids, cfg.batch_size * 2,
                              pad_id, accelerator.device, accelerator.mixed_precision,
                              owner=val.owner, pooling=chunk_pooling,
                              multilabel=val.multilabel)  # (documents, C)
        row = {"epoch": epoch, "train_loss": train_loss, **validation_scores(probs, val)}
        log.info("epoch %d: %s", epoch, row)
        selector.update(row, accelerator.unwrap_model(model))
        if accelerator.is_main_process:
            on_epoch(row, probs)
        if checkpointer is not None:
            checkpointer.after_epoch(accelerator, epoch)
        if accelerator.is_main_process and on_saved is not None:
            on_saved(epoch)
    model = accelerator.unwrap_model(model)
    selector.restore(model)
    return model
