"""A stopped test run stops what it started, however it stops (Ctrl-C, TERM, even KILL): a
watchdog process per pytest process holds the cleanups the run registered and runs those
still pending once pytest is gone, then ends every process still working in the run's own
folders (a `dvc queue` worker, a `dvc repro` a killed test was waiting on). Fixture
finalizers cannot do this: a KILLed pytest runs none of them, and `scripts/server.sh` and
DVC's queue detach what they start, so it outlives its parent.

    python tests/reaper.py PID   # the watchdog: reads JSON lines on stdin (see `Reaper`)
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop(pids: list[int], group: bool, grace: float = 15) -> None:
    """TERM, up to `grace` seconds to end, then KILL: pids, or process groups if `group`."""
    kill = os.killpg if group else os.kill
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                kill(pid, sig)
            except OSError:  # gone already
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_members(p) if group else _alive(p) for p in pids):
            time.sleep(0.2)


def _members(pgid: int) -> list[int]:
    """Running processes of process group `pgid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z" and int(stat[3]) == pgid:
                found.append(int(entry.name))
    return found


def working_in(folders: list[str]) -> list[int]:
    """Processes (not this one) whose working directory is in one of `folders`."""
    roots = [os.path.realpath(f) + os.sep for f in folders]
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cwd = os.readlink(entry / "cwd") + os.sep
            except OSError:
                continue
            if any(cwd.startswith(root) for root in roots) and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def clean_up(pending: dict[int, dict]) -> None:
    """The registered cleanups, newest first, then the processes still in the folders."""
    folders = [job["folder"] for job in pending.values() if "folder" in job]
    for job in reversed(pending.values()):
        if "folder" in job:
            continue
        if "group" in job:
            _stop([job["group"]], group=True)
        else:
            subprocess.run(job["run"], env=job["env"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=120, check=False)
    for _ in range(3):  # a stopped process's children may start working there meanwhile
        if not (pids := working_in(folders)):
            break
        _stop(pids, group=False)


def watch(parent: int) -> None:
    """Until `parent` ends (or closes our stdin): register and forget cleanups; then run them."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # Ctrl-C stops pytest; this one stops after it
        signal.signal(sig, signal.SIG_IGN)
    # Linux: the parent's end, even while a child it forked keeps our stdin's pipe open
    watched = [os.pidfd_open(parent)] if hasattr(os, "pidfd_open") else []
    pending: dict[int, dict] = {}
    buffer = b""
    while os.getppid() == parent:  # else it died before pidfd_open: that pid may be another process now
        ready, _, _ = select.select([*watched, sys.stdin.fileno()], [], [])
        chunk = os.read(sys.stdin.fileno(), 65536) if sys.stdin.fileno() in ready else b""
        *lines, buffer = (buffer + chunk).split(b"\n")
        for line in lines:
            msg = json.loads(line)
            if "done" in msg:
                pending.pop(msg["done"], None)
            else:
                pending[msg["id"]] = msg
        if set(watched) & set(ready) or not chunk:
            break
    clean_up(pending)


class Reaper:
    """This process's watchdog: `folder(path)` (the processes working in it), `group(pgid)` and
    `run(cmd, env)` register a cleanup and return a token for `done(token)`, once the test did
    it itself."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, str(os.getpid())], stdin=subprocess.PIPE,
                                     start_new_session=True)  # beyond the terminal's Ctrl-C
        self.count = 0

    def _send(self, msg: dict) -> int:
        self.count += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self.count, **msg}).encode() + b"\n")
        self.proc.stdin.flush()
        return self.count

    def folder(self, path: Path) -> int:
        return self._send({"folder": str(path)})

    def group(self, pgid: int) -> int:
        return self._send({"group": pgid})

    def run(self, cmd: list[str], env: dict) -> int:
        return self._send({"run": cmd, "env": env})

    def done(self, token: int) -> None:
        self._send({"done": token})


_reaper: Reaper | None = None


def reaper() -> Reaper:
    """This process's watchdog, started on first use."""
    global _reaper
    if _reaper is None:
        _reaper = Reaper()
    return _reaper


if __name__ == "__main__":
    watch(int(sys.argv[1]))
