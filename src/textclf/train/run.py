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
from typing import Any

import mlflow
import pandas as pd
import torch
from accelerate.utils import set_seed

from textclf.config import Params, changed_since, flatten, load_params
from textclf.inference.serving import log_pyfunc
from textclf.io import UserError, atomic_path, deferred_interrupts, write_csv, write_json
from textclf.model.batching import Collator, read_token_splits
from textclf.model.modeling import build_model, encoder_param_names, load_tokenizer, pad_id, save_model
from textclf.model.policy import apply_policy, describe_groups, find_unused, make_optimizer, param_groups
from textclf.tracking.runs import (fail_launched_runs, lineage_tags, log_datasets, mark_resumed, process_tags,
                                   run_exists, run_name, sweep_stale_runs, tracking_uri, use_experiment)
from textclf.tracking.store import check_store
from textclf.train import guards
from textclf.train.checkpoint import Checkpointer, Progress, training_key
from textclf.train.launch import (RDZV_FAILED, check_same_inputs, failures_to_launcher, forbid_tracking, is_worker,
                                  launch, rank)
from textclf.train.loop import EpochSelector, fit, make_accelerator
from textclf.train.records import EpochLogger, GuardBook, NoTracking, RunLog

log = logging.getLogger("train")
# what train reads, logged to its run and saved in the model's params.json (predict reads
# tokenize from it); the upstream sections reach the run through the dvc.lock it logs
LOGGED_SECTIONS = ("tokenize", "model", "train")


def prepare(params, splits, labels, pad_id, book: GuardBook):
    """Build the model, audit it, apply the encoder policy, build and check the optimizer."""
    cfg, model_cfg = params.train, params.model
    model, new = build_model(model_cfg, labels)
    probe = Collator(pad_id)([(ids, -1) for ids in splits["train"].input_ids[:2]])
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


def example_texts(tokenizer, split, n: int = 2, words: int = 40) -> list[str]:
    """The pyfunc's input example: the start of a few validation documents, decoded."""
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in split.input_ids[:n]]
    return [" ".join(t.split()[:words]) for t in texts]


def checkpoint_key(params: Params, args) -> str:
    """What shapes training: model and train params (not the checkpoint settings), and the
    bytes of the tokens and splits."""
    train = {k: v for k, v in dataclasses.asdict(params.train).items()
             if k not in ("checkpoint_every", "keep_checkpoint", "rdzv_endpoint", "rdzv_timeout")}
    # processes and nodes stay: RNG files per rank
    return training_key({"model": dataclasses.asdict(params.model), "train": train},
                        {"tokens": args.tokens, "splits": args.splits})


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


def open_run(exp_id: str, run_id: str | None):
    """A new run, or the checkpoint's run (`run_id`), reopened -> (active run, reopened?)."""
    if run_id and run_exists(run_id):
        mark_resumed(run_id)
        return mlflow.start_run(run_id=run_id), True
    if run_id:
        log.warning("the checkpoint's MLflow run %s is not in %s; logging to a new run",
                    run_id, mlflow.get_tracking_uri())
    return mlflow.start_run(experiment_id=exp_id, run_name=run_name()), False


def start_logging(args, logged: dict, tracker, active, reopened: bool) -> None:
    """A new run's params and lineage (the data as datasets, dvc.lock as it stands); the
    process tags, for any run."""
    if not reopened:
        tracker.log_params(flatten(logged))
    tracker.set_tags({**lineage_tags(), **process_tags()})
    if active is not None and not reopened:
        log_datasets(active.info.run_id, {"tokens": args.tokens, "splits": args.splits}, "training")
        if Path(args.lock).is_file():
            mlflow.log_artifact(args.lock)


def train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt: Checkpointer,
                   resume: Progress | None, reopened: bool, tracker) -> None:
    """Train, write every local output, then upload. `tracker`: rank 0's RunLog (NoTracking
    on the other ranks), where metrics and tags wait until the store takes them."""
    cfg, active = params.train, mlflow.active_run()
    logged = params.sections(LOGGED_SECTIONS)
    start_logging(args, logged, tracker, active, reopened)
    book = GuardBook(args.guards, tracker)
    curve = EpochLogger(args.curve, splits["validation"].labels, labels, cfg, book)
    selector = EpochSelector(cfg.select, cfg.patience, cfg.select_metric)
    ckpt.attach(guards=book, curve=curve, selector=selector)  # resumed: each loads its state
    for row in curve.rows:  # resumed: the run gets the checkpoint's epochs it lacks (RunLog
        # reads its history), whether a kill, a full disk or a failing store kept them back
        tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
    tracker.flush()  # now: the stale-run sweep finds a killed run by its process tags
    model, optimizer, encoder = prepare(params, splits, labels, pad_id(tokenizer), book)
    tracker.flush()  # the guards' tags
    before = guards.snapshot(model)  # the seeded initial weights, rebuilt the same on resume
    with deferred_interrupts():  # SIGINT/SIGTERM: checkpoint at the next step, then stop
        model = fit(model, optimizer, splits["train"], splits["validation"], cfg, pad_id(tokenizer),
                    accelerator, curve, ckpt, selector, on_saved=lambda epoch: tracker.flush())
    if not accelerator.is_main_process:
        return
    # every local output first: a store that fails afterwards costs none of them
    tracker.log_metrics({"kept_epoch": selector.kept_epoch, "epochs_trained": selector.last_epoch})
    curve.judge(selector.kept_epoch, final=True)  # the guards judge the model that is kept
    write_csv(pd.DataFrame(guards.weight_movement(model, before, encoder)), args.movement)
    book.check("weight_movement", guards.movement_check, model, before, encoder, cfg)
    with atomic_path(args.model_dir, folder=True) as tmp:  # a kill mid-save leaves no half model
        save_model(model, tmp, tokenizer, logged)
    model_uri = upload(args, tracker, example_texts(tokenizer, splits["validation"]))
    write_json(args.run_file, {"run_id": active.info.run_id, "experiment_id": active.info.experiment_id,
                               "tracking_uri": mlflow.get_tracking_uri(),
                               "model_uri": model_uri, "kept_epoch": selector.kept_epoch,
                               "epochs_trained": selector.last_epoch})


def upload(args, tracker: RunLog, examples: list[str]) -> str:
    """The queued metrics and tags, the weight change and the model into the store -> the
    model's URI. A store that fails stops the stage in one line (store_gone)."""
    try:
        if tracker.flush():
            tracker.log_artifact(args.movement)
            return log_pyfunc(args.model_dir, examples).model_uri
    except Exception as err:
        if not tracker.failed(err, warn=False):
            raise
    raise store_gone(args, tracker)


def store_gone(args, tracker: RunLog) -> UserError:
    return UserError(f"training finished and its outputs are written ({args.model_dir}, {args.curve}, "
                     f"{args.guards}, {args.movement}), but the MLflow tracking store {tracker.uri} "
                     f"failed ({tracker.failure}): once it works, rerun the stage (dvc repro) to "
                     f"complete run {tracker.run_id} from the final checkpoint, without training again.")


def launch_processes(cfg, argv: list[str]) -> None:
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


def run(args, argv: list[str]) -> None:
    """The stage, from its parsed arguments; `argv` relaunches it under torchrun."""
    params = load_params(args.params)
    cfg = params.train
    if cfg.processes * cfg.nodes > 1 and not is_worker():
        return launch_processes(cfg, argv)
    with failures_to_launcher() if is_worker() else nullcontext():
        train_rank(args, params)


def train_rank(args, params: Params) -> None:
    """This process's share: rank 0 opens, logs and ends the run; the other ranks train alongside."""
    cfg = params.train
    main_rank = rank() == 0
    if main_rank:
        uri = tracking_uri()
        check_store(uri)  # one clear line, before any training
        exp_id = use_experiment(uri)
        sweep_stale_runs(exp_id)
    else:
        forbid_tracking()
    splits, labels = read_token_splits(args.tokens, args.splits, names=("train", "validation"))
    tokenizer = load_tokenizer(params.model.name)
    ckpt = Checkpointer(args.checkpoint_dir, checkpoint_key(params, args), cfg.checkpoint_every,
                        main=main_rank)
    resume = ckpt.find() if cfg.nodes == 1 else None  # the other nodes have no checkpoint to resume
    run_ref = RunRef()
    ckpt.attach(run=run_ref)
    set_seed(cfg.seed)  # before the head is initialised
    accelerator = make_accelerator(cfg.precision)
    check_same_inputs(accelerator, ckpt.key, cfg.processes)
    if not main_rank:
        return train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt, resume, False,
                              NoTracking())
    active, reopened = open_run(exp_id, run_ref.run_id)
    run_ref.run_id = active.info.run_id
    tracker = RunLog(active.info.run_id, uri, resumed=resume is not None)
    log.info("MLflow run %s on %s%s", active.info.run_id, accelerator.device,
             " (resumed)" if reopened else "")
    try:
        train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt, resume, reopened, tracker)
        check_params_kept(args.params, params)
    except KeyboardInterrupt:
        tracker.close("KILLED")
        raise
    except BaseException:
        tracker.close("FAILED")
        raise
    if not tracker.close("FINISHED"):
        raise store_gone(args, tracker)
    if not cfg.keep_checkpoint:
        ckpt.clear()
