"""The train stage's work: build and audit the model, train it with checkpoints and guards,
save and log it, under one MLflow run (rank 0), or relaunch itself on train.processes.

Guards run in order: pretrained-load audit, optimizer coverage, learning-rate sanity,
the collapse detector at each validation, and the weight-movement audit at the end.
A failing guard records its result (reports/guards.json, MLflow tag) and fails the stage.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import mlflow
import pandas as pd
import torch
from accelerate.utils import set_seed

from textclf.config import flatten, load_params
from textclf.inference.serving import log_pyfunc
from textclf.io import UserError, atomic_path, deferred_interrupts, write_csv, write_json
from textclf.model.batching import Collator, read_token_splits
from textclf.model.modeling import build_model, encoder_param_names, load_tokenizer, pad_id, save_model
from textclf.model.policy import apply_policy, describe_groups, find_unused, make_optimizer, param_groups
from textclf.tracking.runs import (check_store, fail_launched_runs, lineage_tags, log_datasets, process_tags,
                                   run_exists, run_name, sweep_stale_runs, tracking_uri, use_experiment)
from textclf.train import guards
from textclf.train.checkpoint import Checkpointer, Progress, training_key
from textclf.train.launch import forbid_tracking, is_worker, launch, rank
from textclf.train.loop import EpochSelector, fit, make_accelerator
from textclf.train.records import EpochLogger, GuardBook, NoTracking

log = logging.getLogger("train")
# what train reads, logged to its run and saved in the model's params.json (predict reads
# tokenize from it); the upstream sections reach the run through the dvc.lock it logs
LOGGED_SECTIONS = ("tokenize", "model", "train")


def prepare(params, splits, labels, pad_id, book: GuardBook):
    """Build the model, audit it, apply the encoder policy, build and check the optimizer."""
    cfg, model_cfg = params["train"], params["model"]
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


def checkpoint_key(params: dict, args) -> str:
    """What shapes training: model and train params (not the checkpoint settings), and the
    bytes of the tokens and splits."""
    train = {k: v for k, v in dataclasses.asdict(params["train"]).items()
             if k not in ("checkpoint_every", "keep_checkpoint")}  # processes stays: RNG files per rank
    return training_key({"model": dataclasses.asdict(params["model"]), "train": train},
                        {"tokens": args.tokens, "splits": args.splits})


def open_run(exp_id: str, resume: Progress | None):
    """A new run, or on resume the checkpoint's run, reopened -> (active run, reopened?)."""
    run_id = resume.extra.get("run_id") if resume else None
    if run_id and run_exists(run_id):
        return mlflow.start_run(run_id=run_id), True
    if run_id:
        log.warning("the checkpoint's MLflow run %s is not in %s; logging to a new run",
                    run_id, mlflow.get_tracking_uri())
    return mlflow.start_run(experiment_id=exp_id, run_name=run_name()), False


def train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt: Checkpointer,
                   resume: Progress | None, reopened: bool) -> None:
    cfg, active = params["train"], mlflow.active_run()
    tracker = mlflow if accelerator.is_main_process else NoTracking()
    logged = {s: params[s] for s in LOGGED_SECTIONS}
    if not reopened:
        tracker.log_params(flatten(logged))
    tracker.set_tags({**lineage_tags(), **process_tags()})
    if active is not None and not reopened:  # lineage: the data as datasets, dvc.lock as it stands
        log_datasets(active.info.run_id, {"tokens": args.tokens, "splits": args.splits}, "training")
        if Path(args.lock).is_file():
            mlflow.log_artifact(args.lock)
    extra = resume.extra if resume else {}
    book = GuardBook(args.guards, tracker, extra.get("guards"))
    epochs = EpochLogger(args.curve, splits["validation"].labels, labels, cfg, book, extra.get("rows"),
                         extra.get("collapse"))
    if resume and not reopened:  # a new run: give it the epochs trained before the interruption
        for row in epochs.rows:
            tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
    selector = EpochSelector(cfg.select, cfg.patience, cfg.select_metric, extra.get("selector"),
                             ckpt.resumed_tensors())
    ckpt.extra_state = lambda: {"run_id": active and active.info.run_id, "rows": epochs.rows,
                                "collapse": epochs.history, "guards": book.results,
                                "selector": selector.state()}
    ckpt.extra_tensors = lambda: selector.weights if accelerator.is_main_process else None
    model, optimizer, encoder = prepare(params, splits, labels, pad_id(tokenizer), book)
    before = guards.snapshot(model)  # the seeded initial weights, rebuilt the same on resume
    with deferred_interrupts():  # SIGINT/SIGTERM: checkpoint at the next step, then stop
        model = fit(model, optimizer, splits["train"], splits["validation"], cfg,
                    pad_id(tokenizer), accelerator, epochs, ckpt, selector)
    if not accelerator.is_main_process:
        return
    tracker.log_metrics({"kept_epoch": selector.kept_epoch, "epochs_trained": selector.last_epoch})
    epochs.judge(selector.kept_epoch, final=True)  # the guards judge the model that is kept
    rows = guards.weight_movement(model, before, encoder)
    write_csv(pd.DataFrame(rows), args.movement)
    mlflow.log_artifact(args.movement)
    book.check("weight_movement", guards.movement_check, model, before, encoder, cfg)
    with atomic_path(args.model_dir, folder=True) as tmp:  # a kill mid-save leaves no half model
        save_model(model, tmp, tokenizer, logged)
    info = log_pyfunc(args.model_dir, example_texts(tokenizer, splits["validation"]))
    write_json(args.run_file, {"run_id": active.info.run_id, "experiment_id": active.info.experiment_id,
                               "tracking_uri": mlflow.get_tracking_uri(),
                               "model_uri": info.model_uri, "kept_epoch": selector.kept_epoch,
                               "epochs_trained": selector.last_epoch})


def launch_processes(cfg, argv: list[str]) -> None:
    """train.processes > 1: rerun this stage under torchrun, then check how it ended."""
    uri = tracking_uri()
    check_store(uri)  # fail here, once, before starting N processes
    rc, launch_id = launch("stages.train", argv, cfg.processes)
    if rc != 0:
        fail_launched_runs(use_experiment(uri), launch_id)
        raise UserError(f"training on train.processes={cfg.processes} processes failed (torchrun "
                         f"exit {rc}); the failing rank's error is logged above.")


def run(args, argv: list[str]) -> None:
    """The stage, from its parsed arguments; `argv` relaunches it under torchrun."""
    params = load_params(args.params)
    cfg = params["train"]
    if cfg.processes > 1 and not is_worker():
        return launch_processes(cfg, argv)
    main_rank = rank() == 0
    if main_rank:
        uri = tracking_uri()
        check_store(uri)  # one clear line, before any training
        exp_id = use_experiment(uri)
        sweep_stale_runs(exp_id)
    else:
        forbid_tracking()
    splits, labels = read_token_splits(args.tokens, args.splits, names=("train", "validation"))
    tokenizer = load_tokenizer(params["model"].name)
    ckpt = Checkpointer(args.checkpoint_dir, checkpoint_key(params, args), cfg.checkpoint_every,
                        main=main_rank)
    resume = ckpt.find()
    set_seed(cfg.seed)  # before the head is initialised
    accelerator = make_accelerator(cfg.precision)
    if not main_rank:
        return train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt, resume, False)
    active, reopened = open_run(exp_id, resume)
    log.info("MLflow run %s on %s%s", active.info.run_id, accelerator.device,
             " (resumed)" if reopened else "")
    try:
        train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt, resume, reopened)
    except KeyboardInterrupt:
        mlflow.end_run("KILLED")
        raise
    except BaseException:
        mlflow.end_run("FAILED")
        raise
    mlflow.end_run()
    if not cfg.keep_checkpoint:
        ckpt.clear()
