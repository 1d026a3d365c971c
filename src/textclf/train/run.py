"""The train stage's work: build and audit the model, train it with checkpoints and guards,
save and log it, under one MLflow run (rank 0), or relaunch itself on train.processes.

Guards run in order: pretrained-load audit, optimizer coverage, learning-rate sanity,
the collapse detector at each validation, and the weight-movement audit at the end.
A failing guard records its result (reports/guards.json, MLflow tag) and fails the stage.
"""
from __future__ import annotations

import dataclasses
import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow
import numpy as np
import pandas as pd
import torch
from accelerate.utils import set_seed
from torch import nn

from textclf.config import Params, TrainParams, changed_since, flatten, load_params
from textclf.data.weights import resolve
from textclf.inference.serving import log_pyfunc
from textclf.errors import UserError
from textclf.files import atomic_path, write_csv, write_json
from textclf.signals import deferred_interrupts
from textclf.model.batching import Collator, Split, read_token_splits
from textclf.model.modeling import build_model, encoder_param_names, load_tokenizer, pad_id, save_model
from textclf.model.policy import apply_policy, describe_groups, find_unused, make_optimizer, param_groups
from textclf.tracking.runs import (fail_launched_runs, lineage_tags, log_datasets, mark_resumed, process_tags,
                                   run_exists, run_name, sweep_stale_runs, tracking_uri, use_experiment)
from textclf.tracking.store import check_store
from textclf.train import guards
from textclf.train.checkpoint import Checkpointer, training_key
from textclf.train.context import Training
from textclf.train.launch import (RDZV_FAILED, check_same_inputs, failures_to_launcher, forbid_tracking, is_worker,
                                  launch, rank)
from textclf.train.loop import Callbacks, TrainJob, fit, make_accelerator
from textclf.train.selection import EpochSelector
from textclf.train.setfit import check_setfit, fit_setfit
from textclf.train.paths import TrainInputs, TrainPaths
from textclf.train.features import head_from_probe
from textclf.train.probe import skipped_why
from textclf.train.targets import calibrate, loss_weights, tuned_thresholds, validation_proba, write_validation
from textclf.train.records import EpochLogger, GuardBook, NoTracking, RunLog, Tracker

if TYPE_CHECKING:
    from mlflow import ActiveRun
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger("train")
# what train reads, logged to its run and saved in the model's params.json (predict, serving
# and evaluate read tokenize and model.chunk_pooling from it, to window and pool as training
# did); the upstream sections reach the run through the dvc.lock it logs
LOGGED_SECTIONS = ("tokenize", "model", "train")


@dataclass(frozen=True)
class Trained:
    """What a training leaves for rank 0 to judge, save and upload."""
    model: nn.Module  # the kept epoch's weights
    before: dict[str, torch.Tensor]  # the initial weights
    encoder: set[str]  # the encoder's parameter names
    selector: EpochSelector
    curve: EpochLogger
    book: GuardBook


def prepare(job: Training, book: GuardBook,
            class_weight: np.ndarray | None) -> tuple[nn.Module, torch.optim.Optimizer, set[str]]:
    """Build the model (its head from the probe, train.head_init), audit it, apply the encoder
    policy, build and check the optimizer."""
    cfg, model_cfg = job.params.train, job.params.model
    model, new = build_model(model_cfg, job.labels, multilabel=job.splits["train"].multilabel)
    if skipped_why(job.params) is None:
        scores = head_from_probe(job.params, job.paths.features, model, job.labels, job.splits, pad_id(job.tokenizer),
                                 job.accelerator, class_weight)
        book.tracker.log_metrics({f"probe_{k}": v for k, v in scores.items()})
    probe = Collator(pad_id(job.tokenizer))([(ids, -1) for ids in job.splits["train"].input_ids[:2]])
    unused = find_unused(model, probe["input_ids"], probe["attention_mask"])
    encoder = encoder_param_names(model)
    book.check("load_audit", guards.load_audit, new, encoder, unused, model_cfg.allow_random_init)
    frozen = apply_policy(model, cfg, unused)
    groups = param_groups(model, cfg)
    described = describe_groups(groups)
    for g in described:
        log.info("param group %s: %d tensors, %d parameters, lr %g, weight decay %g",
                 g["group"], g["tensors"], g["parameters"], g["lr"], g["weight_decay"])
    book.tracker.log_dict({"groups": described, "frozen": frozen}, "param_groups.json")
    optimizer = make_optimizer(groups, cfg, fused=torch.cuda.is_available())
    book.check("optimizer_coverage", guards.optimizer_coverage, model, optimizer, frozen)
    book.check("lr_sanity", guards.lr_sanity, cfg.encoder, cfg.lr_encoder)
    return model, optimizer, encoder


def example_texts(tokenizer: PreTrainedTokenizerBase, split: Split, n: int = 2, words: int = 40) -> list[str]:
    """The pyfunc's input example: the start of a few validation documents, decoded."""
    texts = [str(tokenizer.decode(ids, skip_special_tokens=True)) for ids in split.input_ids[:n]]
    return [" ".join(t.split()[:words]) for t in texts]


def checkpoint_key(params: Params, inputs: TrainInputs) -> str:
    """What shapes training: model and train params (not the checkpoint settings), and the
    bytes of the tokens and splits."""
    train = {k: v for k, v in dataclasses.asdict(params.train).items()
             if k not in ("checkpoint_every", "keep_checkpoint", "rdzv_endpoint", "rdzv_timeout")}
    # processes and nodes stay: RNG files per rank
    return training_key({"model": dataclasses.asdict(params.model), "train": train},
                        {"tokens": inputs.tokens, "splits": inputs.splits})


def check_params_kept(path: str, params: Params) -> None:
    """Fail (the run FAILED, DVC records nothing) when the params file changed during training."""
    changed = changed_since(path, params, LOGGED_SECTIONS)
    if changed:
        raise UserError(f"{path} changed while train ran ({'; '.join(changed[:4])}): this model was trained "
                         "with the values read at the start, which DVC would not record. Was `dvc exp run "
                         "-S` started meanwhile? Once nothing else runs, restore the params you want and "
                         "run `dvc repro` again.")


@dataclass
class RunRef:
    """The MLflow run a checkpoint belongs to: a resume logs into it."""
    run_id: str | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state["run_id"]


def open_store() -> tuple[str, str]:
    """Rank 0, before any training: the store checked (one clear line), the experiment, its
    stale runs swept -> (tracking URI, experiment id)."""
    uri = tracking_uri()
    check_store(uri)
    exp_id = use_experiment(uri)
    sweep_stale_runs(exp_id)
    return uri, exp_id


def open_run(exp_id: str, run_id: str | None) -> tuple[ActiveRun, bool]:
    """A new run, or the checkpoint's run (`run_id`), reopened -> (active run, reopened?)."""
    if run_id and run_exists(run_id):
        mark_resumed(run_id)
        return mlflow.start_run(run_id=run_id), True
    if run_id:
        log.warning("the checkpoint's MLflow run %s is not in %s; logging to a new run",
                    run_id, mlflow.get_tracking_uri())
    return mlflow.start_run(experiment_id=exp_id, run_name=run_name()), False


def start_logging(job: Training, active: ActiveRun, reopened: bool) -> None:
    """A new run's params and lineage (the data as datasets, dvc.lock as it stands); the
    process tags, for any run."""
    if not reopened:
        job.tracker.log_params(flatten(job.params.sections(LOGGED_SECTIONS)))
    job.tracker.set_tags({**lineage_tags(), **process_tags()})
    if not reopened:
        log_datasets(active.info.run_id, {"tokens": job.paths.tokens, "splits": job.paths.splits}, "training")
        if Path(job.paths.lock).is_file():
            mlflow.log_artifact(job.paths.lock)


def train(job: Training) -> Trained:
    """This rank's training, with its guards and checkpoints. The tracker queues metrics and
    tags until the store takes them."""
    cfg, tracker = job.params.train, job.tracker
    book = GuardBook(job.paths.guards, tracker)
    curve = EpochLogger(job.paths.curve, job.splits["validation"].labels, job.labels, cfg, book,
                        resolve(cfg.class_weights, job.splits["train"].labels))
    selector = EpochSelector(cfg.select, cfg.patience, cfg.select_metric)
    job.checkpointer.attach(guards=book, curve=curve, selector=selector)  # resumed: each loads its state
    for row in curve.rows:  # resumed: the run gets the checkpoint's epochs it lacks (RunLog
        # reads its history), whether a kill, a full disk or a failing store kept them back
        tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
    tracker.flush()  # now: the stale-run sweep finds a killed run by its process tags
    class_weight = loss_weights(job)
    model, optimizer, encoder = prepare(job, book, class_weight)
    tracker.flush()  # the guards' tags
    before = guards.snapshot(model)  # the seeded initial weights, rebuilt the same on resume
    loop_job = TrainJob(model, optimizer, job.splits["train"], job.splits["validation"], cfg, pad_id(job.tokenizer),
                        job.accelerator, Callbacks(on_epoch=curve, on_saved=lambda epoch: tracker.flush(),
                                                   on_estimate=lambda values, step: log_now(tracker, values, step)),
                        checkpointer=job.checkpointer, selector=selector, class_weight=class_weight,
                        chunk_pooling=job.params.model.chunk_pooling)
    with deferred_interrupts():  # SIGINT/SIGTERM: checkpoint at the next step, then stop
        model = fit_setfit(loop_job) if cfg.method == "setfit" else fit(loop_job)
    return Trained(model=model, before=before, encoder=encoder, selector=selector, curve=curve, book=book)


def log_now(tracker: Tracker, values: dict[str, float], step: int) -> None:
    """Metrics the run shows while it trains (the time estimate): queued, then sent at once."""
    tracker.log_metrics(values, step=step)
    tracker.flush()


def save_and_upload(job: Training, trained: Trained, tracker: RunLog, active: ActiveRun) -> None:
    """Rank 0: judge the kept model, write every local output, then upload (`tracker`: the
    job's, rank 0's RunLog)."""
    paths, selector, model = job.paths, trained.selector, trained.model
    # every local output first: a store that fails afterwards costs none of them
    tracker.log_metrics({"kept_epoch": selector.kept_epoch, "epochs_trained": selector.last_epoch})
    probs = trained.selector.probs  # (documents, C), the kept weights': the pass that chose them
    probs = validation_proba(job, model) if probs is None else probs  # resumed past that epoch
    tuned = tuned_thresholds(job, probs)  # multi-label: the kept epoch is judged at them, as served
    if tuned is not None:
        trained.curve.use_thresholds(selector.kept_epoch, probs, np.array(list(tuned.values())))
    calibration = calibrate(job, probs)  # single-label: the temperature, fitted on these
    write_validation(job, probs if calibration is None else calibration.apply(probs), tuned)
    trained.curve.judge(selector.kept_epoch, final=True)  # the guards judge the model that is kept
    write_csv(pd.DataFrame(guards.weight_movement(model, trained.before, trained.encoder)), paths.movement)
    trained.book.check("weight_movement", guards.movement_check, model, trained.before, trained.encoder,
                       job.params.train)
    with atomic_path(paths.model_dir, folder=True) as tmp:  # a kill mid-save leaves no half model
        save_model(model, tmp, job.tokenizer, job.params.sections(LOGGED_SECTIONS), tuned, calibration)
    serve = job.params.serve  # the review it answers with, as at training (serve.* then reruns evaluate only)
    model_uri = upload(paths, tracker, example_texts(job.tokenizer, job.splits["validation"]),
                       {"coverage": serve.coverage, "review_below": serve.review_below})
    write_json(paths.run_file, {"run_id": active.info.run_id, "experiment_id": active.info.experiment_id,
                                "tracking_uri": mlflow.get_tracking_uri(),
                                "model_uri": model_uri, "kept_epoch": selector.kept_epoch,
                                "epochs_trained": selector.last_epoch})


def upload(paths: TrainPaths, tracker: RunLog, examples: list[str], review: dict) -> str:
    """The queued metrics and tags, the weight change and the model, answering with `review`
    ({coverage, review_below}: serve.*), into the store -> the model's URI. A store that fails
    stops the stage in one line (store_gone)."""
    try:
        if tracker.flush():
            tracker.log_artifact(paths.movement)
            return log_pyfunc(paths.model_dir, examples, review=review).model_uri
    except Exception as err:
        if not tracker.failed(err, warn=False):
            raise
    raise store_gone(paths, tracker)


def store_gone(paths: TrainPaths, tracker: RunLog) -> UserError:
    return UserError(f"training finished and its outputs are written ({paths.model_dir}, {paths.curve}, "
                     f"{paths.guards}, {paths.movement}), but the MLflow tracking store {tracker.uri} "
                     f"failed ({tracker.failure}): once it works, rerun the stage (dvc repro) to "
                     f"complete run {tracker.run_id} from the final checkpoint, without training again.")


def launch_processes(cfg: TrainParams, argv: list[str]) -> None:
    """train.processes or train.nodes > 1: rerun this stage under torchrun (as node 0), then
    check how it ended."""
    uri = tracking_uri()
    check_store(uri)  # fail here, once, before starting N processes
    launched = launch("stages.train", argv, cfg)
    if launched.rc != 0:
        fail_launched_runs(use_experiment(uri), launched.launch_id)
    if launched.rc == RDZV_FAILED and launched.rendezvous:
        raise UserError(f"train.nodes={cfg.nodes}: the other nodes did not join at train.rdzv_endpoint="
                        f"{cfg.rdzv_endpoint} within train.rdzv_timeout={cfg.rdzv_timeout} s "
                        f"({launched.rendezvous}): on each node K in 1..{cfg.nodes - 1} run `python -m "
                        "textclf.train.launch --node-rank K` (README, Team setup), or raise train.rdzv_timeout.")
    if launched.rc != 0:
        what = f"training on train.processes={cfg.processes} processes" + (
            f" on each of train.nodes={cfg.nodes}" if cfg.nodes > 1 else "")
        raise UserError(f"{what} failed: {launched.failure}" if launched.failure else
                        f"{what} failed (torchrun exit {launched.rc}); the failing rank's error is logged above.")


def run(paths: TrainPaths, argv: list[str]) -> None:
    """The stage, from its paths; `argv` (its arguments) relaunches it under torchrun."""
    params = load_params(paths.params)
    cfg = params.train
    if cfg.processes * cfg.nodes > 1 and not is_worker():
        return launch_processes(cfg, argv)
    with failures_to_launcher() if is_worker() else nullcontext():
        train_rank(paths, params)


def train_rank(paths: TrainPaths, params: Params) -> None:
    """This process's share: rank 0 opens, logs and ends the run; the other ranks train alongside."""
    cfg = params.train
    main_rank = rank() == 0
    store = open_store() if main_rank else None  # one clear line, before any training
    if store is None:
        forbid_tracking()
    splits, labels = read_token_splits(paths.tokens, paths.splits, names=("train", "validation"))
    if cfg.method == "setfit":
        check_setfit(params, splits["train"].multilabel)
    tokenizer = load_tokenizer(params.model.name)
    ckpt = Checkpointer(paths.checkpoint_dir, checkpoint_key(params, paths), cfg.checkpoint_every,
                        main=main_rank)
    resume = ckpt.find() if cfg.nodes == 1 else None  # the other nodes have no checkpoint to resume
    run_ref = RunRef()
    ckpt.attach(run=run_ref)
    set_seed(cfg.seed)  # before the head is initialised
    accelerator = make_accelerator(cfg.precision)
    check_same_inputs(accelerator, ckpt.key, cfg.processes)
    job = Training(paths=paths, params=params, splits=splits, labels=labels, tokenizer=tokenizer,
                   accelerator=accelerator, checkpointer=ckpt, tracker=NoTracking())
    if store is None:
        train(job)
        return
    uri, exp_id = store
    active, reopened = open_run(exp_id, run_ref.run_id)
    run_ref.run_id = active.info.run_id
    tracker = RunLog(active.info.run_id, uri, resumed=resume is not None)
    log.info("MLflow run %s on %s%s", active.info.run_id, accelerator.device, " (resumed)" if reopened else "")
    track_and_train(dataclasses.replace(job, tracker=tracker), tracker, active, reopened)


def track_and_train(job: Training, tracker: RunLog, active: ActiveRun, reopened: bool) -> None:
    """Rank 0: train, save and upload into the open run (`tracker`: the job's), then end it
    FINISHED, or KILLED or FAILED."""
    try:
        start_logging(job, active, reopened)
        save_and_upload(job, train(job), tracker, active)
        check_params_kept(job.paths.params, job.params)
    except KeyboardInterrupt:
        tracker.close("KILLED")
        raise
    except BaseException:
        tracker.close("FAILED")
        raise
    if not tracker.close("FINISHED"):
        raise store_gone(job.paths, tracker)
    if not job.params.train.keep_checkpoint:
        job.checkpointer.clear()
