"""MLflow wiring: where runs go, a check that the store works before any work, the
process tags and the sweep of runs whose process is gone, and the tags that tie a run
to its code and data."""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import subprocess
import time
from collections.abc import Set
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from textclf.files import file_md5
from textclf.processes import LAUNCH_ID, proc_stat

log = logging.getLogger(__name__)
EXPERIMENT = os.environ.get("MLFLOW_EXPERIMENT_NAME", "textclf")
# `dvc exp run --temp/--queue` runs in a copy under .dvc/tmp/exps/; runs logged
# relative to that copy would vanish with it, so they go to the project's store.
_EXP_COPY = os.sep + os.path.join(".dvc", "tmp", "exps") + os.sep
HOST_TAG, PID_TAG, START_TAG = "textclf.host", "textclf.pid", "textclf.pid_start"
MACHINE_TAG = "textclf.machine"
SWEPT_TAG, RESUMED_TAG = "textclf.swept", "textclf.resumed_after"
CONFLICT_TRIES = 3
DUPLICATE_KEY = ("UniqueViolation", "duplicate key value", "UNIQUE constraint failed")


def conflict_safe(write, *args, **kwargs):
    """A store write that another training may make at the same moment (`dvc queue start -j 2`,
    a sweep's parallel trials): the store looks the row up, both find none, both insert, and
    one insert fails on the key. Again: the row exists now, so the write is an update (a tag
    set to this value, a dataset linked)."""
    for attempt in range(CONFLICT_TRIES):
        try:
            return write(*args, **kwargs)
        except mlflow.exceptions.MlflowException as err:
            if not any(s in str(err) for s in DUPLICATE_KEY) or attempt == CONFLICT_TRIES - 1:
                raise
            time.sleep(0.2 * attempt)


def project_root(cwd: str | Path | None = None) -> Path:
    here = str(Path(cwd or os.getcwd()).resolve())
    if _EXP_COPY in here + os.sep:
        return Path(here.split(_EXP_COPY)[0])
    return Path(here)


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite store at <project root>/mlflow.db,
    which `mlflow ui` started in the project root shows with no flags."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def use_experiment(uri: str | None = None) -> str:
    """Point MLflow at the store and experiment; return the experiment id."""
    uri = uri or tracking_uri()
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    # A local store: an absolute artifact root, so artifacts land beside mlflow.db whatever the
    # cwd. A server: its own root (mlflow-artifacts:/ when it proxies artifacts), never a folder
    # of the client's that the server and the other clients cannot see.
    local = None if uri.startswith(("http://", "https://")) else (project_root() / "mlruns").as_uri()
    try:
        return mlflow.create_experiment(EXPERIMENT, artifact_location=local)
    except mlflow.exceptions.MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        # another process created it since the lookup (two queued experiments on a new server)
        return mlflow.get_experiment_by_name(EXPERIMENT).experiment_id


def _process_start(pid: int) -> str:
    """Start time of a process in clock ticks since boot (Linux), so that a reused pid is
    not mistaken for the process that opened a run; "" where /proc is absent."""
    return "".join(proc_stat(pid)[19:20])


def machine_id() -> str:
    """Whose pids these are: the machine (/etc/machine-id, else this boot's id) and the pid
    namespace. Cloned VMs and containers can share a hostname, and a container on the host's
    network shares its hostname and kernel but not its pids, so a hostname alone cannot say
    that a pid in a run's tags is one this process can look up."""
    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        with contextlib.suppress(OSError):
            if text := Path(path).read_text().strip():
                parts.append(text)
                break
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return " ".join(parts)


def process_tags() -> dict[str, str]:
    """Host, machine and pid (for the stale-run sweep), and the multi-process launch it belongs to."""
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), MACHINE_TAG: machine_id(), PID_TAG: str(pid),
            START_TAG: _process_start(pid)}
    if os.environ.get(LAUNCH_ID):  # lets the launcher find the run its rank 0 opened
        tags["textclf.launch_id"] = os.environ[LAUNCH_ID]
    return tags


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not start or _process_start(pid) == start


def sweep_stale_runs(exp_id: str) -> list[str]:
    """Mark FAILED every RUNNING run of the experiment opened on this host and machine
    (machine_id) by a process that is gone (SIGKILL, a crash, a lost machine cannot end its own
    run) -> the swept run ids. A run without the machine tag (logged before 2026-12) goes by
    its host alone, as it did then."""
    client, host, machine, swept = MlflowClient(), socket.gethostname(), machine_id(), []
    for run in client.search_runs([exp_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or not tags.get(PID_TAG, "").isdigit():
            continue
        if tags.get(MACHINE_TAG, machine) != machine:
            continue  # its pid is another machine's or container's, which this one cannot see
        if _alive(int(tags[PID_TAG]), tags.get(START_TAG, "")):
            continue
        why = f"process {tags[PID_TAG]} on {host} was gone"
        conflict_safe(client.set_tag, run.info.run_id, SWEPT_TAG, why)  # two trainings sweep it at once
        client.set_terminated(run.info.run_id, "FAILED")
        log.warning("marked run %s FAILED: it was RUNNING, but its process %s on %s is gone",
                    run.info.run_id, tags[PID_TAG], host)
        swept.append(run.info.run_id)
    return swept


def mark_resumed(run_id: str) -> None:
    """A swept run that training reopens to resume: its sweep is history, not its state, so the
    swept tag becomes textclf.resumed_after (a FINISHED run must not say its process was gone)."""
    client = MlflowClient()
    swept = client.get_run(run_id).data.tags.get(SWEPT_TAG)
    if swept:
        client.set_tag(run_id, RESUMED_TAG, swept)
        client.delete_tag(run_id, SWEPT_TAG)


def fail_launched_runs(exp_id: str, launch_id: str) -> None:
    """After a failed multi-process launch: the run its rank 0 opened ends FAILED, even if
    rank 0 was stopped by torchrun's SIGTERM (KILLED) or SIGKILL (RUNNING)."""
    client = MlflowClient()
    for run in client.search_runs([exp_id], f"tags.`textclf.launch_id` = '{launch_id}'"):
        if run.info.status != "FINISHED":
            client.set_terminated(run.info.run_id, "FAILED")
            log.warning("marked run %s FAILED: a rank of its training failed", run.info.run_id)


def run_exists(run_id: str, uri: str | None = None) -> bool:
    try:
        return MlflowClient(uri).get_run(run_id).info.lifecycle_stage == "active"
    except mlflow.exceptions.MlflowException:
        return False


def add_to_run(run: dict, metrics: dict | None = None, tags: dict | None = None,
               artifacts: tuple = (), artifact_path: str | None = None,
               dicts: dict[str, dict] | None = None) -> None:
    """Log into a finished training run (evaluate, report) without reopening it: its status
    and end time stay what training recorded, even when this stage fails."""
    from mlflow.entities import Metric, RunTag

    client, now = MlflowClient(run["tracking_uri"]), int(time.time() * 1000)
    client.log_batch(run["run_id"], metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()],
                     tags=[RunTag(k, str(v)) for k, v in (tags or {}).items()])
    for path in artifacts:
        client.log_artifact(run["run_id"], str(path), artifact_path)
    for name, content in (dicts or {}).items():  # as JSON artifacts named `name`
        client.log_dict(run["run_id"], content, name)


def log_datasets(run_id: str, files: dict[str, str], context: str) -> None:
    """Files as MLflow datasets of the run (its Datasets section): the path as the source and
    its md5, the hash DVC records in dvc.lock, as the digest."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    inputs = [DatasetInput(Dataset(name, file_md5(path), "local", str(path)),
                           [InputTag("mlflow.data.context", context)]) for name, path in files.items()]
    conflict_safe(MlflowClient().log_inputs, run_id, datasets=inputs)  # the same data, two trainings


def dataset_sources(run: dict) -> set[str]:
    client = MlflowClient(run["tracking_uri"])
    return {d.dataset.source for d in client.get_run(run["run_id"]).inputs.dataset_inputs}


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def git_commit() -> str:
    return _git("rev-parse", "HEAD") or "unknown"


def run_name() -> str | None:
    """The MLflow run's name, so that the UI's list matches `dvc exp show` and `git log`: the
    DVC experiment's name (`dvc exp run -n NAME`, or the one DVC picks), else
    `<branch>@<short commit>` of the workspace; None outside git (MLflow picks one)."""
    if os.environ.get("DVC_EXP_NAME"):
        return os.environ["DVC_EXP_NAME"]
    short = _git("rev-parse", "--short", "HEAD")
    if not short:
        return None
    branch = _git("branch", "--show-current")
    return f"{branch}@{short}" if branch else short


def lineage_tags() -> dict[str, str]:
    """The code and experiment behind a run (its data: log_datasets)."""
    tags = {"git_commit": git_commit()}
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc.exp_name"] = os.environ["DVC_EXP_NAME"]
    return tags


def lock_hashes(lock: dict, running: str, datasets: Set[str] = frozenset()) -> dict[str, str]:
    """dvc.lock -> the lineage table of the report: the md5 of every stage output
    (`dvc.out.<path>`) but those shown as datasets, and of each stage's params
    (`dvc.params.<stage>`). The `running` stage's entry is skipped: DVC rewrites it only
    after the stage ends. (The MLflow run holds datasets and the dvc.lock file instead.)"""
    tags = {}
    for stage, entry in (lock.get("stages") or {}).items():
        if stage == running:
            continue
        for out in entry.get("outs") or []:
            if out.get("md5") and out["path"] not in datasets:
                tags[f"dvc.out.{out['path']}"] = out["md5"]
        if entry.get("params"):
            text = json.dumps(entry["params"], sort_keys=True, default=str)
            tags[f"dvc.params.{stage}"] = hashlib.md5(text.encode()).hexdigest()
    return tags
