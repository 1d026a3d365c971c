"""textclf.tracking.dvc_exps against DVC's real experiment queue (slow: real celery workers) in
a one-stage repo: nothing is queued while an idle worker lives, and an experiment the queue
lost (marked Running, no worker runs it) is named instead of waited on forever. Both hung the
sweep's resume test in CI: its second sweep queued a trial while the first sweep's idle worker
was stopping, the worker took it and dropped it, and the sweep waited 25 minutes."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from textclf.errors import UserError
from textclf.tracking import dvc_exps

from conftest import GIT_ENV, dvc

pytestmark = pytest.mark.slow

STAGE = """stages:
  s:
    cmd: python -c "import time, yaml; p = yaml.safe_load(open('params.yaml')); time.sleep(p['sleep']); open('m.json', 'w').write('{}')"
    params: [sleep]
    metrics: [m.json: {cache: false}]
"""


@pytest.fixture
def queue_repo(tmp_path, monkeypatch) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text(STAGE)
    (repo / "params.yaml").write_text("sleep: 0\n")
    env = {**GIT_ENV, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "s"]):
        subprocess.run(cmd, cwd=repo, check=True)
    monkeypatch.chdir(repo)
    yield repo
    subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=repo, capture_output=True)


def wait_for(check, failure: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, failure
        time.sleep(0.5)

def test_nothing_is_queued_while_an_idle_worker_is_alive(queue_repo):
    """A worker that found the queue empty stops ~10 s later and drops what it takes meanwhile:
    queue() waits it out, so the experiment waits Queued for a worker run_queued starts."""
    dvc_exps.dvc("queue", "start", "-j", "1")  # returns while its worker lives (a pipe waited for it)
    wait_for(lambda: dvc_exps.live_workers() == 1, "no worker started", seconds=10)
    task = dvc_exps.queue("a", ["sleep=0"])
    status = dvc(queue_repo, "queue", "status")
    assert dvc_exps.queue_states(status, ["a"]) == {"a": "Queued"} and dvc_exps.live_workers() == 0, status
    assert dvc_exps.run_queued({"a": task}, 1, poll=1) == {"a": "Success"}


def test_an_experiment_the_queue_lost_is_named_not_waited_on(queue_repo):
    """The worker dies with its experiment (SIGKILL): `dvc queue status` says Running forever."""
    task = dvc_exps.queue("lost", ["sleep=120"])
    dvc_exps.dvc("queue", "start", "-j", "1")
    wait_for(lambda: dvc_exps.queue_states(dvc(queue_repo, "queue", "status"), ["lost"]) == {"lost": "Running"},
             "the experiment never started")
    celery = queue_repo / ".dvc" / "tmp" / "exps"
    for pid_file in [celery / "celery" / "dvc-exp-worker-1.pid", *celery.glob("run/*/*.pid")]:
        os.killpg(os.getpgid(int(pid_file.read_text())), signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(UserError, match="DVC's queue lost lost: Running in `dvc queue status`, but no queue "
                                        "worker runs it. `dvc queue kill` it") as err:
        dvc_exps.run_queued({"lost": task}, 1, poll=1)
    assert "\n" not in str(err.value) and time.monotonic() - started < 60


def test_a_short_experiment_is_seen_done_in_seconds_not_a_whole_poll(queue_repo):
    """The waits between status calls start at 1 s and double up to `poll`: an experiment that
    takes seconds is not waited on for a whole poll (60 s here; it was, every time, in sweeps)."""
    task = dvc_exps.queue("quick", ["sleep=0"])
    started = time.monotonic()
    assert dvc_exps.run_queued({"quick": task}, 1, poll=60) == {"quick": "Success"}
    assert time.monotonic() - started < 40


def test_a_name_queued_again_after_it_failed_is_waited_for_not_taken_for_its_failed_try(queue_repo):
    """The queue keeps a failed try's task beside the new one of the same name (a seed rerun, as
    the lost-experiment error advises): the wait follows the new task's id. It followed the name,
    read the old try's Failed, and gave up on the rerun at once."""
    first = dvc_exps.queue("again", ["sleep=oops"])  # time.sleep('oops'): the stage fails
    assert dvc_exps.run_queued({"again": first}, 1, poll=1) == {"again": "Failed"}
    second = dvc_exps.queue("again", ["sleep=0"])
    assert second != first and dvc_exps.task_ids(dvc(queue_repo, "queue", "status"), "again") == {first, second}
    assert dvc_exps.run_queued({"again": second}, 1, poll=1) == {"again": "Success"}


THREADS = """stages:
  s:
    cmd: python threads.py
    deps: [threads.py]
    params: [sleep]
    metrics: [reports/metrics.json: {cache: false}]
"""
THREADS_PY = """import json, os
os.makedirs("reports", exist_ok=True)
json.dump({"threads": int(os.environ.get("OMP_NUM_THREADS", 0))}, open("reports/metrics.json", "w"))
"""


def test_parallel_workers_share_the_cores_between_their_experiments(queue_repo, monkeypatch):
    """Two workers, each experiment's torch with all the cores: they spin against each other.
    run_queued gives each worker its share through OMP_NUM_THREADS (unset, it got none)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (queue_repo / "dvc.yaml").write_text(THREADS)
    (queue_repo / "threads.py").write_text(THREADS_PY)
    subprocess.run(["git", "add", "-A"], cwd=queue_repo, check=True)
    subprocess.run(["git", "commit", "-qm", "threads"], cwd=queue_repo, check=True)
    tasks = {name: dvc_exps.queue(name, [f"sleep={i}"]) for i, name in enumerate(("p0", "p1"))}
    assert dvc_exps.run_queued(tasks, 2, poll=1) == {"p0": "Success", "p1": "Success"}
    shown = dvc_exps.experiments(dvc_exps.shown())
    share = max(1, (os.cpu_count() or 1) // 2)
    assert {name: shown[name]["threads"] for name in tasks} == {"p0": share, "p1": share}, shown
