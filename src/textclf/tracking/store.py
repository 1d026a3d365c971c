"""Is the tracking store there and ours to write? One line before any work when it is not
(unreachable, a login missing or refused, a server whose database is down, a read-only file),
quick MLflow calls while training, and the training run a later stage logs into."""
from __future__ import annotations

import contextlib
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
from mlflow.exceptions import RestException
from mlflow.tracking import MlflowClient

from textclf.errors import UserError
from textclf.files import read_json
from textclf.tracking.runs import EXPERIMENT, conflict_safe, run_exists, tracking_uri, use_experiment

NOISY = ("mlflow.store.db.utils", "urllib3.connectionpool")  # a traceback, a line per retry
# MLflow's client retries a dead server for minutes (7 tries, backoff factor 2, 120 s a try).
# Training's calls, and predict's and serve's download of a model, give up within seconds
# instead (store_calls); a user's own setting of these variables wins.
QUICK_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
              "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


def _fix(uri: str) -> str:
    if uri.startswith(("http://", "https://")):
        return ("start the server (see README, Team setup) or unset MLFLOW_TRACKING_URI to use "
                "the project's mlflow.db")
    return "make the database and its folder writable, or point MLFLOW_TRACKING_URI at a working store"


_BACKEND_FIX = ("the server's database is down or unreachable; on the server's machine run "
                "scripts/server.sh start with the settings it was started with (it starts PostgreSQL "
                "and restarts mlflow server), or check the database its --backend-store-uri names")
_ANSWERED_FIX = ("the server runs and gave this error: see its log (scripts/server.sh keeps it in "
                 "$TEXTCLF_STATE/mlflow.log on the server's machine), then run the stage again")


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


def check_readable(uri: str, timeout: float = 10.0) -> None:
    """Fail in one line, in seconds, when a tracking server cannot be read (predict and serve
    only read a model); a database or a folder store has no server to be down."""
    if uri.startswith(("http://", "https://")):
        _check_server(uri, timeout)


def check_store(uri: str, timeout: float = 10.0) -> None:
    """Fail in one line, before any work, when the tracking store cannot be written.
    A server is probed first (_check_server): MLflow's own client retries for minutes."""
    if uri.startswith(("http://", "https://")):
        _check_server(uri, timeout)
    once = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(timeout))}
    try:
        with store_calls(once, force=True):  # a store that fails the check fails it at once
            exp_id = use_experiment(uri)  # a read and, on first use, a write
            # two trainings starting together on a new experiment both insert this tag
            conflict_safe(MlflowClient(uri).set_experiment_tag, exp_id, "textclf.checked", str(int(time.time())))
    except Exception as err:  # any store failure becomes the one line below
        status = getattr(err, "get_http_status_code", lambda: None)()
        if status in (401, 403):
            raise _denied(uri, status, "write to") from None
        lines = str(getattr(err, "message", "") or err).strip().splitlines() or [type(err).__name__]
        fix = _ANSWERED_FIX if isinstance(err, RestException) else _fix(uri)  # up, but refusing
        raise UserError(f"MLflow tracking store {uri} cannot be written ({lines[0][:300]}): "
                         f"{fix}.") from None
    _check_artifact_root(exp_id)


@contextlib.contextmanager
def store_calls(http: dict[str, str], force: bool = False):
    """MLflow calls under these MLFLOW_HTTP_REQUEST_* settings (MLflow's client reads them per
    request; a user's own setting wins unless `force`), and without the traceback and the line
    per retry that MLflow and urllib3 log on the way: the caller says what failed, once."""
    chosen = {k: v for k, v in http.items() if force or k not in os.environ}
    saved = {k: os.environ.get(k) for k in chosen}
    os.environ.update(chosen)
    loggers = [logging.getLogger(name) for name in NOISY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for k, value in saved.items():
            if value is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = value
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


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
