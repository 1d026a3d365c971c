"""Queued DVC experiments, for the commands that run many (textclf.multiseed, textclf.sweep):
queue one with its `-S` params, start the queue's workers, wait until the named ones end, and
`dvc exp show`'s metrics by experiment name."""
from __future__ import annotations

import logging
import subprocess
import time

from textclf.common import UserError

log = logging.getLogger(__name__)
POLL_SECONDS = 15
STATES = ("Queued", "Running", "Success", "Failed")


def dvc(*args: str) -> str:
    proc = subprocess.run(["dvc", *args], capture_output=True, text=True)
    if proc.returncode:
        raise UserError(f"`dvc {' '.join(args[:3])} …` failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


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


def queue(name: str, overrides: list[str]) -> None:
    dvc("exp", "run", "--queue", "-n", name, *[a for o in overrides for a in ("-S", o)])


def run_queued(names: list[str], jobs: int, poll: float = POLL_SECONDS) -> dict[str, str]:
    """Start `jobs` workers and wait until none of `names` is queued or running -> their states."""
    dvc("queue", "start", "-j", str(jobs))
    log.info("queued %s; waiting (dvc queue status / dvc queue logs NAME show progress)", ", ".join(names))
    while True:
        states = queue_states(dvc("queue", "status"), names)
        if not [n for n, s in states.items() if s in ("Queued", "Running")]:
            return states
        time.sleep(poll)


def experiments(shown: list[dict]) -> dict[str, dict]:
    """`dvc exp show --json` -> {experiment name: metrics of reports/metrics.json}."""
    out = {}
    for baseline in shown:
        for exp in baseline.get("experiments") or []:
            rev = exp["revs"][0]
            data = (rev.get("data") or {}).get("metrics", {}).get("reports/metrics.json", {})
            if rev.get("name") and data.get("data"):
                out[rev["name"]] = data["data"]
    return out
