"""Interrupted trainings resume, and the MLflow record tells what happened. Real train
stage processes, real signals (SIGKILL, SIGTERM; SIGINT in test_io), real MLflow store.
The encoder is conftest's tiny RANDOM BERT (resume is plumbing; it has dropout, so the RNG
state matters): it trains too fast to aim a signal from outside, so the stage sends the
signal to itself at an exact step (tests/signalled_train.py)."""
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from textclf.errors import UserError
from textclf import leftover
from textclf.tracking.runs import sweep_stale_runs
from textclf.train.checkpoint import Checkpointer

from conftest import GIT_ENV, REPO, copy_prepared, copy_repo, dvc, run_train, write_params

TRAIN_ARGS = ["--tokens", "t.parquet", "--splits", "sp.parquet", "--guards", "guards.json",
              "--movement", "move.csv"]
SIGNALLED = str(REPO / "tests" / "signalled_train.py")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, prepared_tiny):
    """A copy of the prepared demo corpus; then one uninterrupted 3-epoch training of the
    tiny random BERT, the reference every resumed training must reproduce."""
    tmp = tmp_path_factory.mktemp("recovery")
    with pytest.MonkeyPatch.context() as monkeypatch:
        p = copy_prepared(prepared_tiny, tmp, monkeypatch)
        write_params(tmp / "params.yaml", train={"epochs": 3})
        run_train(p, model_dir="ref", curve="ref.csv", run_file="ref.json")
    yield tmp


CKPT = ["--checkpoint-dir", "kept/ckpt"]


def variant(tmp: Path, name: str, **train) -> list[str]:
    """--params for a copy of the work dir's params.yaml with train keys overridden."""
    path = tmp / f"{name}.yaml"
    shutil.copy(tmp / "params.yaml", path)
    return ["--params", str(write_params(path, train=train))]


def train_args(name: str, extra: list[str] = ()) -> list[str]:
    return [*TRAIN_ARGS, "--model-dir", f"{name}/model", "--curve", f"{name}/curve.csv",
            "--run-file", f"{name}/run.json", "--checkpoint-dir", f"{name}/ckpt", *extra]


def env_for(tmp: Path) -> dict:
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
            "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}


def signalled(tmp: Path, name: str, sig: signal.Signals, epoch: int, step: int = 0,
              extra=()) -> subprocess.CompletedProcess:
    """The train stage, signalling itself after step `step` of epoch `epoch` (0: after the
    epoch's checkpoint)."""
    cmd = [sys.executable, SIGNALLED, sig.name, str(epoch), str(step), "--", *train_args(name, list(extra))]
    return subprocess.run(cmd, cwd=tmp, env=env_for(tmp), capture_output=True, text=True, timeout=600)


def finish(tmp: Path, name: str, extra=()) -> str:
    proc = subprocess.run([sys.executable, "-m", "stages.train", *train_args(name, list(extra))],
                          cwd=tmp, env=env_for(tmp), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def assert_same_as_reference(tmp: Path, name: str) -> None:
    """Resuming restores model, optimizer, scheduler and RNG states exactly and replays the
    same batches on the same CPU ops, so the result is bitwise identical: tolerance 0."""
    ref, got = load_file(tmp / "ref" / "model.safetensors"), load_file(tmp / name / "model" / "model.safetensors")
    assert ref.keys() == got.keys()
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    pd.testing.assert_frame_equal(pd.read_csv(tmp / "ref.csv"), pd.read_csv(tmp / name / "curve.csv"))


def the_run(tmp: Path, name: str):
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    run_id = json.loads((tmp / name / "run.json").read_text())["run_id"]
    return client, client.get_run(run_id)


def assert_epochs_logged_once(client, run_id: str) -> None:
    for metric in ("train_loss", "val_accuracy"):
        assert [m.step for m in client.get_metric_history(run_id, metric)] == [1, 2, 3], metric


@pytest.mark.slow
def test_sigkill_after_epoch_1_then_rerun_resumes_into_the_same_run(workdir):
    killed = signalled(workdir, "killed", signal.SIGKILL, epoch=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert json.loads((workdir / "killed" / "ckpt" / "latest.json").read_text())["epoch"] == 1
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    running = client.search_runs([client.get_experiment_by_name("textclf").experiment_id],
                                 "attributes.status = 'RUNNING'")
    assert len(running) == 1  # SIGKILL cannot end its run: the next start sweeps it
    stale = running[0].info.run_id

    log = finish(workdir, "killed")
    assert f"marked run {stale} FAILED" in log and "resuming from checkpoint" in log
    client, run = the_run(workdir, "killed")
    assert run.info.run_id == stale and run.info.status == "FINISHED"
    # swept while its process was gone, then resumed: the tag says so, not that it is swept
    assert "textclf.swept" not in run.data.tags
    assert run.data.tags["textclf.resumed_after"].endswith("was gone")
    assert_epochs_logged_once(client, stale)
    assert_same_as_reference(workdir, "killed")
    assert not (workdir / "killed" / "ckpt").exists()  # removed after success by default


@pytest.mark.slow
def test_sigterm_mid_epoch_checkpoints_ends_the_run_killed_and_resumes(workdir):
    """SIGTERM after step 3 of epoch 2, between two step checkpoints (every 2): the stage
    saves one more at that step, ends the run KILLED and exits 143. Ctrl-C takes the same
    path (test_io: SIGINT at a safe point, exit 130)."""
    name, sig = "sigterm", signal.SIGTERM
    extra = variant(workdir, name, checkpoint_every=2)
    proc = signalled(workdir, name, sig, epoch=2, step=3, extra=extra)
    assert proc.returncode == 128 + sig, proc.stderr[-3000:]
    assert f"interrupted by {sig.name}" in proc.stderr and "Traceback" not in proc.stderr
    latest = json.loads((workdir / name / "ckpt" / "latest.json").read_text())
    assert (latest["epoch"], latest["step"]) == (1, 3)
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    killed = client.search_runs([client.get_experiment_by_name("textclf").experiment_id],
                                "attributes.status = 'KILLED'")
    assert len({r.info.run_id for r in killed}) >= 1

    log = finish(workdir, name, extra)
    assert "epoch 1 done, step 3 of the next" in log
    client, run = the_run(workdir, name)
    assert run.info.status == "FINISHED" and run.info.run_id in {r.info.run_id for r in killed}
    assert_epochs_logged_once(client, run.info.run_id)
    assert_same_as_reference(workdir, name)


@pytest.mark.slow
def test_a_signal_during_validation_stops_the_pass_and_the_resumed_epoch_validates_again(workdir):
    """SIGINT while epoch 2 validates: the pass stops at its next batch (it ran to its end, minutes
    on a large validation split, before the stage stopped; issue 60), the checkpoint holds epoch
    2's steps, and the resumed training validates epoch 2 again and ends as the uninterrupted one."""
    name, sig = "validating", signal.SIGINT
    proc = signalled(workdir, name, sig, epoch=2, step=-1)
    assert proc.returncode == 128 + sig, proc.stderr[-3000:]
    assert f"interrupted by {sig.name}" in proc.stderr and "Traceback" not in proc.stderr
    latest = json.loads((workdir / name / "ckpt" / "latest.json").read_text())
    assert latest["epoch"] == 1 and latest["step"] > 0, latest  # epoch 2's steps; was (2, 0): validated
    assert pd.read_csv(workdir / name / "curve.csv")["epoch"].tolist() == [1]
    log = finish(workdir, name)
    assert f"epoch 1 done, step {latest['step']} of the next" in log
    assert_same_as_reference(workdir, name)


def test_a_changed_param_discards_the_checkpoint(workdir, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="textclf.train.checkpoint")
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    run_train(variant(workdir, "kept", keep_checkpoint=True, epochs=1) + CKPT, "kept/m")
    assert (workdir / "kept" / "ckpt" / "latest.json").is_file()  # keep_checkpoint: true
    caplog.clear()
    run_train(variant(workdir, "kept", lr_encoder=5e-5, epochs=1) + CKPT, "kept/m")
    assert "discarding checkpoint" in caplog.text and "resuming" not in caplog.text
    assert not (workdir / "kept" / "ckpt").exists()


def test_params_rewritten_during_training_fail_the_stage_in_one_line(workdir, monkeypatch):
    """`dvc exp run -S train.seed=7` started while `dvc repro` trains rewrites params.yaml, then
    fails on DVC's lock; the running stage must not end as if it had trained with seed 7."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    params = variant(workdir, "rewritten", epochs=2)
    after_epoch = Checkpointer.after_epoch

    def rewrite_after_epoch_1(self, accelerator, epoch):
        after_epoch(self, accelerator, epoch)
        if epoch == 1:
            write_params(Path(params[1]), train={"seed": 7})

    monkeypatch.setattr(Checkpointer, "after_epoch", rewrite_after_epoch_1)
    with pytest.raises(UserError, match=r"changed while train ran \(train\.seed: 42 -> 7\)") as err:
        run_train(params + ["--checkpoint-dir", "rewritten/ckpt"], "rewritten/m", run_file="rewritten/run.json")
    assert "\n" not in str(err.value)
    run_id = json.loads((workdir / "rewritten" / "run.json").read_text())["run_id"]
    assert MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").get_run(run_id).info.status == "FAILED"


def test_a_checkpoint_nothing_will_resume_is_removed_after_repro(workdir, monkeypatch):
    """`dvc repro` after an interrupt restores the run-cache's result when these params trained
    to the end before; `make repro` then removes the interrupted training's checkpoint."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    ckpt = ["--checkpoint-dir", "left/ckpt"]
    run_train(variant(workdir, "left", keep_checkpoint=True, epochs=1) + ckpt, "left/m", run_file="left/run.json")
    (workdir / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": {"cmd": " ".join(
        ["python -m stages.train --tokens t.parquet --splits sp.parquet --params left.yaml", *ckpt])}}}))
    leftover.main([])
    assert (workdir / "left" / "ckpt").is_dir()  # train.keep_checkpoint: true keeps it
    variant(workdir, "left", epochs=1, lr_encoder=5e-5)
    leftover.main([])
    assert (workdir / "left" / "ckpt").is_dir()  # other params: switching back resumes it
    variant(workdir, "left", epochs=1)  # the params it was made with
    leftover.main([])
    assert not (workdir / "left" / "ckpt").exists()


def test_sweep_marks_only_runs_whose_process_is_gone(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("sweep", artifact_location=(tmp_path / "a").as_uri())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    gone = client.create_run(exp, tags={"textclf.host": host, "textclf.pid": str(dead.pid)})
    alive = client.create_run(exp, tags={"textclf.host": host, "textclf.pid": str(os.getpid())})
    other = client.create_run(exp, tags={"textclf.host": "elsewhere", "textclf.pid": str(dead.pid)})
    mlflow.set_tracking_uri(client.tracking_uri)
    assert sweep_stale_runs(exp) == [gone.info.run_id]
    status = {r: client.get_run(r).info.status for r in (gone.info.run_id, alive.info.run_id, other.info.run_id)}
    assert list(status.values()) == ["FAILED", "RUNNING", "RUNNING"]


@pytest.mark.slow
def test_store_failing_after_training_keeps_outputs_and_rerun_does_not_retrain(workdir):
    """The model artifact folder cannot be created (a file stands in its way): the stage
    exits 1 in one line, the model folder and curve are written, and after the fix a rerun
    logs the model from the final checkpoint without training an epoch again."""
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("textclf")
    blocker = Path(exp.artifact_location.removeprefix("file://")) / "models"  # logged models go here
    blocker.parent.mkdir(parents=True, exist_ok=True)
    moved = blocker.with_name("models.aside")
    if blocker.exists():
        blocker.rename(moved)
    blocker.write_text("not a folder")
    try:
        proc = subprocess.run([sys.executable, "-m", "stages.train", *train_args("storefail")],
                              cwd=workdir, env=env_for(workdir),
                              capture_output=True, text=True, timeout=600)
    finally:
        blocker.unlink()
        if moved.exists():
            moved.rename(blocker)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (workdir / "storefail" / "model" / "model.safetensors").is_file()
    assert len(pd.read_csv(workdir / "storefail" / "curve.csv")) == 3
    log = finish(workdir, "storefail")
    assert "epoch 3 done" in log and "epoch 1/3" not in log
    client, run = the_run(workdir, "storefail")
    assert run.info.status == "FINISHED"
    assert_epochs_logged_once(client, run.info.run_id)


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_sigterm_to_dvc_stops_the_stage_and_dvc_repro_resumes(tmp_path):
    """`kill -TERM <dvc pid>`: dvc exits 143 at once. The train stage used to run on as an
    orphan and log a FINISHED run that dvc.lock never recorded; now it checkpoints, ends the
    run KILLED and exits, and the next `dvc repro` resumes it."""
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, train={"epochs": 3})
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    # DVC runs the command through $SHELL -c: dash (/bin/sh) stays between dvc and the stage
    # and outlives dvc, bash execs it; /bin/sh is the harder case
    env = {**env, **GIT_ENV, "SHELL": "/bin/sh"}
    with open(tmp_path / "dvc.log", "w") as out:
        proc = subprocess.Popen(["dvc", "repro", "train"], cwd=repo, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    latest = repo / "models" / "checkpoint" / "latest.json"
    deadline = time.monotonic() + 400
    while not latest.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    assert proc.wait(timeout=60) != 0, (tmp_path / "dvc.log").read_text()[-3000:]
    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    pid = int(run.data.tags["textclf.pid"])
    deadline = time.monotonic() + 120
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running(pid), "the train stage outlived dvc"
    assert client.get_run(run.info.run_id).info.status == "KILLED"
    assert "train" not in (yaml.safe_load((repo / "dvc.lock").read_text())["stages"])

    out = dvc(repo, "repro", "train")
    assert "resuming from checkpoint" in out
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert "up to date" in dvc(repo, "status", "train")


@pytest.fixture
def small_disk(tmp_path):
    """A folder on its own small tmpfs -> a function that mounts it with `size` bytes."""
    mounted = []

    def mount(folder: Path, size: int) -> Path:
        folder.mkdir(parents=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here to fill a disk ({proc.stderr.strip()}); "
                        "it needs root with CAP_SYS_ADMIN, as CI has")
        mounted.append(folder)
        return folder
    yield mount
    for folder in mounted:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.slow
def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(workdir, small_disk):
    """Epoch 1's checkpoint sits on a disk with room for about one more half: epoch 2's save
    fails. The stage stops in one line, epoch 1's checkpoint stays complete and in charge,
    and once there is room the rerun resumes from it to the very same model. Epoch 2, trained
    twice, is in the run once (issue 24: it was logged before the save that failed)."""
    from textclf.train.checkpoint import damage
    name = "full"
    killed = signalled(workdir, name, signal.SIGKILL, epoch=1)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    size = sum(p.stat().st_size for p in (workdir / name / "ckpt").rglob("*") if p.is_file())
    disk = small_disk(workdir / "small", int(size * 1.5))
    shutil.copytree(workdir / name / "ckpt", disk / "ckpt")
    proc = subprocess.run([sys.executable, "-m", "stages.train",
                           *train_args(name, ["--checkpoint-dir", str(disk / "ckpt")])],
                          cwd=workdir, env=env_for(workdir), capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-3000:]
    assert "could not save the checkpoint" in errors[0] and "epoch-1-step-0, stays in charge" in errors[0]
    assert sorted(p.name for p in (disk / "ckpt").iterdir()) == ["epoch-1-step-0", "latest.json"]
    assert damage(disk / "ckpt" / "epoch-1-step-0") is None

    shutil.rmtree(workdir / name / "ckpt")
    shutil.copytree(disk / "ckpt", workdir / name / "ckpt")  # room again
    assert "epoch 1 done" in finish(workdir, name)
    assert_same_as_reference(workdir, name)
    client, run = the_run(workdir, name)
    assert_epochs_logged_once(client, run.info.run_id)
