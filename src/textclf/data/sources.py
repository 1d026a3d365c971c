"""Enumerate the entries of a corpus source: a folder, a .zip, or a tar archive.

Folders and archives yield the same `Entry` records, so every ingest rule is
applied in one place (textclf.data.corpus). Nothing here follows a link out of the
root, opens a FIFO or device, or writes an archive member to disk.
"""
from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator

from textclf.data.ingest_report import SkipReason
from textclf.errors import UserError

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


@dataclass(frozen=True)
class Entry:
    parts: tuple[str, ...]  # path below the source root
    size: int
    read: Callable[[], bytes] | None  # None when `problem` is set
    problem: SkipReason | None = None  # why it cannot be read as a document; None: a readable file


def is_hidden(name: str) -> bool:
    """Dot files and folders, and the resource-fork folder macOS adds to zips."""
    return name.startswith(".") or name == "__MACOSX"


def _unique(entries: Iterator[Entry]) -> Iterator[Entry]:
    """An archive may hold one path twice (or as `a/./b` and `a/b`): keep the first."""
    seen = set()
    for entry in entries:
        if entry.problem is None and entry.parts in seen:
            entry = Entry(entry.parts, 0, None, SkipReason.REPEATED_ARCHIVE_MEMBER)
        seen.add(entry.parts)
        yield entry


def _archive(source: Path, opener, error, kind: str, entries) -> Iterator[list[Entry]]:
    """Open a zip or tar archive (its errors: one line), yield its entries while it is open."""
    try:
        archive = opener(source)
    except error as err:
        raise UserError(f"ingest.source={str(source)!r} is not a readable {kind}: {err}") from None
    with archive:
        yield _by_path(_unique(entries(archive)))


def _by_path(entries: Iterator[Entry]) -> list[Entry]:
    """Sorted by the path string the corpus is sorted by: a walk or an archive's member names
    order `pos/` after `pos-strong/` (or `a/./b` before `a/a`), and ingest's spill is read back
    in corpus order, one batch at a time, only when it was written in that order."""
    return sorted(entries, key=lambda e: "/".join(e.parts))


@contextmanager
def open_source(source: Path) -> Iterator[list[Entry]]:
    """All entries of `source`, sorted by path; archives stay open for reading inside the block."""
    name = source.name.lower()
    if source.is_dir():
        yield _by_path(_walk_folder(source))
    elif name.endswith(".zip"):
        yield from _archive(source, zipfile.ZipFile, zipfile.BadZipFile, "zip", _zip_entries)
    elif name.endswith(ARCHIVE_SUFFIXES):
        yield from _archive(source, tarfile.open, tarfile.TarError, "tar archive", _tar_entries)
    elif source.exists():
        raise UserError(f"ingest.source={str(source)!r} is neither a folder nor an archive "
                         f"({', '.join(ARCHIVE_SUFFIXES)}); point it at a folder of class folders.")
    else:
        raise UserError(f"ingest.source={str(source)!r} does not exist; set ingest.source in "
                         "params.yaml to a folder of class folders or an archive of one.")


def _reader(path: str) -> Callable[[], bytes]:
    def read() -> bytes:
        with open(path, "rb") as fh:
            return fh.read()
    return read


def _walk_folder(root: Path) -> Iterator[Entry]:
    real_root = os.path.realpath(root)

    def walk(rel: tuple[str, ...]) -> Iterator[Entry]:
        with os.scandir(os.path.join(root, *rel)) as it:
            children = list(it)
        for child in children:
            parts = rel + (child.name,)
            if is_hidden(child.name):
                yield Entry(parts, 0, None, SkipReason.HIDDEN)
                continue
            st = os.lstat(child.path)
            if stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(child.path)
                if os.path.commonpath([real_root, target]) != real_root:
                    yield Entry(parts, 0, None, SkipReason.SYMLINK_OUTSIDE_ROOT)
                    continue
                try:
                    st = os.stat(target)  # a link that stays inside the root is fine
                except OSError:  # dangling, or a loop
                    yield Entry(parts, 0, None, SkipReason.BROKEN_SYMLINK)
                    continue
                if stat.S_ISDIR(st.st_mode):
                    # Its files are reached through the real folder; descending could loop.
                    continue
            if stat.S_ISDIR(st.st_mode):
                yield from walk(parts)
            elif stat.S_ISREG(st.st_mode):
                yield Entry(parts, st.st_size, _reader(child.path))
            else:
                yield Entry(parts, 0, None, SkipReason.NOT_A_REGULAR_FILE)

    yield from walk(())


def _safe_parts(name: str) -> tuple[str, ...] | None:
    """Archive member name -> path parts, or None if it escapes the root."""
    name = name.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts or not parts:
        return None
    return parts


def _member(parts: tuple[str, ...] | None, name: str, size: int, read, regular: bool) -> Entry:
    if parts is None:
        return Entry(tuple(name.split("/")), 0, None, SkipReason.UNSAFE_ARCHIVE_MEMBER)
    if any(is_hidden(p) for p in parts):
        return Entry(parts, 0, None, SkipReason.HIDDEN)
    if not regular:
        return Entry(parts, 0, None, SkipReason.NOT_A_REGULAR_FILE)
    return Entry(parts, size, read)


def _zip_entries(zf: zipfile.ZipFile) -> Iterator[Entry]:
    for info in sorted(zf.infolist(), key=lambda i: i.filename):
        if info.is_dir():
            continue
        mode = info.external_attr >> 16
        # Unix mode bits, when present: links and special files are never materialised.
        # No file-type bits (Python's own writestr gives 0o600) means a plain file.
        regular = stat.S_IFMT(mode) == 0 or stat.S_ISREG(mode)
        yield _member(_safe_parts(info.filename), info.filename, info.file_size,
                      lambda info=info: zf.read(info), regular)


def _tar_entries(tf: tarfile.TarFile) -> Iterator[Entry]:
    for info in sorted(tf.getmembers(), key=lambda i: i.name):
        if info.isdir():
            continue
        yield _member(_safe_parts(info.name), info.name, info.size,
                      lambda info=info: _extracted(tf, info), info.isreg())


def _extracted(tf: tarfile.TarFile, info: tarfile.TarInfo) -> bytes:
    member = tf.extractfile(info)
    if member is None:  # only a regular member is ever read (_member)
        raise ValueError(f"tar member {info.name!r} is not a regular file")
    return member.read()
