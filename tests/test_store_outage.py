"""The tracking store goes away in the middle of a training: the training finishes, writes its
outputs, and its run ends up with every epoch's metrics exactly once, at once when the store
comes back, else when the stage is rerun. Real train stage processes, a real `mlflow server`
killed with SIGKILL and restarted, a real SQLite database on a folder remounted read-only, a
real artifact folder remounted read-only. The encoder is conftest's tiny RANDOM BERT (this is
plumbing): it trains too fast to aim from outside, so the stage pauses at exact points while
the test breaks or mends the store (tests/paused_train.py)."""
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from textclf.train.records import CURVE_FIELDS

from conftest import REPO, free_port, run_train, venv_env, write_params

PAUSED = str(REPO / "tests" / "paused_train.py")
TRAIN = ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model", "--curve", "curve.csv",
         "--guards", "guards.json", "--movement", "move.csv", "--run-file", "run.json"]  # as run_train
METRICS = [f for f in CURVE_FIELDS if f != "epoch"]


def stage_env(uri: str) -> dict:
    return {**venv_env(), "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO)}


def train_paused(tmp: Path, uri: str, actions: dict, timeout: float = 400) -> tuple[int, str]:
    """The train stage pausing at each 'E:S' of `actions` (in order) while the test runs its
    action -> (exit status, what it logged)."""
    marks, log = tmp / "marks", tmp / "train.log"
    cmd = [sys.executable, PAUSED, str(marks), *actions, "--", *TRAIN]
    with open(log, "w") as out:  # a file, never a pipe the test would have to drain
        proc = subprocess.Popen(cmd, cwd=tmp, env=stage_env(uri), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        for point, action in actions.items():
            name = point.replace(":", "-")
            while not (marks / f"at-{name}").exists():
                assert proc.poll() is None, f"exit {proc.returncode} before {point}: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no {point} in {timeout} s: {log.read_text()[-3000:]}"
                time.sleep(0.05)
            action()
            (marks / f"go-{name}").touch()
        return proc.wait(timeout=max(1, deadline - time.monotonic())), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def rerun(p: list[str], caplog) -> None:
    """The stage again, in this process (it is the paused one's train args), once the store
    works: it resumes from the final checkpoint and trains no epoch again."""
    caplog.set_level(logging.INFO)
    caplog.clear()
    run_train(p)
    assert "resuming from checkpoint" in caplog.text
    epochs = [r for r in caplog.records if r.name == "textclf.train.loop" and r.getMessage().startswith("epoch ")]
    assert not epochs, "the rerun trained again"


def lines(log: str, level: str) -> list[str]:
    return [line for line in log.splitlines() if f" {level} " in line]


def assert_complete(uri: str, epochs: int) -> str:
    """One run in the store, FINISHED, each epoch's metrics in it exactly once -> its id."""
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    assert run.info.status == "FINISHED"
    for key in METRICS:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert sorted(steps) == list(range(1, epochs + 1)), (key, steps)
    assert len(client.get_metric_history(run.info.run_id, "kept_epoch")) == 1
    return run.info.run_id


def assert_outputs_written(tmp: Path, epochs: int) -> None:
    assert (tmp / "model" / "model.safetensors").is_file()
    assert len(pd.read_csv(tmp / "curve.csv")) == epochs
    assert (tmp / "move.csv").is_file() and json.loads((tmp / "guards.json").read_text())
    assert not (tmp / "run.json").exists()  # it names the logged model: written once that is


class Server:
    """A plain `mlflow server` on a SQLite store in its own process group, so that kill()
    takes its workers down with it, as a crash or an OOM kill would."""

    def __init__(self, folder: Path):
        self.folder, self.url, self.proc = folder, f"http://127.0.0.1:{free_port()}", None
        folder.mkdir()

    def start(self, seconds: float = 120) -> None:
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--workers", "1",
               "--port", self.url.rsplit(":", 1)[1], "--artifacts-destination", str(self.folder / "artifacts"),
               "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}"]
        with open(self.folder / "server.log", "a") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.folder, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True,
                                         env={**venv_env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.monotonic() + seconds
        while True:
            assert self.proc.poll() is None, (self.folder / "server.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return
            except OSError:
                assert time.monotonic() < deadline, (self.folder / "server.log").read_text()[-3000:]
                time.sleep(0.3)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.mark.slow
def test_server_killed_in_epoch_2_and_restarted_loses_no_metric(prepared):
    """Issue 23: SIGKILL to the server after step 1 of epoch 2; it is back after epoch 3's
    checkpoint. Epoch 2's logging fails in seconds (not MLflow's minutes of retries) with one
    warning, epoch 3's flush logs epochs 2 and 3, and the run ends FINISHED with each epoch once."""
    tmp, _ = prepared
    write_params(tmp / "params.yaml", train={"epochs": 4})
    srv = Server(tmp / "srv")
    srv.start()
    down = {}
    try:
        rc, log = train_paused(tmp, srv.url, {
            "2:1": lambda: (srv.kill(), down.setdefault("at", time.monotonic())),
            "3:0": lambda: (down.setdefault("for", time.monotonic() - down["at"]), srv.start())})
        assert rc == 0 and "Traceback" not in log, log[-3000:]
        assert down["for"] < 60, f"the rest of epoch 2 and epoch 3 took {down['for']:.0f} s without a server"
        (warning,) = [line for line in lines(log, "WARNING") if "tracking store" in line]
        assert f"MLflow tracking store {srv.url} failed" in warning and "Connection refused" in warning
        assert "works again" in log
        run_id = assert_complete(srv.url, 4)
        assert json.loads((tmp / "run.json").read_text())["run_id"] == run_id
    finally:
        srv.kill()


@pytest.fixture
def read_only(tmp_path):
    """-> a function that remounts a folder read-only in place (a bind mount over itself:
    root ignores file modes, not a read-only mount), and one that undoes it."""
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    proc = subprocess.run(["mount", "--bind", "-o", "ro", str(probe), str(probe)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot remount a folder read-only here ({proc.stderr.strip()}); it needs root "
                    "with CAP_SYS_ADMIN, as CI has")
    subprocess.run(["umount", str(probe)], check=True)
    mounted = []

    def freeze(folder: Path) -> None:
        subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], check=True)
        mounted.append(folder)

    def thaw() -> None:
        while mounted:
            subprocess.run(["umount", "-l", str(mounted.pop())], check=False)
    yield freeze, thaw
    thaw()


@pytest.mark.slow
def test_sqlite_store_read_only_from_epoch_1_then_rerun_completes_the_run(prepared, read_only, caplog,
                                                                         monkeypatch):
    """Issue 24 item 4: the database's folder turns read-only after epoch 1's checkpoint and
    stays so. Training goes on (one warning naming the store), writes every output, and fails
    in one line saying so; once the store is writable the rerun trains nothing and completes
    the same run with every epoch once."""
    tmp, p = prepared
    freeze, thaw = read_only
    (tmp / "store").mkdir()
    uri = f"sqlite:///{tmp / 'store' / 'mlflow.db'}"
    rc, log = train_paused(tmp, uri, {"1:0": lambda: freeze(tmp / "store")})
    (error,) = lines(log, "ERROR")
    assert rc == 1 and "Traceback" not in log, log[-3000:]
    assert f"MLflow tracking store {uri} failed" in error and "outputs are written" in error
    assert "rerun the stage" in error and "database" in error and "autoflush" not in error  # SQLite's words
    (warning,) = [line for line in lines(log, "WARNING") if "tracking store" in line]
    assert "training goes on" in warning
    assert_outputs_written(tmp, 2)

    thaw()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    rerun(p, caplog)
    run_id = assert_complete(uri, 2)
    assert run_id in error


@pytest.mark.slow
def test_artifact_store_failing_after_training_leaves_every_local_output(prepared, read_only, caplog):
    """Issue 24 item 5: the artifact folder turns read-only after the last checkpoint. The
    weight-change upload used to fail before the model folder was written; now the model
    folder, curve, guards and weight change are all written, then the stage fails in one line."""
    tmp, p = prepared
    freeze, thaw = read_only
    uri = f"sqlite:///{tmp / 'mlflow.db'}"  # as `prepared` set it for this process
    rc, log = train_paused(tmp, uri, {"2:0": lambda: freeze(tmp / "mlruns")})
    (error,) = lines(log, "ERROR")
    assert rc == 1 and "Traceback" not in log, log[-3000:]
    assert "outputs are written" in error and "Read-only file system" in error
    assert_outputs_written(tmp, 2)

    thaw()
    rerun(p, caplog)
    run_id = assert_complete(uri, 2)
    run = json.loads((tmp / "run.json").read_text())
    assert run["run_id"] == run_id and run["model_uri"]
    assert "move.csv" in {a.path for a in MlflowClient(uri).list_artifacts(run_id)}
