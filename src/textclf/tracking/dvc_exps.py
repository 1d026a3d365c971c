"""Queued DVC experiments, for the commands that run many (textclf.multiseed, textclf.sweep):
queue one with its `-S` params, start the queue's workers, wait until the named ones end, and
`dvc exp show`'s metrics and commits by experiment name."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from textclf.errors import UserError

log = logging.getLogger(__name__)
POLL_SECONDS = 15  # the longest wait between two `dvc queue status` calls (each about 1 s of CPU)
FIRST_POLL = 1.0  # the first wait, doubled each poll up to POLL_SECONDS: short experiments are
# seen done within seconds, long ones cost one status call per POLL_SECONDS
STATES = ("Queued", "Running", "Success", "Failed")
# DVC's queue workers are temporary: each stops about 10 s after it finds the queue empty, and a
# message it takes while stopping is dropped (celery's restore_at_shutdown is off), leaving the
# experiment "Running" with nothing running it. So nothing is queued while a worker lives that
# runs nothing (SETTLE_SECONDS at most), and a Running experiment with no worker alive is named,
# not waited on. Workers are counted from their processes (the pid files dvc==3.67.1 writes):
# `dvc queue status`'s worker line is a 1 s broadcast that a busy worker can miss.
SETTLE_SECONDS = 60
LOST_POLLS = 2
WORKER_PIDS = ".dvc/tmp/exps/celery/dvc-exp-worker-*.pid"


def dvc(*args: str, env: dict[str, str] | None = None) -> str:
    """`dvc ARGS` -> what it printed. Its output goes through files, not pipes: the worker that
    `dvc queue start` leaves behind inherits them, and a pipe would keep this call waiting
    until that worker exits (after the whole queue ran)."""
    env = dict(os.environ if env is None else env)
    # this interpreter's bin first, as `source .venv/bin/activate` would: `.venv/bin/python -m
    # textclf.sweep` from a shell without the venv then finds dvc, and dvc each stage's python
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.run(["dvc", *args], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise UserError(f"`dvc {' '.join(args[:3])} …` failed: {(stderr or stdout).strip()[-400:]}")
    return stdout


def queue_states(status: str, names: list[str]) -> dict[str, str]:
    """`dvc queue status` text -> {experiment name: Queued | Running | Success | Failed | ...}
    for the names given, matched as whole fields (seeds-s1 is not seeds-s10)."""
    states = {}
    for line in status.splitlines():
        fields = line.split()
        for name in names:
            if name in fields:
                states[name] = next((f for f in fields if f in STATES), "unknown")
    return states


def live_workers() -> int:
    """Queue worker processes alive for the DVC repo around the working directory."""
    here = Path.cwd()
    root = next((p for p in (here, *here.parents) if (p / ".dvc").is_dir()), here)
    alive = 0
    for pid_file in root.glob(WORKER_PIDS):
        try:
            alive += b"queue-worker" in Path(f"/proc/{int(pid_file.read_text())}/cmdline").read_bytes()
        except (OSError, ValueError):  # it ended (or its pid file is being written)
            pass
    return alive


def settle(poll: float = 1.0) -> None:
    """Wait until no queue worker lives that runs nothing (it is about to stop, and would drop
    what it takes meanwhile); a worker running an experiment takes ours after it."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while live_workers() and "Running" not in dvc("queue", "status") and time.monotonic() < deadline:
        time.sleep(poll)


def task_ids(status: str, name: str) -> set[str]:
    """`dvc queue status` text -> the task ids (its first field) of the tasks named `name`."""
    return {fields[0] for fields in map(str.split, status.splitlines()) if fields[1:2] == [name]}


def queue(name: str, overrides: list[str]) -> str:
    """Queue experiment `name` -> its task id. The queue keeps finished tasks, and a name queued
    again (a failed seed rerun) has one task per try: only the id tells the new one from the old."""
    settle()
    before = task_ids(dvc("queue", "status"), name)
    dvc("exp", "run", "--queue", "-n", name, *[a for o in overrides for a in ("-S", o)])
    new = task_ids(dvc("queue", "status"), name) - before
    if len(new) != 1:
        raise UserError(f"queued {name}, but `dvc queue status` shows {len(new)} new tasks of that name; "
                        "is another process queueing the same names?")
    return new.pop()


def states_of(status: str, tasks: dict[str, str]) -> dict[str, str]:
    """`dvc queue status` text, {experiment name: its task id, or its name where the id is not
    known} -> {experiment name: state} for those the queue lists."""
    found = queue_states(status, list(tasks.values()))
    return {name: found[key] for name, key in tasks.items() if key in found}


def worker_env(jobs: int) -> dict[str, str] | None:
    """The environment of `jobs` queue workers: with several, each experiment's torch gets its
    share of the cores (OMP_NUM_THREADS, unless set): two 2-thread trainings on 2 cores spin
    against each other (a few-shot step: 16 s, against 6.3 s with one thread each, 2026-12-03).
    One worker keeps torch's default, so its results do not move."""
    if jobs < 2 or os.environ.get("OMP_NUM_THREADS"):
        return None
    return {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}


def run_queued(tasks: dict[str, str], jobs: int, poll: float = POLL_SECONDS) -> dict[str, str]:
    """Start `jobs` workers and wait until none of `tasks` ({experiment name: task id}, as
    queue() returns them) is queued or running -> {experiment name: state}.
    Experiments marked Running while no worker lives, LOST_POLLS polls in a row, were lost by
    the queue: a UserError names them (waiting would be forever)."""
    dvc("queue", "start", "-j", str(jobs), env=worker_env(jobs))
    log.info("queued %s; waiting (dvc queue status / dvc queue logs NAME show progress)", ", ".join(tasks))
    unrun, wait = 0, min(FIRST_POLL, poll)
    while True:
        status = dvc("queue", "status")
        states = states_of(status, tasks)
        if not [n for n, s in states.items() if s in ("Queued", "Running")]:
            return states
        running = [n for n, s in states.items() if s == "Running"]
        unrun = unrun + 1 if running and not live_workers() else 0
        if unrun >= LOST_POLLS:
            raise UserError(f"DVC's queue lost {', '.join(running)}: Running in `dvc queue status`, but no "
                            "queue worker runs it. `dvc queue kill` it (that marks it Failed), then rerun "
                            "the same command.")
        time.sleep(wait)
        wait = min(2 * wait, poll)


def shown() -> list[dict]:
    """`dvc exp show --json`: the experiments of the workspace's commit."""
    return json.loads(dvc("exp", "show", "--json"))


def revisions(shown: list[dict]) -> dict[str, dict]:
    """`dvc exp show --json` -> {experiment name: its entry (commit `rev`, `data`: params, metrics)}."""
    return {exp["revs"][0]["name"]: exp["revs"][0] for baseline in shown
            for exp in baseline.get("experiments") or [] if exp["revs"][0].get("name")}


def experiments(shown: list[dict]) -> dict[str, dict]:
    """`dvc exp show --json` -> {experiment name: metrics of reports/metrics.json}."""
    out = {}
    for name, rev in revisions(shown).items():
        data = ((rev.get("data") or {}).get("metrics") or {}).get("reports/metrics.json", {})
        if data.get("data"):
            out[name] = data["data"]
    return out


def committed_file(rev: str, path: str) -> str | None:
    """A git-tracked output (`cache: false`) as an experiment's commit holds it, or None."""
    proc = subprocess.run(["git", "show", f"{rev}:{path}"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None
