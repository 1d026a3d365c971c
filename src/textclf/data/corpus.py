"""Turn source entries into a clean, de-duplicated corpus table plus an accounting report.

Invariant, checked before returning (data.ingest_report): files (or rows) seen = kept + sum
of every skip reason.
Exact duplicates (after normalisation) are kept once, and a text under two labels is dropped
(every copy: conflicting_label). Near-duplicates are all kept and share a `group`, which the split
keeps together; a group with two labels is kept too (ingest.near_duplicates.conflicts: keep) and
counted, or dropped whole under conflicts: drop (docs/near_duplicates.md).
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import tempfile
import time
import unicodedata
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np

import pandas as pd

from textclf.config import NearDuplicateParams, load_params
from textclf.errors import UserError
from textclf.files import atomic_path, temp_beside, write_json
from textclf.data.ingest_report import IngestReport, SkipReason
from textclf.data.class_sizes import check_classes, drop_small_classes
from textclf.data.corrections import Corrections, read_corrections
from textclf.data.labelsets import MULTILABEL, per_label
from textclf.data.ledger import SCHEMA, Ledger, doc_id
from textclf.data.near_dups import NearDuplicates, group_sketched, sketch_and_keys
from textclf.data.sources import Entry, is_hidden, open_source
from textclf.data.tables import (Columns, Row, not_tables, nothing_usable, quoting_hint, read_rows, source_root,
                                 table_files)
from textclf.data.text import decode

log = logging.getLogger(__name__)

COLUMNS = SCHEMA.names  # of the corpus parquet
TOP_PAIRS = 20  # most similar near-duplicate pairs listed in the report


class Document(NamedTuple):
    """One document read from the source: the arguments of Ledger.add."""
    label: str
    path: str
    text: str  # NFC, stripped
    digest: bytes  # sha256 of the normalised text
    encoding: str
    raw: bytes  # sha256 of the source bytes


def normalise(text: str) -> str:
    """NFC + collapsed whitespace: the form duplicates are compared in."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def find_class_root(entries: list[Entry]) -> tuple[str, ...]:
    """Descend through lone wrapper folders (e.g. `bbc/` beside a README) to the
    folder whose sub-folders are the classes."""
    usable = [e.parts for e in entries
              if e.problem != SkipReason.UNSAFE_ARCHIVE_MEMBER and not any(is_hidden(p) for p in e.parts)]
    root: tuple[str, ...] = ()
    while True:
        depth = len(root)
        dirs = {p[depth] for p in usable if p[:depth] == root and len(p) > depth + 1}
        if len(dirs) != 1:
            return root
        (only,) = dirs
        deeper = {p[depth + 1] for p in usable if p[:depth + 1] == root + (only,) and len(p) > depth + 2}
        if not deeper:  # the lone folder holds only files: it is a class, not a wrapper
            return root
        root += (only,)


def _document(label: str, path: str, data: bytes, text: str, encoding: str) -> Document | SkipReason:
    """-> one document, or SkipReason.EMPTY when it holds nothing but whitespace."""
    norm = normalise(text)
    if not norm:
        return SkipReason.EMPTY
    digest = hashlib.sha256(norm.encode("utf-8")).digest()
    text = unicodedata.normalize("NFC", text).strip()
    return Document(label, path, text, digest, encoding, hashlib.sha256(data).digest())


def _read_entry(entry: Entry, label: str, max_bytes: int) -> Document | SkipReason:
    """One entry -> a document, or the reason it was skipped."""
    if entry.problem is not None:
        return entry.problem
    if entry.read is None:
        raise ValueError(f"entry {entry.parts} has neither a problem nor a reader")
    if is_hidden(label):
        return SkipReason.HIDDEN
    if entry.size > max_bytes:
        return SkipReason.TOO_LARGE
    data = entry.read()
    text, how = decode(data)
    if text is None:
        return SkipReason(how)
    return _document(label, "/".join(entry.parts), data, text, how)


def _row_document(row: Row, refs: set[str], max_bytes: int) -> Document | SkipReason:
    """One table row -> a document, or the reason it was skipped (a row's blank text is
    EMPTY_TEXT where a folder's blank file is EMPTY). Rows hold text, so the bytes are its
    UTF-8 encoding."""
    if row.problem is not None:
        return row.problem
    if row.ref in refs:
        return SkipReason.DUPLICATE_ID
    data = row.text.encode("utf-8")
    if len(data) > max_bytes:
        return SkipReason.TOO_LARGE
    result = _document(row.label, row.ref, data, row.text, "utf-8")
    return SkipReason.EMPTY_TEXT if result is SkipReason.EMPTY else result


def _add(ledger: Ledger, doc: Document, corrections: Corrections | None, report: IngestReport,
         where: str, row_id: str = "") -> None:
    """A document read -> the ledger under its corrected label; one a correction drops is
    skipped (counted: dropped_by_correction)."""
    label = corrections.apply(doc.label, doc.path, doc.digest) if corrections else doc.label
    if label is None:
        report.skip(SkipReason.DROPPED_BY_CORRECTION, where, row_id)
    else:
        ledger.add(*doc._replace(label=label))


def _near_duplicate_summary(paths: list[str], found: NearDuplicates, members: list[list[int]]) -> dict:
    sizes = Counter(len(m) for m in members)
    top = sorted(found.pairs, key=lambda p: (-p[2], paths[p[0]], paths[p[1]]))[:TOP_PAIRS]
    return {"candidate_pairs": found.candidates, "checked_pairs": found.checked,
            "linked_pairs": len(found.pairs), "lsh_bands": found.bands,
            "groups": len(members), "documents_in_groups": sum(map(len, members)),
            "group_sizes": {str(n): sizes[n] for n in sorted(sizes)},
            "top_pairs": [{"a": paths[i], "b": paths[j], "jaccard": round(sim, 4)}
                          for i, j, sim in top]}


def _group_near_duplicates(ledger: Ledger, order: np.ndarray, params: NearDuplicateParams,
                           report: IngestReport) -> tuple[np.ndarray, np.ndarray]:
    """-> (the documents still kept, as ledger indices in corpus order; per document, the
    position of its group's first document). A group spanning two labels is kept (each
    document with its label; the labels stage lists it for review) or dropped whole, as
    `params.conflicts` says; either way it is counted."""
    section: dict[str, Any] = {"enabled": params.enabled}
    report.near_duplicates = section
    if not params.enabled or len(order) == 0:  # none kept: ingest fails on the classes next
        return order, np.arange(len(order))
    started = time.perf_counter()
    position = {int(i): k for k, i in enumerate(order)}

    def texts_at(positions: np.ndarray) -> Iterator[tuple[int, str]]:
        return ((position[i], text) for i, text in ledger.texts_at(np.sort(order[positions])))
    found = group_sketched(ledger.sketches(order), texts_at, params)
    paths = [ledger.paths[i] for i in order.tolist()]
    labels = [ledger.labels[i] for i in order.tolist()]
    by_root: dict[int, list[int]] = defaultdict(list)
    for k, root in enumerate(found.group_of):
        if root != k:
            by_root[root].append(k)
    members = [[root, *rest] for root, rest in by_root.items()]
    section.update(threshold=params.threshold, shingle_size=params.shingle_size,
                   num_perm=params.num_perm, conflicts=params.conflicts,
                   **_near_duplicate_summary(paths, found, members))
    mixed = [m for m in members if len({labels[k] for k in m}) > 1]
    section["mixed_label_groups"] = [  # group: the corpus's `group` id of the documents kept
        {"group": doc_id(paths[m[0]]), "labels": sorted({labels[k] for k in m}), "paths": [paths[k] for k in m],
         "action": "dropped" if params.conflicts == "drop" else "kept"} for m in mixed]
    section["near_duplicate_mixed_groups"] = len(mixed)  # new keys go last: scripts read the others in order
    section["near_duplicate_mixed_documents"] = sum(map(len, mixed))
    keep = np.ones(len(order), bool)
    if params.conflicts == "drop":
        for m in mixed:
            keep[m] = False
    if not keep.all():
        report.drop(SkipReason.NEAR_DUPLICATE_CONFLICT, int((~keep).sum()))
    log.info("near-duplicates: %d groups hold %d documents; %d mixed-label (conflicts: %s); %.1f s",
             len(members), section["documents_in_groups"], len(mixed), params.conflicts,
             time.perf_counter() - started)
    renumbered = np.cumsum(keep) - 1  # old position -> new position (of kept documents)
    return order[keep], renumbered[np.asarray(found.group_of, np.int64)[keep]]


def _folder_docs(source: Path, max_bytes: int, report: IngestReport, ledger: Ledger,
                 corrections: Corrections | None = None) -> set[str]:
    """A folder (or archive) of class folders -> the ledger; returns the class folder names."""
    class_folders = set()
    with open_source(source) as entries:
        root = find_class_root(entries)
        report.class_root = "/".join(root)
        depth = len(root)
        for entry in entries:
            unsafe = entry.problem == SkipReason.UNSAFE_ARCHIVE_MEMBER
            in_class = not unsafe and entry.parts[:depth] == root and len(entry.parts) > depth + 1
            if not in_class and not unsafe:
                report.ignored_top_level.append("/".join(entry.parts))
                continue
            report.seen += 1
            label = entry.parts[depth] if in_class else ""
            if in_class and not is_hidden(label):
                class_folders.add(label)
            result = _read_entry(entry, label, max_bytes)
            if isinstance(result, SkipReason):
                report.skip(result, "/".join(entry.parts))
            else:
                _add(ledger, result, corrections, report, "/".join(entry.parts))
    return class_folders


def _table_docs(files: list[Path], columns: Columns, max_bytes: int, report: IngestReport,
                ledger: Ledger, corrections: Corrections | None = None) -> set[str]:
    """Rows of table files -> the ledger; returns the labels seen. Files beside a table
    folder's tables (a README) are skipped and listed, as a folder corpus's top-level files are."""
    report.ignored_top_level = not_tables(report.source)
    if report.ignored_top_level:
        log.warning("ingest.source=%s: skipped %d file(s) that are not tables: %s", report.source,
                    len(report.ignored_top_level), report.ignored_top_level[:5])
    labels: set[str] = set()
    refs: set[str] = set()
    for row in read_rows(files, columns, source_root(report.source)):
        report.seen += 1
        result = _row_document(row, refs, max_bytes)
        if isinstance(result, SkipReason):
            report.skip(result, row.at, row.id)
            continue
        refs.add(row.ref)
        labels.add(row.label)  # the given labels: a correction's must be among them
        _add(ledger, result, corrections, report, row.at, row.id)
        if row.fixed:
            report.fix(row.fixed, row.at, row.id)
    if not labels:  # not the class check's message: it would speak of class folders
        raise UserError(nothing_usable(report, files, columns))
    return labels


def write_corpus(source: Path | str, out: Path | str, max_bytes: int, min_per_class: int,
                 near_duplicates: NearDuplicateParams = NearDuplicateParams(),
                 columns: Columns = Columns(), small_classes: str = "fail",
                 corrections: Corrections | None = None) -> IngestReport:
    """A folder of class folders (or an archive of one), or table files (data.tables) ->
    the corpus parquet at `out` (written atomically); returns the accounting report.
    Tables keep their row order; a folder's documents are sorted by path."""
    tables = table_files(str(source))
    said = {k: v for k, v in dataclasses.asdict(columns).items()  # single-label reports as before
            if columns.multilabel or k not in ("multilabel", "label_delimiter")}
    report = IngestReport(str(source), tables=[str(p) for p in tables], columns=said) if tables \
        else IngestReport(str(source))
    sketcher = partial(sketch_and_keys, size=near_duplicates.shingle_size,
                       num_perm=near_duplicates.num_perm) if near_duplicates.enabled else None
    with atomic_path(out) as tmp, temp_beside(tmp.parent, ".ingest.") as spill:
        ledger = Ledger(spill / "texts.arrow", sketcher)
        if tables:
            class_folders = _table_docs(tables, columns, max_bytes, report, ledger, corrections)
        elif columns.multilabel:
            raise UserError(f"ingest.task: multilabel reads tables whose label column holds label lists; "
                            f"ingest.source={str(source)!r} is a folder of class folders (one class per "
                            "document): set ingest.task: single_label, or give a table.")
        else:
            class_folders = _folder_docs(Path(source), max_bytes, report, ledger, corrections)
        ledger.close()
        if corrections and corrections.by_name:  # a header-only file changes nothing, the report too
            corrections.check(str(source), set(per_label(Counter(class_folders))) if columns.multilabel
                              else class_folders, columns.multilabel)
            corrections.check_copies(ledger.paths, ledger.labels, ledger.digests)
            report.corrections = corrections.to_json()
        order = ledger.dedupe(report)  # a folder's entries came sorted by path
        order, group_of = _group_near_duplicates(ledger, order, near_duplicates, report)
        if corrections and report.corrections:
            corrections.check_groups(report.near_duplicates.get("mixed_label_groups", []))
        if columns.multilabel:  # a label set is no class: its labels are
            class_folders = set(per_label(Counter(class_folders)))
        if small_classes == "drop":
            labels = [ledger.labels[i] for i in order.tolist()]
            order, group_of = drop_small_classes(labels, order, group_of, class_folders, min_per_class,
                                                 columns.multilabel, report)
            class_folders -= set(report.dropped_classes or ())
        per_class = Counter(ledger.labels[i] for i in order.tolist())
        if columns.multilabel:  # documents per label
            per_class = per_label(per_class)
        report.finish(len(order), per_class, Counter(ledger.encodings))  # encodings: before de-duplication
        # A class folder whose every file was skipped still counts, with 0 documents.
        try:
            check_classes(Counter({c: per_class.get(c, 0) for c in class_folders}), min_per_class)
        except UserError as err:  # the helpful warning scrolled away: the error says it again
            raise UserError(f"{err}{quoting_hint(tables, columns, report.skipped[SkipReason.MALFORMED_LINE])}") from None
        ledger.write(tmp, order, group_of, MULTILABEL if columns.multilabel else "")
    return report


@dataclasses.dataclass(frozen=True)
class IngestPaths:
    """What the ingest stage reads and writes, as its command line names them."""
    params: str
    corpus: str  # written: the corpus parquet
    report: str  # written: the accounting report (ingest_report.json)
    corrections: str = ""  # read: the corrections file (data.corrections); "" for none


def run_ingest(paths: IngestPaths) -> None:
    """The ingest stage: ingest.source -> the corpus and its accounting report."""
    params = load_params(paths.params).ingest
    columns = Columns(params.text_column, params.label_column, params.id_column, params.tsv_quoting,
                      params.task == MULTILABEL, params.label_delimiter)
    corrections = read_corrections(paths.corrections, columns.multilabel) if paths.corrections else None
    report = write_corpus(params.source, paths.corpus, params.max_bytes, params.min_per_class,
                          params.near_duplicates, columns, params.small_classes, corrections)
    write_json(paths.report, report.to_json())
    logging.getLogger("ingest").info("seen %d %s, kept %d in %d classes, skipped %s%s%s", report.seen,
                                     report.unit, report.kept, len(report.per_class), report.counts(),
                                     mixed_line(report.near_duplicates), corrections_line(report.corrections))


def corrections_line(applied: dict[str, Any] | None) -> str:
    """The ingest log line's account of the corrections file ("" for none, or a header-only one)."""
    if not applied:
        return ""
    return (f"; corrections {applied['corrections']['file']} ({applied['corrections']['rows']} rows): "
            f"{applied['relabelled_by_corrections']['count']} relabelled, "
            f"{applied['dropped_by_corrections']['count']} dropped")


def mixed_line(near_duplicates: dict[str, Any]) -> str:
    """The ingest log line's count of near-duplicate groups with two labels ("" when detection is off)."""
    if "near_duplicate_mixed_groups" not in near_duplicates:
        return ""
    action = "dropped" if near_duplicates["conflicts"] == "drop" else "kept, listed for review by the labels stage"
    return (f"; near_duplicate_mixed_groups {near_duplicates['near_duplicate_mixed_groups']} "
            f"({near_duplicates['near_duplicate_mixed_documents']} documents, {action})")


def build_corpus(source: Path | str, max_bytes: int, min_per_class: int,
                 near_duplicates: NearDuplicateParams = NearDuplicateParams(),
                 columns: Columns = Columns(), small_classes: str = "fail",
                 corrections: Corrections | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """write_corpus, read back: (the corpus table, the accounting report as ingest_report.json
    holds it)."""
    with tempfile.TemporaryDirectory(prefix="textclf-corpus-") as tmp:
        report = write_corpus(source, Path(tmp) / "corpus.parquet", max_bytes, min_per_class,
                              near_duplicates, columns, small_classes, corrections)
        return pd.read_parquet(Path(tmp) / "corpus.parquet"), report.to_json()
