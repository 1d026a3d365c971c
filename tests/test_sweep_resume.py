"""A sweep killed outright (kill -9) leaves its trials to DVC's queue workers, which outlive it:
the rerun takes over the trials DVC still queues, runs or finished, waits for them and scores
them, and runs again only those DVC failed or lost. A real Optuna study on SQLite; (slow) a
real queued DVC experiment on the tiny random BERT."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from textclf.sweep.study import left_running

from conftest import dvc, dvc_run
from test_sweep import sweep_repo

STATUS = """Task     Name    Created    Status
0723d00  lr-t0   06:55 AM   {0}
cfa94fd  lr-t1   06:52 AM   Success

Worker status: 1 active, 0 idle
"""


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def left_by_a_dead_sweep(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="lr", storage=f"sqlite:///{tmp_path / 'optuna.db'}",
                                direction="maximize")
    trial = study.ask({"train.lr_encoder": optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)})
    for key, value in (("host", socket.gethostname()), ("pid", dead_pid()), ("experiment", "lr-t0")):
        trial.set_user_attr(key, value)
    return study


@pytest.mark.parametrize("state", ["Queued", "Running", "Success"])
def test_a_trial_dvc_still_has_is_taken_over_not_declared_dead(tmp_path, state):
    study = left_by_a_dead_sweep(tmp_path)
    live, states = left_running(study, STATUS.format(state))
    assert [t.number for t in live] == [0] and states == {"lr-t0": state}
    assert live[0].user_attrs["pid"] == os.getpid()  # this sweep's now
    assert study.get_trials()[0].state == TrialState.RUNNING


@pytest.mark.parametrize("state", ["Failed", None])
def test_a_trial_dvc_failed_or_lost_is_not_counted_and_runs_again(tmp_path, state):
    study = left_by_a_dead_sweep(tmp_path)
    status = STATUS.format(state) if state else STATUS.replace("lr-t0", "lr-t9").format("Running")
    assert left_running(study, status) == ([], {})
    trial = study.get_trials()[0]
    assert trial.state == TrialState.FAIL and "reason" not in trial.user_attrs  # not counted


def training(repo) -> bool:
    """lr-t0's log says train runs. `dvc queue logs` fails (exit 255) while the task is
    queued but no worker has picked it up yet: that is "not yet", not an error."""
    if "lr-t0" not in dvc(repo, "queue", "status"):
        return False
    logs = dvc_run(repo, "queue", "logs", "lr-t0")
    return logs.returncode == 0 and "Running stage 'train'" in logs.stdout + logs.stderr


@pytest.mark.slow
def test_a_sweep_killed_during_training_is_resumed_and_its_trial_scored(tmp_path, tiny_random_bert):
    """kill -9 while the trial trains, rerun at once: DVC's worker still runs lr-t0; the rerun
    waits for it and scores it, and runs no trial in its place."""
    repo, env = sweep_repo(tmp_path, tiny_random_bert, n_trials=1, parallel=1)
    cmd = [sys.executable, "-m", "textclf.sweep"]
    with open(tmp_path / "first.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not training(repo) and time.monotonic() < deadline:
        time.sleep(3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "was left by a sweep that died; DVC's queue has it" in done.stderr
    found = json.loads((repo / "reports" / "sweep.json").read_text())
    assert [t["experiment"] for t in found["trials"]] == ["lr-t0"], found
    assert found["complete"] == 1 and found["trials"][0]["value"] is not None


def test_a_dead_trial_is_matched_by_its_task_id_not_by_an_older_task_of_its_name(tmp_path):
    """A study recreated under the same name reuses lr-t0: the old study's failed lr-t0 stays
    in DVC's queue, listed after the running one. By name, the running trial was declared dead."""
    study = left_by_a_dead_sweep(tmp_path)
    optuna.trial.Trial(study, study.get_trials()[0]._trial_id).set_user_attr("task", "0723d00")
    status = STATUS.format("Running").replace("cfa94fd  lr-t1   06:52 AM   Success",
                                             "1d2e3f4  lr-t0   05:00 AM   Failed")
    live, states = left_running(study, status)
    assert [t.number for t in live] == [0] and states == {"lr-t0": "Running"}
