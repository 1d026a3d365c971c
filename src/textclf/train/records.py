"""What a training writes as it goes: guard results (reports/guards.json, MLflow tags) and the
per-epoch curve (CSV for DVC plots, MLflow metrics) with the collapse guard's verdict."""
from __future__ import annotations

import logging
from pathlib import Path

import mlflow
import pandas as pd

from textclf.io import UserError, write_csv, write_json
from textclf.train import guards

log = logging.getLogger("train")
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
