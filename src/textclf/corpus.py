"""Turn source entries into a clean, de-duplicated corpus table plus an accounting report.

Invariant, checked before returning: files seen = kept + sum of every skip reason.
"""
from __future__ import annotations

import codecs
import hashlib
import logging
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from textclf.sources import HIDDEN, UNSAFE_MEMBER, Entry, is_hidden, open_source

log = logging.getLogger(__name__)

COLUMNS = ["doc_id", "label", "text", "source_path", "content_hash", "encoding"]


@dataclass(frozen=True)
class Doc:
    label: str
    path: str
    text: str
    content_hash: str
    encoding: str
    raw_hash: str  # of the bytes: tells exact copies from whitespace/NFC variants


def decode(data: bytes) -> tuple[str | None, str]:
    """Bytes -> (text, encoding), or (None, skip reason)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            return None, "undecodable"
    if b"\x00" in data:
        return None, "binary"
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:  # the five bytes cp1252 leaves undefined
        return data.decode("latin-1"), "latin-1"


def normalise(text: str) -> str:
    """NFC + collapsed whitespace: the form duplicates are compared in."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def find_class_root(entries: list[Entry]) -> tuple[str, ...]:
    """Descend through lone wrapper folders (e.g. `bbc/` beside a README) to the
    folder whose sub-folders are the classes."""
    usable = [e.parts for e in entries
              if e.problem != UNSAFE_MEMBER and not any(is_hidden(p) for p in e.parts)]
    root: tuple[str, ...] = ()
    while True:
        n = len(root)
        dirs = {p[n] for p in usable if p[:n] == root and len(p) > n + 1}
        if len(dirs) != 1:
            return root
        (only,) = dirs
        deeper = {p[n + 1] for p in usable if p[:n + 1] == root + (only,) and len(p) > n + 2}
        if not deeper:  # the lone folder holds only files: it is a class, not a wrapper
            return root
        root += (only,)


def _read_entry(entry: Entry, label: str, max_bytes: int) -> Doc | str:
    """One entry -> Doc, or the reason it was skipped."""
    if entry.problem:
        return entry.problem
    if is_hidden(label):
        return HIDDEN
    if entry.size > max_bytes:
        return "too_large"
    data = entry.read()
    text, how = decode(data)
    if text is None:
        return how
    norm = normalise(text)
    if not norm:
        return "empty"
    digest = hashlib.sha256(norm.encode("utf-8")).hexdigest()
    text = unicodedata.normalize("NFC", text).strip()
    return Doc(label, "/".join(entry.parts), text, digest, how, hashlib.sha256(data).hexdigest())


def _dedupe(docs: list[Doc], skipped: Counter, report: dict) -> list[Doc]:
    """Keep one copy of each text; drop texts that appear under two labels."""
    groups: dict[str, list[Doc]] = defaultdict(list)
    for doc in docs:
        groups[doc.content_hash].append(doc)
    kept = []
    for digest, group in groups.items():
        labels = sorted({d.label for d in group})
        if len(labels) > 1:
            skipped["conflicting_label"] += len(group)
            report["conflicts"].append({"content_hash": digest, "labels": labels,
                                        "paths": [d.path for d in group]})
            continue
        kept.append(group[0])
        if len(group) > 1:
            skipped["duplicate"] += len(group) - 1
            variants = len({d.raw_hash for d in group}) - 1
            report["duplicates_not_byte_identical"] += variants
            report["duplicate_groups"].append([d.path for d in group])
    return sorted(kept, key=lambda d: d.path)


def _check_classes(per_class: Counter, min_per_class: int) -> None:
    small = {c: n for c, n in sorted(per_class.items()) if n < min_per_class}
    if small:
        raise ValueError(
            f"class(es) {small} have fewer than ingest.min_per_class={min_per_class} documents "
            "after cleaning; add documents, remove the class folder, or lower ingest.min_per_class.")
    if len(per_class) < 2:
        raise ValueError(f"found {len(per_class)} class(es) {sorted(per_class)}; a classifier "
                         "needs at least two class folders under ingest.source.")


def build_corpus(source: Path, max_bytes: int, min_per_class: int) -> tuple[pd.DataFrame, dict]:
    report = {"source": str(source), "class_root": "", "files_seen": 0, "kept": 0,
              "skipped": {}, "encodings": {}, "per_class": {}, "ignored_top_level": [],
              "skipped_files": [], "duplicate_groups": [], "duplicates_not_byte_identical": 0,
              "conflicts": []}
    skipped: Counter = Counter()
    docs: list[Doc] = []
    class_folders: set[str] = set()
    with open_source(source) as entries:
        root = find_class_root(entries)
        report["class_root"] = "/".join(root)
        depth = len(root)
        for entry in entries:
            unsafe = entry.problem == UNSAFE_MEMBER
            in_class = not unsafe and entry.parts[:depth] == root and len(entry.parts) > depth + 1
            if not in_class and not unsafe:
                report["ignored_top_level"].append("/".join(entry.parts))
                continue
            report["files_seen"] += 1
            label = entry.parts[depth] if in_class else ""
            if in_class and not is_hidden(label):
                class_folders.add(label)
            result = _read_entry(entry, label, max_bytes)
            if isinstance(result, str):
                skipped[result] += 1
                report["skipped_files"].append({"path": "/".join(entry.parts), "reason": result})
            else:
                docs.append(result)
    kept = _dedupe(docs, skipped, report)
    per_class = Counter(d.label for d in kept)
    report.update(kept=len(kept), skipped=dict(sorted(skipped.items())),
                  encodings=dict(Counter(d.encoding for d in docs)),  # before de-duplication
                  per_class=dict(sorted(per_class.items())))
    assert report["files_seen"] == len(kept) + sum(skipped.values()), report
    # A class folder whose every file was skipped still counts, with 0 documents.
    _check_classes(Counter({c: per_class.get(c, 0) for c in class_folders}), min_per_class)
    frame = pd.DataFrame(
        [(hashlib.sha1(d.path.encode()).hexdigest()[:16], d.label, d.text, d.path,
          d.content_hash, d.encoding) for d in kept], columns=COLUMNS)
    return frame, report
