"""Files written whole or not at all: atomic writes of a file or a folder, temp paths a killed
run's successor sweeps away, JSON, Parquet and CSV through them; the md5 DVC records; Parquet
read a record batch at a time."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("textclf")


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
