"""The training loop. It knows nothing about the model: anything mapping
(input_ids, attention_mask) -> logits trains the same way (minGPT's trainer). A `TrainJob`
is what one training is: fit(job) trains it, train_steps takes one pass of its optimizer steps.

Accelerate places model and batches: CUDA (bf16 autocast where supported),
then MPS, then CPU; the same code runs under `accelerate launch` on several GPUs.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, cast

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from textclf.model.batching import PAD_LABEL, Collator, LengthGroupedBatchSampler, RankShard, Split, TokenDataset
from textclf.train.checkpoint import Checkpointer, Progress
from textclf.train.pace import Pace, StepPlan, cut_to_budget, duration, plan, repace, train_plan
from textclf.train.selection import EpochSelector, validation_scores
from textclf.config import TrainParams
from textclf.data.tokens import TokenIds
from textclf.inference.proba import mixed_precision_here, predict_proba
from textclf.errors import UserError

log = logging.getLogger(__name__)
LOG_EVERY = 10  # steps between loss reads: each read is a host sync


@dataclass(frozen=True)
class Callbacks:
    """What a training calls out to, on rank 0, each optional: the loop knows when, not what.
    on_epoch(row, validation probabilities) after each epoch's validation, row = {'epoch',
    'train_loss', 'val_accuracy', 'val_macro_f1', 'val_loss'}; on_saved(epoch) once that
    epoch's checkpoint is saved: what goes to a tracking store goes there, so a store that
    fails never costs an epoch the checkpoint does not hold. on_estimate(estimate, step) once
    the first steps are timed (textclf.train.pace: steps/s, documents/s, the run's seconds),
    step the optimizer steps taken before this process started (0 unless resumed)."""
    on_epoch: Callable[[dict, np.ndarray], object] | None = None
    on_estimate: Callable[[dict, int], object] | None = None
    on_saved: Callable[[int], object] | None = None


@dataclass(frozen=True)
class TrainJob:
    """One training: the model and its optimizer, the training and validation splits, the
    params, the accelerator it runs on and what it calls out to. The checkpointer
    (textclf.train.checkpoint) restores a found checkpoint and saves new ones; the selector
    picks the epoch whose weights fit returns and may stop early. class_weight (C,) weights
    the training loss (train.class_weights); validation scores documents: with chunks, each by
    its windows' logits pooled by chunk_pooling (model.chunk_pooling), as evaluate does."""
    model: nn.Module  # (input_ids, attention_mask) -> logits; nothing else is asked of it
    optimizer: torch.optim.Optimizer
    train: Split
    validation: Split
    params: TrainParams
    pad_id: int
    accelerator: Accelerator
    callbacks: Callbacks = field(default_factory=Callbacks)
    checkpointer: Checkpointer | None = None
    selector: EpochSelector = field(default_factory=EpochSelector)
    class_weight: np.ndarray | None = None
    chunk_pooling: str = "mean"
    pace: Pace | None = None  # fit's: times the first steps, for the run's estimate
    steps: StepPlan | None = None  # fit's: the steps in all, cut to train.budget_minutes once paced
    started: float = 0.0  # fit's: when the training began (time.perf_counter), for the budget


@dataclass(frozen=True)
class Span:
    """Which optimizer steps one pass over the batches takes: epoch `epoch`'s, after the
    `first_step` a resumed epoch already trained on (their summed loss `loss_start`), up to
    step `max_steps` (None: the loader's end; train.max_steps, or benchmarks timing N steps)."""
    epoch: int = 1
    first_step: int = 0
    loss_start: float = 0.0
    max_steps: int | None = None


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


def lr_factor(total_steps: int | Callable[[], int], warmup_ratio: float, schedule: str) -> Callable[[int], float]:
    """Linear warmup, then linear decay to 0 (`linear`) or flat (`constant`). `total_steps`
    may be read at each step (a StepPlan's, which train.budget_minutes cuts once paced)."""
    def factor(step: int) -> float:
        total = total_steps() if callable(total_steps) else total_steps
        warmup = math.ceil(total * warmup_ratio)
        if step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        return max(0.0, (total - step) / max(1, total - warmup))
    return factor


def make_train_loader(train: Split, cfg: TrainParams, pad_id: int, rank: int = 0,
                      world: int = 1) -> DataLoader:
    """Length-grouped, dynamically padded training batches (seeded per epoch), in pinned
    memory on CUDA (see make_accelerator). With `world` processes, this process's share of
    each global batch of train.batch_size: not for accelerator.prepare, which would shard again.
    With chunks, a row is a window, with its document's label and weight (Split.row_weights)."""
    grouped = LengthGroupedBatchSampler(lengths_of(train.input_ids), cfg.batch_size, cfg.seed)  # TokenIds: offsets
    sampler = RankShard(grouped, rank, world) if world > 1 else grouped
    dataset = TokenDataset(train.input_ids, train.row_labels(), train.row_weights())
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=Collator(pad_id),
                      pin_memory=torch.cuda.is_available())


def make_scheduler(optimizer: torch.optim.Optimizer, total_steps: int | Callable[[], int],
                   cfg: TrainParams) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_factor(total_steps, cfg.warmup_ratio, cfg.scheduler))


def train_steps(job: TrainJob, scheduler, loader: DataLoader, span: Span = Span()) -> tuple[torch.Tensor, int]:
    """The job's optimizer steps over the prepared `loader` (the job's model and optimizer
    prepared too) that `span` names -> (summed loss, a device tensor; the last step, which
    counts a resumed epoch's earlier steps as the loss counts their loss_start). After
    every step, the job's checkpointer may save, and its pace times it (the run's estimate,
    said once, on the bar too). class_weight (C,): each document's loss times its class's
    weight (train.class_weights)."""
    model, optimizer, accelerator, cfg, pace = job.model, job.optimizer, job.accelerator, job.params, job.pace
    first_step, max_steps = span.first_step, span.max_steps
    model.train()
    # summed, then weighted by this process's share of the global batch, so that the gradient
    # averaged over N processes is the global batch's mean, whatever the shares (RankShard).
    # Weighted, the sum is still divided by the documents, not by their weights (PyTorch's
    # "mean"): balanced weights average 1 over the training split, so the loss keeps its scale
    weight = None if job.class_weight is None else torch.as_tensor(job.class_weight, dtype=torch.float32,
                                                                    device=accelerator.device)
    loss_fn = nn.CrossEntropyLoss(weight=weight, reduction="sum", ignore_index=PAD_LABEL)
    loss_sum = torch.full((), span.loss_start, device=accelerator.device)
    rng = torch.get_rng_state()  # as the checkpoint left it, when resuming
    batches = iter(loader)
    for skipped in range(first_step):  # resumed: the batches trained on before the checkpoint
        next(batches)
        if skipped == 0:  # fetching the first batch drew from the CPU RNG, as the uninterrupted
            torch.set_rng_state(rng)  # run did before its checkpoint: same dropout masks
    # the bar starts at the resumed step and counts the batches trained on, not those skipped
    # (counted twice, they ran past the epoch's total), its rate and ETA theirs alone
    postfix = {} if pace is None or pace.estimate is None else {"run": run_time(pace.estimate)}
    epochs = cfg.epochs if job.steps is None else job.steps.epochs
    bar = tqdm(batches, desc=f"epoch {span.epoch}/{epochs}", total=min(max_steps or len(loader), len(loader)),
               initial=first_step, disable=not accelerator.is_local_main_process, postfix=postfix or None)
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
        if pace is not None and (estimate := pace.tick(batch["input_ids"].numel(), loss_sum.item)):
            max_steps = budgeted(job, pace, span.epoch, step, bar) or max_steps
            said(job, pace, pace.estimate or estimate)
            postfix["run"] = run_time(estimate)
            bar.set_postfix(postfix)
        elif pace is not None and job.steps is not None and job.steps.decided and job.steps.budget_s:
            max_steps = budgeted(job, pace, span.epoch, step, bar) or max_steps
        if step % LOG_EVERY == 0:
            postfix["loss"] = f"{loss_sum.item() / step:.4f}"
            bar.set_postfix(postfix)
        if job.checkpointer is not None:
            job.checkpointer.after_step(accelerator, span.epoch, step, loss_sum)
        if step == max_steps:
            break
    if pace is not None and (estimate := pace.finish(loss_sum.item)):  # a run shorter than the timed steps
        said(job, pace, estimate)
    return loss_sum, step


def budgeted(job: TrainJob, pace: Pace, epoch: int, step: int, bar) -> int | None:
    """train.budget_minutes at `step` of `epoch`: the plan cut to the budget once the pace is
    known, and cut again at its shares (textclf.train.pace.repace), each said -> this epoch's
    last step where a cut moved it, else None."""
    plan = job.steps
    if plan is None or (plan.decided and not plan.budget_s):
        return None
    taken, elapsed = (epoch - 1) * plan.per_epoch + step, pace.clock() - job.started
    line = repace(plan, pace, taken, elapsed) if plan.decided else cut_to_budget(plan, pace, taken, elapsed)
    if line is None:
        return None
    if job.accelerator.is_main_process:
        log.info("%s", line)
    bar.total = last = min(plan.total - (epoch - 1) * plan.per_epoch, plan.per_epoch)
    return last


def run_time(estimate: dict) -> str:
    """The progress bar's `run=≈...`: the whole training's estimated time."""
    return "≈" + duration(estimate["estimated_train_seconds"])


def said(job: TrainJob, pace: Pace, estimate: dict) -> None:
    """The estimate logged and handed to on_estimate, on rank 0."""
    if not job.accelerator.is_main_process:
        return
    log.info("%s", pace.estimate_line())
    if job.callbacks.on_estimate is not None:
        job.callbacks.on_estimate(estimate, pace.done)


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


def fit(job: TrainJob) -> nn.Module:
    """Train the job's model, epoch after epoch (end_epoch after each), resuming from the
    checkpoint its checkpointer found -> the model with the kept epoch's weights. Every rank
    decides alike when to stop: each scores the whole validation split. The steps are the
    params' (textclf.train.pace.train_plan), cut to train.budget_minutes once paced."""
    cfg, accelerator, selector = job.params, job.accelerator, job.selector
    loader = make_train_loader(job.train, cfg, job.pad_id, accelerator.process_index, accelerator.num_processes)
    sampler = cast("LengthGroupedBatchSampler | RankShard", loader.batch_sampler)  # make_train_loader's
    steps = train_plan(cfg, len(loader), accelerator.num_processes)
    if job.checkpointer is not None:
        job.checkpointer.attach(steps=steps)  # resumed: the steps decided before
    scheduler = make_scheduler(job.optimizer, lambda: steps.total, cfg)  # the schedule ends where training does
    model, optimizer, scheduler = accelerator.prepare(job.model, job.optimizer, scheduler)
    if accelerator.num_processes == 1:  # one process: Accelerate's loader (device placement, RNG
        loader = accelerator.prepare(loader)  # handling) exactly as before; N: RankShard shards
    job = dataclasses.replace(job, model=model, optimizer=optimizer, steps=steps)  # the steps run the prepared ones
    start = job.checkpointer.restore(accelerator) if job.checkpointer else Progress()
    log.info("before the first step: %s resident (data, model, optimizer)", resident())
    sampler.set_epoch(start.epoch + 1)  # the first epoch's batches, to count its tokens (set again below)
    pace = plan(sampler, lengths_of(job.train.input_ids), steps.total, start.epoch * len(loader) + start.step,
                len(job.train.labels), lengths_of(job.validation.input_ids))
    if accelerator.is_main_process:
        log.info("%s", pace.plan_line(cfg.batch_size))
    job = dataclasses.replace(job, pace=pace, started=pace.clock())  # the steps time themselves with it
    epoch = start.epoch
    while (epoch := epoch + 1) <= steps.epochs:
        if selector.should_stop():  # checked first, so a resumed training stops alike
            log.info("stopping early before epoch %d: no better validation %s for %d epochs "
                     "(train.patience)", epoch, selector.metric, selector.patience)
            break
        sampler.set_epoch(epoch)
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        resumed = epoch == start.epoch + 1
        left = steps.total - (epoch - 1) * len(loader)  # train.max_steps may end this epoch early
        span = Span(epoch, start.step if resumed else 0, start.loss_sum if resumed else 0.0,
                    left if left < len(loader) else None)
        loss_sum, taken = train_steps(job, scheduler, loader, span)
        # a signal during validation stops the pass, saving these steps (Checkpointer.during_validation)
        stop = None if job.checkpointer is None else partial(job.checkpointer.during_validation, accelerator,
                                                             epoch, taken, loss_sum)
        end_epoch(job, epoch, accelerator.reduce(loss_sum, "mean").item() / taken, stop)
    model = accelerator.unwrap_model(model)
    selector.restore(model)
    return model


def lengths_of(ids: TokenIds | list[list[int]]) -> list[int] | np.ndarray:
    return ids.lengths if isinstance(ids, TokenIds) else [len(s) for s in ids]  # TokenIds: offsets alone


def end_epoch(job: TrainJob, epoch: int, train_loss: float, each_batch: Callable[[], None] | None = None) -> None:
    """Validate (`each_batch` called before each of its batches); the epoch's row to the
    selector and to on_epoch; the checkpoint; on_saved. The validation loss stays unweighted,
    comparable across train.class_weights."""
    accelerator, val, callbacks = job.accelerator, job.validation, job.callbacks
    model, clock = accelerator.unwrap_model(job.model), job.pace.clock if job.pace else time.perf_counter
    began = clock()
    probs = predict_proba(model, val.input_ids, job.params.batch_size * 2, job.pad_id, accelerator.device,
                          accelerator.mixed_precision, owner=val.owner, pooling=job.chunk_pooling,
                          multilabel=val.multilabel, desc=f"validation {epoch}", each_batch=each_batch)  # (docs, C)
    if job.pace is not None:  # the budget's measure of a validation (textclf.train.pace.repace)
        job.pace.validated += 1
        job.pace.validation_spent += clock() - began
    row = {"epoch": epoch, "train_loss": train_loss, **validation_scores(probs, val),
           # what it cost so far: since the loop began (train.budget_minutes counts it), and the
           # process's CPU time, every thread (benchmarks draw scores against CPU-minutes)
           "train_seconds": time.perf_counter() - job.started if job.started else 0.0,
           "cpu_seconds": time.process_time()}
    log.info("epoch %d: %s", epoch, row)
    job.selector.update(row, model, probs)
    if accelerator.is_main_process and callbacks.on_epoch is not None:
        callbacks.on_epoch(row, probs)
    if job.checkpointer is not None:
        job.checkpointer.after_epoch(accelerator, epoch)
    if accelerator.is_main_process and callbacks.on_saved is not None:
        callbacks.on_saved(epoch)
