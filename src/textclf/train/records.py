"""What a training writes as it goes: guard results (reports/guards.json, MLflow tags), the
per-epoch curve (CSV for DVC plots, MLflow metrics) with the collapse guard's verdict, and
RunLog, which logs them into the run without letting a failing tracking store cost the
training."""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any, Protocol

import mlflow
import numpy as np
import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from textclf.config import TrainParams
from textclf.errors import UserError, expected
from textclf.files import write_csv, write_json
from textclf.tracking.store import QUICK_HTTP, store_calls
from textclf.train import guards

log = logging.getLogger("train")
# (each epoch's row also holds train_seconds and cpu_seconds, what it cost so far: logged and
# sent to MLflow, not written here, so that the same params give the same curve file)
CURVE_FIELDS = ["epoch", "train_loss", "val_loss", "val_accuracy", "val_macro_f1", "top_share",
                "pred_entropy", "collapsed"]


class Tracker(Protocol):
    """Where a training's metrics, tags and small artifacts go, on every rank: rank 0's RunLog,
    NoTracking on the others."""

    @property
    def main(self) -> bool:
        """Whether this process writes the training's records (rank 0, for every rank)."""

    def log_metrics(self, values: dict[str, float], step: int = 0) -> None: ...

    def set_tag(self, key: str, value: object) -> None: ...

    def set_tags(self, tags: dict[str, object]) -> None: ...

    def log_params(self, params: dict[str, object]) -> None: ...

    def log_dict(self, content: dict[str, Any], name: str) -> None: ...

    def flush(self) -> bool:
        """Send what is queued -> whether the store has all of it now."""


class NoTracking:
    """What ranks other than 0 use instead of a RunLog: rank 0 tracks for every rank, so
    every call does nothing."""

    main = False

    def log_metrics(self, values: dict[str, float], step: int = 0) -> None:
        pass

    def set_tag(self, key: str, value: object) -> None:
        pass

    def set_tags(self, tags: dict[str, object]) -> None:
        pass

    def log_params(self, params: dict[str, object]) -> None:
        pass

    def log_dict(self, content: dict[str, Any], name: str) -> None:
        pass

    def flush(self) -> bool:
        return True  # nothing is ever queued


def store_failed(err: BaseException) -> bool:
    """An error of the tracking store rather than of this code: MLflow and SQLAlchemy errors,
    and OSErrors (a refused connection, a read-only artifact folder)."""
    return isinstance(err, Exception) and expected(err) and not isinstance(err, UserError)


def store_reason(err: BaseException) -> str:
    """A store failure's cause in a few words: the database driver's message (SQLAlchemy's own
    first line may be an autoflush note), an OSError's, the errno text of a refused
    connection, else the first line."""
    cause: BaseException | None = err
    for _ in range(10):  # the chain MLflow and SQLAlchemy wrap the driver's error in
        if cause is None:
            break
        orig = getattr(cause, "orig", None)
        if orig is not None:
            return str(orig).strip().splitlines()[0]
        cause = cause.__cause__ or cause.__context__
    if isinstance(err, OSError) and err.strerror:
        return f"{err.strerror}: {err.filename}" if err.filename else err.strerror
    text = str(getattr(err, "message", "") or err).strip()
    errno = re.search(r"\[Errno -?\d+\] [^'\")\]]+", text)
    return errno.group(0).strip() if errno else (text.splitlines() or [type(err).__name__])[0][:300]


class RunLog:
    """Rank 0's MLflow logging into one run, made to outlive the store going away (a server
    restarted or down, a database gone read-only). Metrics and tags are queued, and flush()
    sends them; the stage flushes once the checkpoint holding them is saved. When the store
    fails they stay queued (the checkpoint holds the epochs too), one warning says so, and
    the next flush tries again. A metric is logged once per (key, step): in a resumed run, and
    after a failure, the run's history is read first, since an earlier attempt may have logged
    some of them, and a request that failed may have reached the store."""

    main = True

    def __init__(self, run_id: str, uri: str, resumed: bool = False):
        self.run_id, self.uri, self.client = run_id, uri, MlflowClient(uri)
        self.metrics: dict[tuple[str, int], Metric] = {}
        self.tags: dict[str, str] = {}
        self.resumed, self.read_history = resumed, False
        self.failure: str | None = None  # the store's error, while it fails

    def log_metrics(self, values: dict[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)  # when measured, not when the store took it
        self.metrics.update({(k, step): Metric(k, float(v), now, step) for k, v in values.items()})

    def set_tag(self, key: str, value: object) -> None:
        self.tags[key] = str(value)

    def set_tags(self, tags: dict[str, object]) -> None:
        self.tags.update({k: str(v) for k, v in tags.items()})

    # Sent at once, at the start (check_store has just written to the store) or at the end
    # (after a flush that worked): a failure there stops the stage.
    def log_params(self, params: dict[str, object]) -> None:
        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_dict(self, content: dict[str, Any], name: str) -> None:
        self.client.log_dict(self.run_id, content, name)

    def log_artifact(self, path: str) -> None:
        self.client.log_artifact(self.run_id, path)

    def flush(self) -> bool:
        """Send what is queued -> whether the store has all of it now."""
        if not (self.metrics or self.tags):
            return self.failure is None
        try:
            with store_calls(QUICK_HTTP):
                if self.resumed or self.read_history:
                    self._drop_logged()
                self.client.log_batch(self.run_id, metrics=list(self.metrics.values()),
                                      tags=[RunTag(k, v) for k, v in self.tags.items()])
        except Exception as err:
            if not self.failed(err):
                raise
            return False
        if self.failure is not None:
            log.info("MLflow tracking store %s works again: the pending metrics are logged", self.uri)
        self.metrics, self.tags, self.read_history, self.failure = {}, {}, False, None
        return True

    def _drop_logged(self) -> None:
        for key in {key for key, _ in self.metrics}:
            for logged in self.client.get_metric_history(self.run_id, key):
                self.metrics.pop((key, logged.step), None)

    def failed(self, err: BaseException, warn: bool = True) -> bool:
        """Note `err` if it is a store failure (with a warning, once per outage, while the
        training goes on) -> whether it was."""
        if not store_failed(err):
            return False
        reason, self.read_history = store_reason(err), True
        if self.failure is None and warn:
            log.warning("MLflow tracking store %s failed (%s): training goes on; its metrics are kept "
                        "in the checkpoint and logged once the store works (next epoch, end of "
                        "training, or a rerun of the stage)", self.uri, reason)
        self.failure = reason
        return True

    def close(self, status: str) -> bool:
        """Flush, then end the run with `status` -> whether the store took both. MLflow's
        active run is closed in any case: a store that fails keeps the run RUNNING, and the
        next start of the stage marks it FAILED (sweep_stale_runs) or completes it (resume)."""
        sent = self.flush()
        try:
            with store_calls(QUICK_HTTP):
                mlflow.end_run(status)
        except Exception as err:
            if not self.failed(err, warn=False):
                raise
            return False
        return sent


class GuardBook:
    """Guard results, kept for reports/guards.json and set as MLflow tags `guard.<name>`;
    written out even when a guard fails the stage. Rides in the checkpoint."""

    def __init__(self, path: str, tracker: Tracker):
        self.path, self.tracker = path, tracker
        self.results: dict[str, dict[str, Any]] = {}

    def state_dict(self) -> dict[str, Any]:
        return {"results": self.results}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.results = dict(state["results"])

    def record(self, name: str, status: str, message: str, **extra) -> None:
        self.results[name] = {"status": status, "message": message, **extra}
        if self.tracker.main:  # rank 0 writes for every rank
            self.tracker.set_tag(f"guard.{name}", status)
            write_json(self.path, self.results)

    def check(self, name: str, fn, *args):
        try:
            status, message = fn(*args)
        except UserError as err:
            self.record(name, "fail", str(err))
            raise
        self.record(name, status, message)


class EpochLogger:
    """Per-epoch rows to a CSV (DVC plots) and the RunLog, plus the collapse detector, whose
    verdict is on the kept epoch (judge). Rides in the checkpoint: the rows and collapse
    history loaded on resume are written to the CSV again; the stage queues them again and
    the RunLog logs those the run lacks."""

    def __init__(self, path: str, y_val: list, labels: list[str], cfg: TrainParams, book: GuardBook,
                 weights: str = "none"):
        self.path, self.y_val, self.labels, self.cfg, self.book = Path(path), y_val, labels, cfg, book
        self.weights = weights  # the class weighting train.class_weights resolved to: silent_class's advice
        self.rows: list[dict[str, Any]] = []
        self.history: list[dict[str, Any]] = []  # collapse_check per epoch
        self.write()

    def state_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rows, self.history = list(state["rows"]), list(state["history"])
        self.write()

    def write(self) -> None:
        write_csv(pd.DataFrame(self.rows, columns=CURVE_FIELDS), self.path)

    def __call__(self, row: dict, probs) -> None:
        stats, recalls = self.checks(probs)
        self.history.append({"epoch": row["epoch"], **stats, **recalls})
        row = {**row, "top_share": stats["top_share"], "pred_entropy": stats["pred_entropy"],
               "collapsed": int(stats["collapsed"])}
        self.rows.append({k: row[k] for k in CURVE_FIELDS})
        self.write()
        self.book.tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])
        if stats["collapsed"]:
            log.warning("epoch %d: %s", row["epoch"], guards.collapse_message(stats, self.random_encoder(),
                                                                            self.lr_high()))
        self.judge(row["epoch"])  # for now, as if this epoch were kept

    def lr_high(self) -> bool:
        """lr_sanity did not pass (or did not run): a collapse may be the learning rate's."""
        return self.book.results.get("lr_sanity", {}).get("status") != "pass"

    def random_encoder(self) -> bool:
        """load_audit let a RANDOM encoder train (model.allow_random_init: true)."""
        return self.book.results.get("load_audit", {}).get("status") == "allowed"

    def checks(self, probs, thresholds=None) -> tuple[dict, dict]:
        """An epoch's (documents, C) validation probabilities -> collapse and recall stats;
        multi-label (multi-hot y_val) on the labels at `thresholds`, by default 0.5 (an epoch's
        own: the per-label thresholds are tuned once training ends)."""
        if self.y_val and isinstance(self.y_val[0], list):
            cut = 0.5 if thresholds is None else thresholds
            stats, recalls = guards.multilabel_checks(probs >= cut, np.asarray(self.y_val), self.labels,
                                                      self.cfg.collapse_share)
            return {**stats, "at": "probability 0.5" if thresholds is None else
                    "the per-label thresholds tuned on validation"}, recalls
        pred = probs.argmax(axis=1)
        return (guards.collapse_check(pred, self.y_val, self.labels, self.cfg.collapse_share),
                guards.recall_check(pred, self.y_val, self.labels))

    def use_thresholds(self, epoch: int, probs, thresholds) -> None:
        """Multi-label, once the thresholds are tuned: the kept epoch's top label set at those
        thresholds, said beside the collapse the curve records at 0.5. Both guards judge at 0.5,
        one rule: a model that gives the empty set to every document there collapsed, and its
        labels are silent, whatever thresholds tuned afterwards make of its probabilities
        (silent_class judged at the tuned ones passed such a model; issue 60)."""
        entry = next(h for h in self.history if h["epoch"] == epoch)
        stats, _ = self.checks(probs, thresholds)
        entry.update({"tuned": {k: stats[k] for k in ("top_class", "top_share")}})

    def judge(self, kept_epoch: int, final: bool = False) -> str:
        """Record the collapse and silent_class guards for the kept epoch -> the collapse
        status. With `final`, fail_on_collapse fails the stage when the kept model is
        collapsed (never on an earlier epoch the training recovered from)."""
        status, message = guards.judge_collapse(self.history, kept_epoch, self.random_encoder(), self.lr_high())
        collapsed = [h["epoch"] for h in self.history if h["collapsed"]]
        self.book.record("collapse", status, message, epoch=kept_epoch, collapsed_epochs=collapsed)
        kept = next(h for h in self.history if h["epoch"] == kept_epoch)  # judge_collapse found it
        silent_status, silent_message, silent = guards.judge_silent_class(kept, self.labels,
                                                                          self.cfg.silent_class_support, self.weights)
        self.book.record("silent_class", silent_status, silent_message, epoch=kept_epoch, classes=silent,
                         class_weights=self.weights)
        if final and silent_status != "pass":
            log.warning("silent_class guard: %s", silent_message)
        if final and status != "pass":
            log.warning("collapse guard: %s: %s", status, message)
        if final and status == "collapsed" and self.cfg.fail_on_collapse:
            raise UserError(message + " (train.fail_on_collapse is true)")
        return status
