"""The processes around a stage: /proc's view of one, the parent it dies with (dvc, and the
shell dvc starts it through), and the launch a rank belongs to."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

LAUNCH_ID = "TEXTCLF_LAUNCH_ID"  # set in the ranks of a multi-process launch: the launcher's run id

SHELLS = {"sh", "dash", "bash", "zsh", "fish"}


def proc_stat(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, …]; [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _watch(pid: int, start: str) -> None:
    while (stat := proc_stat(pid)) and stat[0] != "Z" and stat[19] == start:
        time.sleep(1)
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent() -> None:
    """Linux: SIGTERM to this process when its parent dies (PR_SET_PDEATHSIG)."""
    import ctypes  # only here: every stage imports this module, on every platform

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def exit_with_parent() -> None:
    """Linux: get SIGTERM when the process that started this stage (dvc) dies, instead of
    running on as an orphan that logs a FINISHED run DVC never records. DVC starts the
    command through $SHELL -c; bash then execs it, but dash (/bin/sh) stays in between and
    outlives dvc, so a shell parent's own parent is watched too."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    stat = proc_stat(parent)
    if _comm(parent) in SHELLS and stat:
        grandparent = int(stat[1])
        start = proc_stat(grandparent)[19:20]
        if grandparent > 1 and start:
            threading.Thread(target=_watch, args=(grandparent, start[0]), daemon=True).start()
