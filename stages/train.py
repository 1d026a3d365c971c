"""Stage train: token ids + split -> fine-tuned model folder, training curve, guard
results, weight movement and one MLflow run.

Guards run in order: pretrained-load audit, optimizer coverage, learning-rate sanity,
the collapse detector at each validation, and the weight-movement audit at the end.
A failing guard records its result (reports/guards.json, MLflow tag) and fails the stage.

A checkpoint is saved after every epoch (and every train.checkpoint_every steps) in
--checkpoint-dir, a folder DVC does not manage (a `persist` output would turn off DVC's
run-cache for this stage). A rerun after Ctrl-C, SIGTERM or SIGKILL resumes from it into
the same MLflow run; SIGINT/SIGTERM save one at the next step and end the run KILLED.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
from pathlib import Path

import mlflow
import pandas as pd
import torch
from accelerate.utils import set_seed

from textclf.train import guards
from textclf.model.batching import Collator, read_token_splits
from textclf.train.checkpoint import Checkpointer, Progress, training_key
from textclf.config import flatten, load_params
from textclf.io import UserError, deferred_interrupts, run_stage, setup_logging, stage_parser, write_csv, write_json
from textclf.train.launch import forbid_tracking, is_worker, launch, rank
from textclf.model.modeling import build_model, encoder_param_names, load_tokenizer, save_model
from textclf.model.policy import apply_policy, describe_groups, find_unused, make_optimizer, param_groups
from textclf.inference.serving import log_pyfunc
from textclf.tracking.runs import (check_store, fail_launched_runs, lineage_tags, log_datasets, process_tags,
                              run_exists, run_name, sweep_stale_runs, tracking_uri, use_experiment)
from textclf.train.loop import EpochSelector, fit, make_accelerator

log = logging.getLogger("train")
LOGGED_SECTIONS = ("ingest", "tokenize", "split", "model", "train")
CURVE_FIELDS = ["epoch", "train_loss", "val_loss", "val_accuracy", "val_macro_f1", "top_share",
                "pred_entropy", "collapsed"]


class NoTracking:
    """What ranks other than 0 use instead of mlflow: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class GuardBook:
    """Guard results, kept for reports/guards.json and set as MLflow tags `guard.<name>`;
    written out even when a guard fails the stage. `results` may come from a checkpoint."""

    def __init__(self, path: str, tracker, results: dict | None = None):
        self.path, self.tracker, self.results = path, tracker, dict(results or {})

    def record(self, name: str, status: str, message: str, **extra) -> None:
        self.results[name] = {"status": status, "message": message, **extra}
        if self.tracker is mlflow:  # rank 0 writes for every rank
            mlflow.set_tag(f"guard.{name}", status)
            write_json(self.path, self.results)

    def check(self, name: str, fn, *args):
        try:
            status, message = fn(*args)
        except UserError as err:
            self.record(name, "fail", str(err))
            raise
        self.record(name, status, message)


class EpochLogger:
    """Per-epoch rows to a CSV (DVC plots) and MLflow, plus the collapse detector, whose
    verdict is on the kept epoch (judge). `rows` and `history` from a checkpoint are written
    to the CSV again but not logged again."""

    def __init__(self, path: str, y_val: list[int], labels: list[str], cfg, book: GuardBook,
                 rows: list[dict] | None = None, history: list[dict] | None = None):
        self.path, self.y_val, self.labels, self.cfg, self.book = Path(path), y_val, labels, cfg, book
        self.rows, self.history = list(rows or []), list(history or [])  # history: collapse_check per epoch
        self.write()

    def write(self) -> None:
        write_csv(pd.DataFrame(self.rows, columns=CURVE_FIELDS), self.path)

    def __call__(self, row: dict, probs) -> None:
        stats = guards.collapse_check(probs.argmax(axis=1), self.y_val, self.labels,
                                      self.cfg.collapse_share)
        self.history.append({"epoch": row["epoch"], **stats})
        row = {**row, "top_share": stats["top_share"], "pred_entropy": stats["pred_entropy"],
               "collapsed": int(stats["collapsed"])}
        self.rows.append({k: row[k] for k in CURVE_FIELDS})
        self.write()
        mlflow.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
        if stats["collapsed"]:
            log.warning("epoch %d: %s", row["epoch"], guards.collapse_message(stats))
        self.judge(row["epoch"])  # for now, as if this epoch were kept

    def judge(self, kept_epoch: int, final: bool = False) -> str:
        """Record the collapse guard for the kept epoch -> its status. With `final`,
        fail_on_collapse fails the stage when the kept model is collapsed (never on an
        earlier epoch the training recovered from)."""
        status, message = guards.judge_collapse(self.history, kept_epoch)
        collapsed = [h["epoch"] for h in self.history if h["collapsed"]]
        self.book.record("collapse", status, message, epoch=kept_epoch, collapsed_epochs=collapsed)
        if final and status != "pass":
            log.warning("collapse guard: %s: %s", status, message)
        if final and status == "collapsed" and self.cfg.fail_on_collapse:
            raise UserError(message + " (train.fail_on_collapse is true)")
        return status


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
    cfg, run = params["train"], mlflow.active_run()
    tracker = mlflow if accelerator.is_main_process else NoTracking()
    logged = {s: params[s] for s in LOGGED_SECTIONS}
    if not reopened:
        tracker.log_params(flatten(logged))
    tracker.set_tags({**lineage_tags(), **process_tags()})
    if run is not None and not reopened:  # lineage: the data as datasets, dvc.lock as it stands
        log_datasets(run.info.run_id, {"tokens": args.tokens, "splits": args.splits}, "training")
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
    ckpt.extra_state = lambda: {"run_id": run and run.info.run_id, "rows": epochs.rows,
                                "collapse": epochs.history, "guards": book.results,
                                "selector": selector.state()}
    ckpt.extra_tensors = lambda: selector.weights if accelerator.is_main_process else None
    model, optimizer, encoder = prepare(params, splits, labels, tokenizer.pad_token_id, book)
    before = guards.snapshot(model)  # the seeded initial weights, rebuilt the same on resume
    with deferred_interrupts():  # SIGINT/SIGTERM: checkpoint at the next step, then stop
        model = fit(model, optimizer, splits["train"], splits["validation"], cfg,
                    tokenizer.pad_token_id, accelerator, epochs, ckpt, selector)
    if not accelerator.is_main_process:
        return
    tracker.log_metrics({"kept_epoch": selector.kept_epoch, "epochs_trained": selector.last_epoch})
    epochs.judge(selector.kept_epoch, final=True)  # the guards judge the model that is kept
    rows = guards.weight_movement(model, before, encoder)
    write_csv(pd.DataFrame(rows), args.movement)
    mlflow.log_artifact(args.movement)
    book.check("weight_movement", guards.movement_check, model, before, encoder, cfg)
    save_model_atomic(model, Path(args.model_dir), tokenizer, logged)
    info = log_pyfunc(args.model_dir, example_texts(tokenizer, splits["validation"]))
    write_json(args.run_file, {"run_id": run.info.run_id, "experiment_id": run.info.experiment_id,
                               "tracking_uri": mlflow.get_tracking_uri(),
                               "model_uri": info.model_uri, "kept_epoch": selector.kept_epoch,
                               "epochs_trained": selector.last_epoch})


def save_model_atomic(model, folder: Path, tokenizer, params: dict) -> None:
    """Into a temp folder, then one rename: a kill mid-save leaves no half model folder."""
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tmp, tokenizer, params)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def launch_processes(cfg, argv: list[str]) -> None:
    """train.processes > 1: rerun this stage under torchrun, then check how it ended."""
    uri = tracking_uri()
    check_store(uri)  # fail here, once, before starting N processes
    rc, launch_id = launch("stages.train", argv, cfg.processes)
    if rc != 0:
        fail_launched_runs(use_experiment(uri), launch_id)
        raise UserError(f"training on train.processes={cfg.processes} processes failed (torchrun "
                         f"exit {rc}); the failing rank's error is logged above.")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True, help="output model folder")
    parser.add_argument("--curve", required=True, help="output CSV: per-epoch loss and validation scores")
    parser.add_argument("--guards", required=True, help="output JSON: guard results")
    parser.add_argument("--movement", required=True, help="output CSV: relative weight change per layer")
    parser.add_argument("--run-file", required=True, help="output JSON naming the MLflow run")
    parser.add_argument("--lock", default="dvc.lock", help="dvc.lock, logged to the run as its lineage")
    parser.add_argument("--checkpoint-dir", default="models/checkpoint",
                        help="training checkpoints, to resume an interrupted training")
    args = parser.parse_args(argv)
    setup_logging()
    params = load_params(args.params)
    cfg = params["train"]
    if cfg.processes > 1 and not is_worker():
        return launch_processes(cfg, sys.argv[1:] if argv is None else argv)
    main_rank = rank() == 0
    if main_rank:
        uri = tracking_uri()
        check_store(uri)  # one clear line, before any training
        exp_id = use_experiment(uri)
        sweep_stale_runs(exp_id)
    else:
        forbid_tracking()
    splits, labels = read_token_splits(args.tokens, args.splits)
    tokenizer = load_tokenizer(params["model"].name)
    ckpt = Checkpointer(args.checkpoint_dir, checkpoint_key(params, args), cfg.checkpoint_every,
                        main=main_rank)
    resume = ckpt.find()
    set_seed(cfg.seed)  # before the head is initialised
    accelerator = make_accelerator(cfg.precision)
    if not main_rank:
        return train_and_save(args, params, splits, labels, tokenizer, accelerator, ckpt, resume, False)
    run, reopened = open_run(exp_id, resume)
    log.info("MLflow run %s on %s%s", run.info.run_id, accelerator.device,
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


if __name__ == "__main__":
    run_stage(main)
