"""The corrections file: a person's label decisions (`doc`: a doc_id or a source_path, `label`:
the new label or `drop`), applied by ingest as it reads each document; the raw data is never edited.

A correction is applied before de-duplication, so everything after ingest (conflicts, the
split, the diff) sees the corrected label. A document keeps its path and doc_id (they name the
raw file), so the stable split, which places a document by its text alone, keeps its side.
Every bad file stops ingest in one line naming the file, the row and the fix: a file that is
no CSV of `doc,label`, a document named twice with two answers, a document the source does not
hold (most of them: another corpus's file), a label no class has, an exact copy of a corrected
text left uncorrected (the copy would bring the old label back, or keep a dropped text), and
under ingest.near_duplicates.conflicts: drop a relabelled near-duplicate whose group keeps the
old label (the drop would take the corrected text too; under keep, the default, the group stays
and the labels stage lists it for review).

A row whose optional `kept` cell says `yes` is a label kept at review, not a correction: it
changes nothing while the source gives that label, and once the source labels the document
otherwise it stops applying (the source's label stands, one warning line), since the person
decided on a label the source no longer gives.
"""
from __future__ import annotations

import csv
import hashlib
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textclf.errors import UserError
from textclf.data.labelsets import canonical, labels_of
from textclf.data.ledger import doc_id

COLUMNS = ("doc", "label")
KEPT = "kept"  # the optional third column: `yes` on a label kept at review
YES = "yes"
DROP = "drop"
MULTI_JOIN = "|"  # a multi-label correction's labels, as reports/label_issues.parquet joins them


@dataclass(frozen=True)
class Decision:
    row: int  # the file's line number (the header is line 1)
    doc: str  # as the file names it
    label: str | None  # the corpus's form of the new label; None: drop
    kept: bool = False  # a label kept at review: applies only while the source gives it


@dataclass
class Corrections:
    """A parsed corrections file; `apply` each document read, then `check` what was read."""
    path: str
    md5: str
    by_name: dict[str, Decision]
    relabelled: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    stale: list[dict[str, Any]] = field(default_factory=list)  # keeps the source now disagrees with
    _used: set[int] = field(default_factory=set)  # rows that named a document read
    _texts: dict[bytes, tuple[Decision, str]] = field(default_factory=dict)  # digest -> (decision, path)

    def where(self, d: Decision) -> str:
        return f"{self.path} row {d.row} ({d.doc!r})"

    def apply(self, label: str, path: str, digest: bytes) -> str | None:
        """A document read (its label, path below the source, text digest) -> its label after
        the corrections (None: dropped by one); recorded for the report. A document may be
        named by its path, its doc_id, or both with one answer."""
        found = [d for d in (self.by_name.get(path), self.by_name.get(doc_id(path))) if d]
        if not found:
            return label
        if len({d.label for d in found}) > 1:
            one, other = found
            raise UserError(f"{self.where(one)} and row {other.row} ({other.doc!r}) name the same document "
                            f"with two answers ({one.label or DROP} / {other.label or DROP}): keep one row.")
        self._used.update(d.row for d in found)
        d = found[0]
        entry = {"path": path, "doc_id": doc_id(path), "label": label, "row": d.row}
        if d.kept and d.label != label:  # the source moved on: putting the old label back is no one's decision
            self.stale.append({**entry, "kept": d.label})
            return label
        self._texts[digest] = (d, path)
        if d.label is None:
            self.dropped.append(entry)
        elif d.label != label:
            self.relabelled.append({**entry, "new_label": d.label})
        return d.label

    def check(self, source: str, classes: set[str], multilabel: bool) -> None:
        """After the source was read: every row named a document, and every new label is a class."""
        unused = [d for d in self._distinct() if d.row not in self._used]
        if len(unused) >= 2 and len(unused) * 2 > len(self._distinct()):  # a typo is one row, not most
            raise UserError(f"{len(unused)} of the {len(self._distinct())} documents {self.path} names are not "
                            f"in ingest.source={source!r} (e.g. row {unused[0].row}: {unused[0].doc!r}): it looks "
                            "like another corpus's corrections file; give this corpus's, or one with only "
                            "its header `doc,label`.")
        if unused:
            raise UserError(f"{self.where(unused[0])} names no document ingest read from {source!r}"
                            f"{f' (and {len(unused) - 1} more rows)' if len(unused) > 1 else ''}: use a doc_id or "
                            "source_path as reports/label_issues.parquet lists them, or delete the row.")
        for d in self._distinct():
            new = [x for x in (labels_of(d.label) if multilabel else [d.label]) if x not in classes] \
                if d.label is not None else []
            if new:
                raise UserError(f"{self.where(d)} gives label {new[0]!r}, which no class has (classes: "
                                f"{', '.join(sorted(classes))}): fix its spelling, or add the class first "
                                "(a class folder, or rows with that label, with at least ingest.min_per_class "
                                "documents), then correct documents into it.")
        if self.stale:
            first = self.stale[0]
            logging.getLogger("ingest").warning(
                "%s: %d kept label(s) no longer applied: row %d kept %r for %s, but the source now labels it "
                "%r%s; the source's label stands (`python -m textclf.labelissues review` lists it again)",
                self.path, len(self.stale), first["row"], first["kept"], first["path"], first["label"],
                f" (and {len(self.stale) - 1} more)" if len(self.stale) > 1 else "")

    def check_copies(self, paths: list[str], labels: list[str], digests: list[bytes]) -> None:
        """Every kept exact copy of a corrected text carries the correction: otherwise the copy
        brings the old label back (a conflict) or keeps a dropped text in the corpus."""
        for path, label, digest in zip(paths, labels, digests):
            hit = self._texts.get(digest)
            if hit and hit[1] != path and label != hit[0].label:
                d, named = hit
                raise UserError(f"{self.where(d)} corrects {named}, but {path} holds the same text "
                                f"(an exact copy, labelled {label!r}): add a row for {path} with the same "
                                "answer.")

    def check_groups(self, mixed: list[dict[str, Any]]) -> None:
        """A relabelled document in a near-duplicate group that ingest drops for its mixed
        labels (ingest_report.json's mixed_label_groups, conflicts: drop): the correction would
        drop the text. A kept group (conflicts: keep) loses nothing, so it passes."""
        fixed = {e["path"]: e for e in self.relabelled}
        for group in (g for g in mixed if g["action"] == "dropped"):
            for path in (p for p in group["paths"] if p in fixed):
                others = [p for p in group["paths"] if p not in fixed]
                raise UserError(f"{self.path} row {fixed[path]['row']} relabels {path} {fixed[path]['new_label']!r}, "
                                f"but its near-duplicate(s) {', '.join(others[:3])} keep another label, and "
                                "ingest.near_duplicates.conflicts: drop would drop them all: add rows for them with "
                                "the same answer.")

    def _distinct(self) -> list[Decision]:
        return sorted({d.row: d for d in self.by_name.values()}.values(), key=lambda d: d.row)

    def to_json(self) -> dict[str, Any]:
        """The report's keys (ingest_report.json): which file, and what it changed."""
        return {"corrections": {"file": self.path, "md5": self.md5, "rows": len(self._distinct())},
                "relabelled_by_corrections": {"count": len(self.relabelled), "documents": self.relabelled},
                "dropped_by_corrections": {"count": len(self.dropped), "documents": self.dropped},
                "kept_no_longer_applied": {"count": len(self.stale), "documents": self.stale}}


def _label(value: str, multilabel: bool) -> str | None:
    if value == DROP:
        return None
    return canonical([x.strip() for x in value.split(MULTI_JOIN) if x.strip()]) if multilabel else value


def read_corrections(path: str | Path, multilabel: bool = False) -> Corrections:
    """The CSV at `path` -> its decisions, refusing a file that is not one (one line each)."""
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"corrections file {path}: {err.strerror}; give an existing CSV with the header "
                        "`doc,label` (`python -m textclf.labelissues accept` writes one).") from None
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's CSV may start with a BOM
    except UnicodeDecodeError:
        raise UserError(f"corrections file {path} is not UTF-8 text: save it as CSV (UTF-8).") from None
    if not text.strip():
        raise UserError(f"corrections file {path} is empty: it needs at least the header line `doc,label`.")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"corrections file {path} has no column(s) {missing} (header: {reader.fieldnames}): "
                        "its first line must be `doc,label` (more columns are ignored).")
    by_name: dict[str, Decision] = {}
    for line, row in enumerate(reader, start=2):
        doc, value = (row.get("doc") or "").strip(), (row.get("label") or "").strip()
        if not doc and not value:
            continue  # a blank line a spreadsheet left
        if not doc or not value:
            raise UserError(f"{path} row {line}: {'doc' if not doc else 'label'} is blank: give a doc_id or "
                            "source_path and a label (or `drop`), or delete the row.")
        kept = (row.get(KEPT) or "").strip().lower()
        if kept not in ("", YES) or (kept and value == DROP):
            raise UserError(f"{path} row {line}: `kept` is {kept!r}: it is `yes` on a label kept at review (not "
                            "on a drop), else blank.")
        d = Decision(line, doc, _label(value, multilabel), kept == YES)
        before = by_name.get(doc)
        if before and before.label != d.label:
            raise UserError(f"{path} rows {before.row} and {line} name {doc!r} with two answers "
                            f"({before.label or DROP} / {d.label or DROP}): keep one row.")
        by_name.setdefault(doc, d)
    return Corrections(path, hashlib.md5(data).hexdigest(), by_name)
