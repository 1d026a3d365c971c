"""Small helpers every stage uses: argument parsing, logging, atomic file writes, and the
stage entry point that turns interrupts and bad input into one clear line."""
from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("textclf")


def stage_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    return parser


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("accelerate").setLevel(logging.WARNING)  # a line per file of each checkpoint


@contextlib.contextmanager
def atomic_path(path: str | Path, folder: bool = False):
    """Yield a temp path (a file, or with `folder` an empty folder) beside `path`; on success
    it replaces `path` in one rename, so a kill mid-write never leaves a half file or folder
    that a rerun trusts. On failure the temp path is removed and `path` stays as it was; what
    a SIGKILL left is removed by the next write of `path` (temp_beside)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with temp_beside(path.parent, f".{path.name}.", ".tmp", folder) as tmp:
        yield tmp
        # mkstemp/mkdtemp make the temp private (0600/0700), and a rename keeps that mode:
        # the output gets an ordinary file's mode, so a teammate or a shared DVC cache can read it;
        # so does what a folder holds (safetensors writes its files 0600 itself)
        mask = umask()
        for entry in [tmp, *(tmp.rglob("*") if folder else ())]:
            if not entry.is_symlink():
                os.chmod(entry, (0o777 if entry.is_dir() else 0o666) & ~mask)
        if folder:
            shutil.rmtree(path, ignore_errors=True)  # os.replace cannot replace a full folder
        os.replace(tmp, path)


def umask() -> int:
    """The process's umask, read without changing it where Linux shows it (/proc, since 4.7):
    os.umask can only read it by setting it, which a thread creating a file meanwhile would
    see. Elsewhere it is read that way, once, at the first call."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return _umask_once()


@functools.cache
def _umask_once() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _locked(path: str) -> int | None:
    """An fd of `path` under an exclusive flock (held until it is closed; the kernel drops it
    when its process dies), or None when a live process holds it or it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # gone already, or another user's
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _sweep(folder: Path, prefix: str, suffix: str) -> None:
    """Remove the temp files and folders tempfile named `prefix` + 8 characters + `suffix` in
    `folder` that no live process holds: a killed (SIGKILL) run's, which ran no cleanup."""
    name = re.compile(re.escape(prefix) + "[a-z0-9_]{8}" + re.escape(suffix))
    with os.scandir(folder) as it:
        found = [e.path for e in it if name.fullmatch(e.name)]
    for path in found:
        fd = _locked(path)
        if fd is not None:
            log.info("removing %s, left by a run that was killed", path)
            _remove(path)
            os.close(fd)


@contextlib.contextmanager
def temp_beside(folder: Path, prefix: str, suffix: str = "", is_folder: bool = True):
    """A new temp folder (or file) in `folder`, removed after the block and locked while it
    runs, so that a concurrent run's sweep leaves it alone; first removes the ones of the same
    name pattern a killed run left (and only those: nothing else of `folder` matches)."""
    if fcntl:  # Windows has no flock: a live run's temp could not be told from a dead one's
        _sweep(folder, prefix, suffix)
    if is_folder:
        tmp = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=folder)
        fd = os.open(tmp, os.O_RDONLY)
    else:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        if fcntl:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield Path(tmp)
    finally:
        _remove(tmp)
        os.close(fd)


def file_md5(path: str | Path) -> str:
    """The md5 DVC records for a file in dvc.lock."""
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: str | Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def open_parquet(path: str | Path):
    """A parquet file to read record batch by record batch. Without pre-buffering: pyarrow's
    default (pre_buffer=True) keeps every row group it has read, so iterating a million-document
    corpus grew by 1.4 GB; without it memory stays at one row group."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, pre_buffer=False)


def write_parquet(frame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def write_csv(frame, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM: the stage saves what it can, records the run as KILLED
    and exits 128 + signal number, as a shell reports a signal death."""

    def __init__(self, signum: int, after: str | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.after = after  # what to do now, where the stage's usual line is not true (a phase with no checkpoint)


# While `deferred` is set (a training loop between safe points), a signal is only noted;
# the loop calls raise_if_interrupted() where its state is consistent. A second signal
# while one is pending stops at once.
_signals: dict[str, Any] = {"deferred": False, "pending": None}  # pending: a signal number


def _on_signal(signum, frame) -> None:
    if _signals["deferred"] and _signals["pending"] is None:
        _signals["pending"] = signum
        log.warning("%s received: stopping at the next safe point (send it again to stop now)",
                    signal.Signals(signum).name)
        return
    raise Interrupted(signum)


def _leave_now(signum, frame) -> None:
    """A signal once the stage has ended, while the interpreter shuts down (atexit callbacks:
    torch's compile-time summary, MLflow's): the stage is leaving already, so it leaves at
    once. Raising Interrupted there printed an "Exception ignored in atexit callback"
    traceback below the stage's one-line error (torchrun's SIGTERM to a surviving rank)."""
    os._exit(128 + signum)


@contextlib.contextmanager
def deferred_interrupts():
    """Inside the block, SIGINT/SIGTERM wait for raise_if_interrupted()."""
    _signals["deferred"], _signals["pending"] = True, None
    try:
        yield
    finally:
        _signals["deferred"] = False
    raise_if_interrupted()


def interrupt_pending() -> bool:
    return _signals["pending"] is not None


def raise_if_interrupted(default: int | None = None) -> None:
    """Raise the pending signal as Interrupted; or `default` when none is pending here
    (another rank of a multi-process run was signalled)."""
    signum, _signals["pending"] = _signals["pending"], None
    signum = signum if signum is not None else default
    if signum is not None:
        raise Interrupted(signum)


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
    import ctypes  # only here: stages import io on every platform

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


def positive_int_env(env: str, default: int = 0) -> int:
    """An environment variable that must be a positive integer -> its value, or `default`
    when it is unset or empty (0: the caller leaves the choice to its library)."""
    value = os.environ.get(env, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        unset = f"default {default}" if default else "unset: the library's choice"
        raise UserError(f"{env}={value!r} must be a positive integer ({unset}).")
    return int(value)


class UserError(ValueError):
    """A mistake the user can fix (a bad param, a missing file, a failed guard): a stage
    reports it in one line that names the cause and the fix. Any other exception is a bug
    and keeps its traceback. A ValueError, so that callers catching bad input still do."""


DEBUG_ENV = "TEXTCLF_DEBUG"  # =1: user errors keep their traceback too
LAUNCH_ID = "TEXTCLF_LAUNCH_ID"  # set in the ranks of a multi-process launch: the launcher's run id


def _store_error(err: BaseException) -> bool:
    """An MLflow or SQLAlchemy error, told by its module so that stages which never log
    (ingest, split) need not import either library."""
    return any(c.__module__.split(".")[0] in ("mlflow", "sqlalchemy") for c in type(err).__mro__)


def one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename:
        return (f"cannot use {err.filename}: {err.strerror or err}. Check that the path exists, "
                "is of the right kind (file or folder) and is writable.")
    text = str(getattr(err, "message", "") or err).strip().splitlines()
    return text[0] if text else type(err).__name__


def expected(err: BaseException) -> bool:
    """A UserError, an OSError (a path that cannot be read or written, a full disk) or a
    tracking-store error: the world, not the code, is at fault."""
    return isinstance(err, (UserError, OSError)) or _store_error(err)


RESUME = "rerun the same command (or `dvc repro`) to resume"  # a stage's: what to do once interrupted


def run_stage(main: Callable[[], None], after_interrupt: str = RESUME) -> None:
    """Entry point of a stage script. An expected error is logged as one line, exit status 1,
    without a traceback (with it under TEXTCLF_DEBUG=1); anything else is a bug and raises
    with its traceback. SIGINT/SIGTERM become Interrupted (exit 130/143), logged with
    `after_interrupt` (what is true of this command: a tool DVC does not run says its own);
    once main has ended, a signal exits at once (_leave_now)."""
    _on_signals(_on_signal)
    exit_with_parent()
    try:
        main()
    except BaseException as err:
        _on_signals(_leave_now)
        sys.exit(_exit_status(err, after_interrupt))
    _on_signals(_leave_now)


def _on_signals(handler) -> None:
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _exit_status(err: BaseException, after_interrupt: str = RESUME) -> int:
    """Log what ended a stage in one line and return its exit status; re-raise a bug (and a
    SystemExit of main's own, argparse's for one)."""
    if isinstance(err, Interrupted):
        # a rank stopped by its launcher (torchrun's SIGTERM after another rank failed, or the
        # user's signal passed on) only warns: the launcher says the run's one error line
        say = log.warning if os.environ.get(LAUNCH_ID) else log.error
        say("interrupted by %s; %s", err, err.after or after_interrupt)
        return 128 + err.signum
    if not isinstance(err, Exception) or not expected(err):
        raise err
    if os.environ.get(DEBUG_ENV) == "1":
        log.exception("the traceback, as %s=1 asks:", DEBUG_ENV, exc_info=err)
    if isinstance(err, UserError):
        log.error("%s", err)
    else:
        log.error("%s%s", "MLflow tracking store error: " if _store_error(err) else "", one_line(err))
    return 1
