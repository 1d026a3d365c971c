"""A KILLed test run leaves nothing running (issue 55, item 18; tests/reaper.py): a pytest
started on one test that holds a server (conftest's `server`), a `dvc queue` worker running
an experiment, or the team's PostgreSQL + mlflow server, is KILLed mid-test. Every process it
started is its descendant, and orphans come to the harness (a child subreaper): the check is
by parentage, never by a process name another job's process could have."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO
from test_server import NO_POSTGRES, postgres_installed

# Runs pytest, KILLs it once the test is ready, and prints what still runs after `grace`
# seconds (as {pid: cmdline}); then it KILLs those, so a failing check leaves nothing behind.
HARNESS = """
import ctypes, json, os, signal, subprocess, sys, time
from pathlib import Path
ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans come to this process
ready, grace, cmd = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
pytest = subprocess.Popen(cmd)
deadline = time.monotonic() + 300
while not ready.exists():
    if pytest.poll() is not None or time.monotonic() > deadline:
        sys.exit(f"the held test ended or hung before it was ready ({pytest.poll()})")
    time.sleep(0.2)
os.kill(pytest.pid, signal.SIGKILL)
pytest.wait()

def children():
    while True:  # reap what ended
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found[int(entry.name)] = (entry / "cmdline").read_text().replace("\\0", " ")
        except OSError:
            pass
    return found

deadline = time.monotonic() + grace
while (left := children()) and time.monotonic() < deadline:
    time.sleep(0.5)
print(chr(10) + json.dumps(left))
while left := children():
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
"""

HELD = """
import os, sys, time
from pathlib import Path

from conftest import dvc, free_port, server
from test_dvc_queue import queue_repo, wait_for  # noqa: F401  (a fixture)
from textclf.tracking import dvc_exps

def hold():
    Path(os.environ["HELD_READY"]).touch()
    time.sleep(600)

def test_server_and_queue_worker(queue_repo):
    dvc_exps.queue("held", ["sleep=600"])
    dvc_exps.dvc("queue", "start", "-j", "1")
    wait_for(lambda: dvc_exps.queue_states(dvc(queue_repo, "queue", "status"), ["held"]) == {"held": "Running"},
             "the experiment never ran")
    url = f"http://127.0.0.1:{(port := free_port())}/"
    with server([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], queue_repo.parent,
                url, queue_repo.parent / "http.log"):
        hold()

def test_team_server():
    from test_server import team_server
    with team_server("textclf-reaper-"):
        hold()
"""


def survivors(tmp_path: Path, test: str, grace: float = 90) -> dict:
    """What still runs `grace` seconds after a pytest on HELD's `test` was KILLed, holding it."""
    (tmp_path / "test_held.py").write_text(textwrap.dedent(HELD))
    ready = tmp_path / "ready"
    env = {**os.environ, "HELD_READY": str(ready), "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO / "src"), str(REPO)])}
    env.pop("PYTEST_XDIST_WORKER", None)
    pytest_cmd = [sys.executable, "-m", "pytest", f"{tmp_path / 'test_held.py'}::{test}", "-p", "conftest",
                  "-p", "no:randomly", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
                  "--basetemp", str(tmp_path / "held")]
    proc = subprocess.run([sys.executable, "-c", HARNESS, str(ready), str(grace), *pytest_cmd], env=env,
                          capture_output=True, text=True, timeout=grace + 420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_killed_run_leaves_no_server_and_no_queue_worker(tmp_path):
    assert survivors(tmp_path, "test_server_and_queue_worker") == {}


@pytest.mark.slow
def test_a_killed_run_leaves_no_team_server(tmp_path):
    if not postgres_installed():
        pytest.skip(NO_POSTGRES)
    assert survivors(tmp_path, "test_team_server") == {}
