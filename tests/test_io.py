"""The stage entry point: signals stop at a safe point, errors are one line; atomic writes."""
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from textclf.files import atomic_path, read_json, umask, write_json, write_parquet
from textclf.processes import LAUNCH_ID

from conftest import REPO

# A stand-in for a training loop: "steps" inside deferred_interrupts, a safe point after each.
LOOP = """
import logging, sys, time
from textclf.signals import deferred_interrupts, raise_if_interrupted
from textclf.stage import run_stage, setup_logging

def main():
    setup_logging()
    with deferred_interrupts():
        for step in range(1, 200):
            print("step", step, "start", flush=True)
            time.sleep(float(sys.argv[1]))
            print("step", step, "done", flush=True)
            raise_if_interrupted()

run_stage(main)
"""


def loop(step_seconds: float, **env: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LOOP, str(step_seconds)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src"), **env})
    assert proc.stdout.readline().strip() == "step 1 start"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_at_the_next_safe_point(sig):
    proc = loop(0.5)
    proc.send_signal(sig)  # mid-step: the step still finishes
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig
    assert out.splitlines()[-1] == "step 1 done"
    assert f"interrupted by {signal.Signals(sig).name}" in err and "Traceback" not in err


def test_a_rank_of_a_launch_warns_and_leaves_the_one_error_line_to_its_launcher():
    """torchrun's SIGTERM to the ranks left after one failed: each warns; the launcher alone
    logs the run's ERROR line (CI once saw two, when rank 0 was stopped between safe points)."""
    proc = loop(0.5, **{LAUNCH_ID: "a-launch"})
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert " WARNING interrupted by SIGTERM" in err and " ERROR " not in err


def test_a_second_signal_stops_at_once():
    proc = loop(120)  # a step far longer than the test may take, even on a loaded machine
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "step 1 done" not in out
    assert "stopping at the next safe point" in err


# A stage that has ended and shuts down slowly (an atexit callback: torch's compile-time
# summary, MLflow's), as a rank does when torchrun sends it SIGTERM after another rank died.
LEAVING = """
import atexit, sys, time
from textclf.errors import UserError
from textclf.stage import run_stage, setup_logging

def main():
    setup_logging()
    # Python-level short sleeps, as a real callback runs bytecode: a signal landing between two
    # C calls (print, then one long time.sleep) would wait for the whole sleep
    atexit.register(lambda: [time.sleep(0.1) for _ in range(600)])
    atexit.register(print, "leaving", flush=True)
    if sys.argv[1] == "error":
        raise UserError("the stage failed")

run_stage(main)
"""


@pytest.mark.parametrize("ending", ["returned", "error"])
def test_a_signal_while_the_stage_shuts_down_leaves_at_once_without_a_traceback(ending):
    proc = subprocess.Popen([sys.executable, "-c", LEAVING, ending], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert proc.stdout.readline().strip() == "leaving"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert ("the stage failed" in err) == (ending == "error")


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "state.json"
    write_json(path, {"epoch": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text('{"epoch": 2, "half')
            raise RuntimeError("killed mid-write")
    assert read_json(path) == {"epoch": 1} and os.listdir(tmp_path) == ["state.json"]


def test_atomic_path_removes_what_a_killed_write_left_but_not_a_live_one(tmp_path):
    """A SIGKILL runs no cleanup: the next write of that path removes the temp files and
    folders of its name pattern, except one a live process holds (its lock)."""
    import fcntl

    stale = [tmp_path / ".m.json.k1ll3d_0.tmp", tmp_path / ".m.json.zz9_abcd.tmp"]
    stale[0].write_bytes(b"")
    stale[1].mkdir()
    (stale[1] / "weights").write_bytes(b"half")
    live, other = tmp_path / ".m.json.l1ve0000.tmp", tmp_path / ".n.json.k1ll3d_0.tmp"
    live.write_bytes(b"")
    other.write_bytes(b"")
    with open(live) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as atomic_path holds its temp while writing
        write_json(tmp_path / "m.json", {"ok": 1})
        assert sorted(os.listdir(tmp_path)) == [".m.json.l1ve0000.tmp", ".n.json.k1ll3d_0.tmp", "m.json"]
    write_json(tmp_path / "m.json", {"ok": 2})
    assert sorted(os.listdir(tmp_path)) == [".n.json.k1ll3d_0.tmp", "m.json"]


@pytest.fixture
def set_umask():
    """Set the process's umask for one test, then put the old one back."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask, file_mode, folder_mode", [
    (0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)], ids=["022", "077", "002"])
def test_atomic_outputs_follow_the_umask_as_ordinary_files_do(tmp_path, set_umask, mask, file_mode, folder_mode):
    """mkstemp/mkdtemp make a temp 0600/0700 and a rename keeps it: every atomic output (the
    corpus, ingest_report.json, reports, models) was private, whatever the umask."""
    import pandas as pd
    import torch
    from safetensors.torch import save_file

    from textclf.data.corpus import write_corpus

    set_umask(mask)
    assert umask() == mask  # read from /proc on Linux, without setting it
    write_json(tmp_path / "report.json", {"ok": 1})
    write_parquet(pd.DataFrame({"a": [1]}), tmp_path / "table.parquet")
    write_corpus(REPO / "data" / "sample", tmp_path / "corpus.parquet", 1_000_000, 1)
    with atomic_path(tmp_path / "model", folder=True) as tmp:
        (tmp / "weights").write_bytes(b"w")
        (tmp / "sub").mkdir()
        save_file({"w": torch.zeros(2)}, str(tmp / "sub" / "model.safetensors"))  # writes 0600 itself
    (tmp_path / "ordinary.txt").write_text("as open() makes it")
    for name in ("report.json", "table.parquet", "corpus.parquet", "ordinary.txt", "model/weights",
                 "model/sub/model.safetensors"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == file_mode, name
    for name in ("model", "model/sub"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == folder_mode, name


RAISER = """
import sys
import pandas as pd
from textclf.errors import UserError
from textclf.stage import run_stage, setup_logging

def main():
    setup_logging()
    if sys.argv[1] == "user":
        raise UserError("train.epochs=0 must be at least 1; set train.epochs.")
    pd.DataFrame({"k": [1, 1]}).merge(pd.DataFrame({"k": [1, 1]}), on="k", validate="one_to_one")

run_stage(main)
"""


@pytest.mark.parametrize("kind, debug, traceback", [
    ("user", "", False), ("user", "1", True),  # a user's mistake: one line, its traceback on demand
    ("bug", "", True),  # a bug (pandas MergeError is a ValueError) keeps its traceback
])
def test_user_errors_are_one_line_and_bugs_keep_their_traceback(kind, debug, traceback):
    proc = subprocess.run([sys.executable, "-c", RAISER, kind], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO / "src"), "TEXTCLF_DEBUG": debug})
    assert proc.returncode == 1
    assert ("Traceback" in proc.stderr) == traceback, proc.stderr
    if kind == "user":
        assert proc.stderr.strip().splitlines()[-1].endswith("train.epochs=0 must be at least 1; set train.epochs.")
    else:
        assert "MergeError" in proc.stderr
