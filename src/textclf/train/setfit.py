"""Few-shot training (train.method: setfit): SetFit's method (Tunstall et al. 2022) on the
pooled head, for corpora of tens of labelled documents per class (docs/few_shot.md).

1. Contrastive: pairs of training documents, each document in each of train.setfit_iterations
   rounds paired once with a document of its class (target cosine 1) and once with one of
   another class (target 0). SetFit's CosineSimilarityLoss, the squared error of the cosine of
   the two mean-pooled embeddings, tunes the encoder for train.epochs passes over the pairs,
   train.batch_size pairs a step, at train.lr_encoder (warmup and schedule as fit's).
2. The head: a logistic regression (SetFit's default head, C = 1) on the tuned encoder's
   embeddings of the training documents, copied into the pooled head's linear layer. The model
   stays a plain PooledClassifier: exported, checked, calibrated and served as any other.
Then validation once, as an epoch of fit (the curve, the guards, the checkpoint).
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from textclf.errors import UserError
from textclf.signals import Interrupted, raise_if_interrupted
from textclf.config import Params, check_setfit as check_params
from textclf.model.batching import Collator
from textclf.model.heads import PooledClassifier
from textclf.train.loop import TrainJob, end_epoch, make_scheduler, resident
from textclf.train.probe import fit_linear_head, head_features, row_weights

log = logging.getLogger(__name__)


def check_setfit(params: Params, multilabel: bool) -> None:
    """What train.method setfit needs, each a one-line fix: the params' own rules (config,
    checked as they load) and the corpus's task, which its token store says."""
    check_params(params.model, params.train, "multilabel" if multilabel else params.ingest.task)


def sample_pairs(labels: np.ndarray, iterations: int, seed: int) -> np.ndarray:
    """(P, 3) int rows (i, j, same): per round, each row i with a random row of its class
    (itself when alone) and a random row of another class. P = 2 * iterations * len(labels)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    by_class = {c: np.flatnonzero(labels == c) for c in np.unique(labels)}
    others = {c: np.flatnonzero(labels != c) for c in by_class}
    if any(len(o) == 0 for o in others.values()):
        raise UserError("train.method=setfit needs training documents of at least two classes.")
    pairs = []
    for _ in range(iterations):
        for i, c in enumerate(labels.tolist()):
            pairs.append((i, rng.choice(by_class[c]), 1))
            pairs.append((i, rng.choice(others[c]), 0))
    return np.asarray(pairs, dtype=np.int64)[rng.permutation(len(pairs))]


def cosine_loss(a: torch.Tensor, b: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """SetFit's CosineSimilarityLoss: mean squared error of cos(a, b) against 1 or 0. (B, H) x 2."""
    return F.mse_loss(F.cosine_similarity(a.float(), b.float()), same.float())


def contrastive_steps(job: TrainJob, model: PooledClassifier, pairs: np.ndarray, scheduler) -> float:
    """train.epochs passes over `pairs` -> the mean loss. A signal stops at the next step
    (raise_if_interrupted): no mid-phase checkpoint, a rerun starts the phase again."""
    cfg, accelerator, ids = job.params, job.accelerator, job.train.input_ids
    collate = Collator(job.pad_id)
    steps = math.ceil(len(pairs) / cfg.batch_size)
    total, count = 0.0, 0
    model.train()
    for epoch in range(1, passes(cfg) + 1):
        order = np.random.default_rng(cfg.seed + epoch).permutation(len(pairs))
        for step in tqdm(range(steps), desc=f"pairs {epoch}/{passes(cfg)}",
                         disable=not accelerator.is_local_main_process):
            batch = pairs[order[step * cfg.batch_size:(step + 1) * cfg.batch_size]]  # (B, 3)
            sides = [collate([(ids[i], -1) for i in batch[:, k]]) for k in (0, 1)]
            with accelerator.autocast():
                a, b = (model.embed(s["input_ids"].to(accelerator.device), s["attention_mask"].to(accelerator.device))
                        for s in sides)  # (B, H) each
                loss = cosine_loss(a, b, torch.as_tensor(batch[:, 2], device=accelerator.device))
            accelerator.backward(loss)
            if cfg.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            job.optimizer.step()
            scheduler.step()
            job.optimizer.zero_grad(set_to_none=True)
            total, count = total + loss.item(), count + 1
            raise_if_interrupted()
    return total / max(count, 1)


def fit_head(job: TrainJob, model: PooledClassifier) -> float:
    """The logistic regression on the training rows' embeddings, copied into model.classifier
    (textclf.train.probe) -> its training log-loss. Rows weigh as in fit: windows of a document
    together one document, times train.class_weights."""
    train, accelerator = job.train, job.accelerator
    features = head_features(model, model.classifier, train.input_ids, job.params.batch_size * 2, job.pad_id,
                             accelerator.device, accelerator.mixed_precision, "embeddings")  # (rows, H)
    y = np.asarray(train.row_labels())
    weight = row_weights(y, train.row_weights(), job.class_weight)
    head = fit_linear_head(features, y, weight, model.classifier, "train.method=setfit", standardise=False)
    probs = head.predict_proba(features)  # (rows, C)
    return float(-(weight * np.log(probs[np.arange(len(y)), y].clip(1e-12))).sum() / weight.sum())


def passes(cfg) -> int:
    """train.epochs passes over the pairs; 0 (the budget's default, which setfit does not
    use: minutes on tens of documents a class) is SetFit's default, one."""
    return cfg.epochs or 1


# the contrastive phase keeps no checkpoint: "rerun to resume" was not so
CONTRASTIVE_LOST = ("setfit's contrastive phase keeps no checkpoint: rerun the same command (or `dvc repro`) to "
                    "start it again from its first pair")


def fit_setfit(job: TrainJob) -> nn.Module:
    """train.method setfit: the job's model (a mean-pooled PooledClassifier) tuned on pairs,
    then its head fitted -> the model; a checkpoint of a finished training is restored instead."""
    cfg, accelerator = job.params, job.accelerator
    pairs = sample_pairs(np.asarray(job.train.row_labels()), cfg.setfit_iterations, cfg.seed)
    tunes = cfg.encoder != "freeze"
    total = passes(cfg) * math.ceil(len(pairs) / cfg.batch_size)
    scheduler = make_scheduler(job.optimizer, total, cfg)
    prepared, optimizer, scheduler = accelerator.prepare(job.model, job.optimizer, scheduler)
    job = dataclasses.replace(job, model=prepared, optimizer=optimizer)  # the steps run the prepared ones
    model = accelerator.unwrap_model(prepared)
    if job.checkpointer is not None and job.checkpointer.restore(accelerator).epoch >= 1:
        log.info("train.method=setfit: restored the finished training from its checkpoint")
        job.selector.restore(model)
        return model
    log.info("train.method=setfit: %d pairs of %d training rows%s; before the first step: %s resident",
             len(pairs), len(job.train.input_ids), "" if tunes else " (train.encoder freeze: the head alone)",
             resident())
    try:
        loss = contrastive_steps(job, model, pairs, scheduler) if tunes else float("nan")
    except Interrupted as err:
        err.after = CONTRASTIVE_LOST
        raise
    log.info("contrastive loss %.4f; fitting the logistic-regression head", loss)
    end_epoch(job, 1, fit_head(job, model))
    job.selector.restore(model)
    return model
