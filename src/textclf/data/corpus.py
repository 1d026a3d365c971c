"""Turn source entries into a clean, de-duplicated corpus table plus an accounting report.

Invariant, checked before returning: files seen = kept + sum of every skip reason.
Exact duplicates (after normalisation) are kept once; near-duplicates are all kept and
share a `group`, which the split keeps together.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from textclf.config import NearDuplicateParams
from textclf.io import UserError
from textclf.data.near_dups import NearDuplicates, find_groups
from textclf.data.sources import HIDDEN, UNSAFE_MEMBER, Entry, is_hidden, open_source
from textclf.data.tables import Columns, read_rows, table_files
from textclf.data.text import decode

log = logging.getLogger(__name__)

COLUMNS = ["doc_id", "label", "text", "source_path", "content_hash", "encoding", "group"]
TOP_PAIRS = 20  # most similar near-duplicate pairs listed in the report


@dataclass(frozen=True)
class Doc:
    label: str
    path: str
    text: str
    content_hash: str
    encoding: str
    raw_hash: str  # of the bytes: tells exact copies from whitespace/NFC variants


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


def doc_id(path: str) -> str:
    """Stable across runs and machines: derived from the path below the source root only."""
    return hashlib.sha1(path.encode()).hexdigest()[:16]


def _near_duplicate_summary(kept: list[Doc], found: NearDuplicates, members: list[list[int]]) -> dict:
    sizes = Counter(len(m) for m in members)
    top = sorted(found.pairs, key=lambda p: (-p[2], kept[p[0]].path, kept[p[1]].path))[:TOP_PAIRS]
    return {"candidate_pairs": found.candidates, "checked_pairs": found.checked,
            "linked_pairs": len(found.pairs), "lsh_bands": found.bands,
            "groups": len(members), "documents_in_groups": sum(map(len, members)),
            "group_sizes": {str(n): sizes[n] for n in sorted(sizes)},
            "top_pairs": [{"a": kept[i].path, "b": kept[j].path, "jaccard": round(sim, 4)}
                          for i, j, sim in top]}


def _group_near_duplicates(kept: list[Doc], cfg: NearDuplicateParams, skipped: Counter,
                           report: dict) -> tuple[list[Doc], list[str]]:
    """-> (documents still kept, each one's group: the doc id of the group's first document).
    A group spanning two labels is dropped whole or kept, as `cfg.conflicts` says."""
    report["near_duplicates"] = section = {"enabled": cfg.enabled}
    if not cfg.enabled:
        return kept, [doc_id(d.path) for d in kept]
    started = time.perf_counter()
    found = find_groups([d.text for d in kept], cfg)
    by_root: dict[int, list[int]] = defaultdict(list)
    for i, root in enumerate(found.group_of):
        by_root[root].append(i)
    members = [m for m in by_root.values() if len(m) > 1]
    section.update(threshold=cfg.threshold, shingle_size=cfg.shingle_size, num_perm=cfg.num_perm,
                   conflicts=cfg.conflicts, **_near_duplicate_summary(kept, found, members))
    mixed = [m for m in members if len({kept[i].label for i in m}) > 1]
    section["mixed_label_groups"] = [
        {"labels": sorted({kept[i].label for i in m}), "paths": [kept[i].path for i in m],
         "action": "dropped" if cfg.conflicts == "drop" else "kept"} for m in mixed]
    dropped = {i for m in mixed for i in m} if cfg.conflicts == "drop" else set()
    if dropped:
        skipped["near_duplicate_conflict"] += len(dropped)
    log.info("near-duplicates: %d groups hold %d documents; %d mixed-label (conflicts: %s); %.1f s",
             len(members), section["documents_in_groups"], len(mixed), cfg.conflicts,
             time.perf_counter() - started)
    keep = [i for i in range(len(kept)) if i not in dropped]
    return [kept[i] for i in keep], [doc_id(kept[found.group_of[i]].path) for i in keep]


def _check_classes(per_class: Counter, min_per_class: int) -> None:
    small = {c: n for c, n in sorted(per_class.items()) if n < min_per_class}
    if small:
        raise UserError(
            f"class(es) {small} have fewer than ingest.min_per_class={min_per_class} documents "
            "after cleaning; add documents, remove the class folder, or lower ingest.min_per_class.")
    if len(per_class) < 2:
        raise UserError(f"found {len(per_class)} class(es) {sorted(per_class)}; a classifier "
                         "needs at least two class folders under ingest.source.")


def _folder_docs(source: Path, max_bytes: int, report: dict, skipped: Counter) -> tuple[list[Doc], set[str]]:
    """A folder (or archive) of class folders -> (documents, class folder names)."""
    docs, class_folders = [], set()
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
    return docs, class_folders


def _table_docs(files: list[Path], columns: Columns, max_bytes: int, report: dict,
                skipped: Counter) -> tuple[list[Doc], set[str]]:
    """Rows of table files -> (documents, labels seen). Rows hold text, so the bytes are
    its UTF-8 encoding (JSON Lines lines decode as files do)."""
    report.pop("files_seen")
    report.update(rows_seen=0, tables=[str(p) for p in files], columns=dataclasses.asdict(columns))
    docs, labels, refs = [], set(), set()
    for row in read_rows(files, columns):
        report["rows_seen"] += 1
        reason = row.problem
        if reason is None and row.ref in refs:
            reason = "duplicate_id"
        elif reason is None and len(row.text.encode("utf-8")) > max_bytes:
            reason = "too_large"
        elif reason is None and not normalise(row.text):
            reason = "empty_text"
        if reason:
            skipped[reason] += 1
            report["skipped_files"].append({"path": row.ref, "reason": reason})
            continue
        refs.add(row.ref)
        labels.add(row.label)
        data = row.text.encode("utf-8")
        norm = normalise(row.text)
        docs.append(Doc(row.label, row.ref, unicodedata.normalize("NFC", row.text).strip(),
                        hashlib.sha256(norm.encode("utf-8")).hexdigest(), "utf-8",
                        hashlib.sha256(data).hexdigest()))
    return docs, labels


def build_corpus(source: Path | str, max_bytes: int, min_per_class: int,
                 near_duplicates: NearDuplicateParams = NearDuplicateParams(),
                 columns: Columns = Columns()) -> tuple[pd.DataFrame, dict]:
    """A folder of class folders (or an archive of one), or table files (data.tables) ->
    (the corpus table, the accounting report)."""
    report = {"source": str(source), "class_root": "", "files_seen": 0, "kept": 0,
              "skipped": {}, "encodings": {}, "per_class": {}, "ignored_top_level": [],
              "skipped_files": [], "duplicate_groups": [], "duplicates_not_byte_identical": 0,
              "conflicts": []}
    skipped: Counter = Counter()
    tables = table_files(str(source))
    if tables:
        docs, class_folders = _table_docs(tables, columns, max_bytes, report, skipped)
    else:
        docs, class_folders = _folder_docs(Path(source), max_bytes, report, skipped)
    kept, groups = _group_near_duplicates(_dedupe(docs, skipped, report), near_duplicates,
                                          skipped, report)
    per_class = Counter(d.label for d in kept)
    report.update(kept=len(kept), skipped=dict(sorted(skipped.items())),
                  encodings=dict(Counter(d.encoding for d in docs)),  # before de-duplication
                  per_class=dict(sorted(per_class.items())))
    assert seen(report) == len(kept) + sum(skipped.values()), report
    # A class folder whose every file was skipped still counts, with 0 documents.
    _check_classes(Counter({c: per_class.get(c, 0) for c in class_folders}), min_per_class)
    frame = pd.DataFrame(
        [(doc_id(d.path), d.label, d.text, d.path, d.content_hash, d.encoding, group)
         for d, group in zip(kept, groups)], columns=COLUMNS)
    return frame, report


def seen(report: dict) -> int:
    """Documents ingest looked at: files of a folder, rows of tables."""
    return report["rows_seen"] if "rows_seen" in report else report["files_seen"]
