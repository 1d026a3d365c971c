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
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from textclf.io import UserError, file_md5, proc_stat, read_json

log = logging.getLogger(__name__)
EXPERIMENT = os.environ.get("MLFLOW_EXPERIMENT_NAME", "textclf")
# `dvc exp run --temp/--queue` runs in a copy under .dvc/tmp/exps/; runs logged
# relative to that copy would vanish with it, so they go to the project's store.
_EXP_COPY = os.sep + os.path.join(".dvc", "tmp", "exps") + os.sep
HOST_TAG, PID_TAG, START_TAG = "textclf.host", "textclf.pid", "textclf.pid_start"
SWEPT_TAG, RESUMED_TAG = "textclf.swept", "textclf.resumed_after"
DATASET_TRIES = 3
DUPLICATE_KEY = ("UniqueViolation", "duplicate key value", "UNIQUE constraint failed")


def project_root(cwd: str | Path | None = None) -> Path:
    here = str(Path(cwd or os.getcwd()).resolve())
    if _EXP_COPY in here + os.sep:
        return Path(here.split(_EXP_COPY)[0])
    return Path(here)


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite store at <project root>/mlflow.db,
    which `mlflow ui` started in the project root shows with no flags."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def _fix(uri: str) -> str:
    if uri.startswith(("http://", "https://")):
        return ("start the server (see README, Team setup) or unset MLFLOW_TRACKING_URI to use "
                "the project's mlflow.db")
    return "make the database and its folder writable, or point MLFLOW_TRACKING_URI at a working store"


_BACKEND_FIX = ("the server's database is down or unreachable; on the server's machine run "
                "scripts/server.sh start with the settings it was started with (it starts PostgreSQL "
                "and restarts mlflow server), or check the database its --backend-store-uri names")


def _denied(uri: str, status: int, action: str) -> UserError:
    """401/403 from an authenticating server -> the one line naming the variable to set."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    if status == 401 and not user:
        return UserError(f"MLflow tracking server {uri} requires a login (HTTP 401): set "
                         "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD to your account on it "
                         "(its admin makes one: scripts/server.sh add-user NAME EDIT).")
    if status == 401:
        return UserError(f"MLflow tracking server {uri} refused the login of MLFLOW_TRACKING_USERNAME="
                         f"{user} (HTTP 401): check that name and MLFLOW_TRACKING_PASSWORD (the "
                         "password scripts/server.sh add-user gave).")
    return UserError(f"MLflow tracking server {uri}: user {user} may not {action} experiment "
                     f"{EXPERIMENT} (HTTP 403): ask the server's admin for EDIT (scripts/server.sh "
                     f"add-user {user} EDIT), or set MLFLOW_TRACKING_USERNAME and "
                     "MLFLOW_TRACKING_PASSWORD to an account that has it.")


def _check_server(uri: str, timeout: float) -> None:
    """/health says the server process answers; it never asks for a login and answers 200 with
    the server's database down. One read of the experiment, without MLflow's minutes of
    retries, checks the login and the backend store too."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout).read()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise UserError(f"MLflow tracking server {uri} is unreachable ({reason}): "
                         f"{_fix(uri)}.") from None
    try:
        resp = http_request(get_default_host_creds(uri), "/api/2.0/mlflow/experiments/get-by-name", "GET",
                            max_retries=0, retry_codes=(), timeout=timeout, raise_on_status=False,
                            params={"experiment_name": EXPERIMENT})
    except mlflow.exceptions.MlflowException:  # a timeout: mlflow server retries its database for minutes
        raise UserError(f"MLflow tracking server {uri} answers /health, but no read from its backend "
                        f"store within {timeout:g} s: {_BACKEND_FIX}.") from None
    if resp.status_code in (401, 403):
        raise _denied(uri, resp.status_code, "read")
    if resp.status_code >= 500:
        try:
            detail = resp.json().get("message", "")
        except ValueError:
            detail = resp.text
        detail = (detail.strip().splitlines() or [resp.reason])[0][:300]
        raise UserError(f"MLflow tracking server {uri} answers, but its backend store fails (HTTP "
                        f"{resp.status_code}: {detail}): {_BACKEND_FIX}.")


def check_store(uri: str, timeout: float = 10.0) -> None:
    """Fail in one line, before any work, when the tracking store cannot be written.
    A server is probed first (_check_server): MLflow's own client retries for minutes."""
    if uri.startswith(("http://", "https://")):
        _check_server(uri, timeout)
    quiet = logging.getLogger("mlflow.store.db.utils")  # it logs the whole traceback first
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        with _without_retries(timeout):
            exp_id = use_experiment(uri)  # a read and, on first use, a write
            MlflowClient(uri).set_experiment_tag(exp_id, "textclf.checked", str(int(time.time())))
    except Exception as err:  # any store failure becomes the one line below
        status = getattr(err, "get_http_status_code", lambda: None)()
        if status in (401, 403):
            raise _denied(uri, status, "write to") from None
        lines = str(getattr(err, "message", "") or err).strip().splitlines() or [type(err).__name__]
        raise UserError(f"MLflow tracking store {uri} cannot be written ({lines[0][:300]}): "
                         f"{_fix(uri)}.") from None
    finally:
        quiet.setLevel(level)
    _check_artifact_root(exp_id)


@contextlib.contextmanager
def _without_retries(timeout: float):
    """MLflow's client reads these per request: a store that fails the check fails it at once."""
    names = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(timeout))}
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _check_artifact_root(exp_id: str) -> None:
    location = mlflow.get_experiment(exp_id).artifact_location
    if not location.startswith("file:"):
        return  # served by the tracking server (--artifacts-destination) or a cloud store
    folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(location).path))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UserError(f"MLflow artifact folder {folder} is not writable ({err.strerror or err}): "
                         "make it a writable folder.") from None


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


def process_tags() -> dict[str, str]:
    """Host and pid (for the stale-run sweep), and the multi-process launch it belongs to."""
    pid = os.getpid()
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), START_TAG: _process_start(pid)}
    if os.environ.get("TEXTCLF_LAUNCH_ID"):
        tags["textclf.launch_id"] = os.environ["TEXTCLF_LAUNCH_ID"]
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
    """Mark FAILED every RUNNING run of the experiment opened on this host by a process that
    is gone (SIGKILL, a crash, a lost machine cannot end its own run) -> the swept run ids."""
    client, host, swept = MlflowClient(), socket.gethostname(), []
    for run in client.search_runs([exp_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get(HOST_TAG) != host or not tags.get(PID_TAG, "").isdigit():
            continue
        if _alive(int(tags[PID_TAG]), tags.get(START_TAG, "")):
            continue
        client.set_tag(run.info.run_id, SWEPT_TAG, f"process {tags[PID_TAG]} on {host} was gone")
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


def training_run(run_file: str | Path) -> dict:
    """The training run that run_file names, in this machine's store (tracking_uri(): the
    MLFLOW_TRACKING_URI, else the project's mlflow.db), never the store the file recorded:
    the file travels through the DVC remote, and on a teammate's machine its URI names
    someone else's database. Checks the store first, then that the run is in it."""
    run = read_json(run_file)
    uri = tracking_uri()
    check_store(uri)
    if not run_exists(run["run_id"], uri):
        raise UserError(f"the training run {run['run_id']} ({run_file}) is not in the tracking store "
                         f"{uri}; it was logged to {run['tracking_uri']}. Point MLFLOW_TRACKING_URI at "
                         "that store (or the team's server that holds it), or retrain here: "
                         "dvc repro -f train.")
    return {**run, "tracking_uri": uri}


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
    for attempt in range(DATASET_TRIES):
        try:
            return MlflowClient().log_inputs(run_id, datasets=inputs)
        except mlflow.exceptions.MlflowException as err:
            # Two trainings logging the same data at once (`dvc queue start -j 2`): the store
            # looks the dataset up, both find none, both insert, one insert fails on the key.
            # Again, the dataset exists and is linked.
            if not any(s in str(err) for s in DUPLICATE_KEY) or attempt == DATASET_TRIES - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


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


def lock_hashes(lock: dict, running: str, datasets: set[str] = frozenset()) -> dict[str, str]:
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
