"""A review sheet's decisions checked against the corpus as ingest will check them, before
`labelissues accept` writes a row: a document the corpus holds, labels its classes have, no
exact copy left with the old answer (it gets the same one), no near-duplicate left with the old
label where ingest would refuse that.
Every problem is found in one pass, so a person fixes the sheet once, not one row per repro."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from textclf.errors import UserError
from textclf.data.corrections import DROP, MULTI_JOIN
from textclf.data.labelsets import is_multilabel

SHOWN = 10  # problems named in the one line; the rest counted


def file_form(value: str, multilabel: bool) -> str:
    """A label as a person or the sheet writes it -> the corrections file's form: `drop`, a
    class, or a label set as sorted distinct labels joined by "|" (from "a|b" or the corpus's
    JSON list '["a", "b"]' alike, so that a kept set compares equal whichever form it is in)."""
    value = value.strip()
    if not multilabel or value == DROP or not value:
        return value
    items = json.loads(value) if value.startswith("[") else value.split(MULTI_JOIN)
    return MULTI_JOIN.join(sorted({str(x).strip() for x in items if str(x).strip()}))


@dataclass(frozen=True)
class Corpus:
    """What accept checks a decision against: the corpus ingest wrote."""
    table: pd.DataFrame  # indexed by doc_id: source_path, label (file form), content_hash, group
    classes: set[str]
    multilabel: bool
    paths: dict[str, str]  # source_path -> doc_id
    copies: dict[str, list[str]]  # source_path -> its exact copies ingest dropped (ingest_report.json)

    def find(self, doc: str) -> str | None:
        """A doc_id or a source_path -> the doc_id, None where the corpus holds neither."""
        return doc if doc in self.table.index else self.paths.get(doc)


def read_corpus(path: str) -> Corpus:
    if not Path(path).is_file():
        raise UserError(f"{path} does not exist: accept checks each decision against the corpus ingest "
                        "wrote (`dvc repro ingest`, or give --corpus).")
    multilabel = is_multilabel(pq.read_schema(path).metadata)
    table = pd.read_parquet(path, columns=["doc_id", "source_path", "label", "content_hash", "group"])
    table["label"] = [file_form(x, multilabel) for x in table["label"]]
    labels = table["label"].str.split(MULTI_JOIN).explode() if multilabel else table["label"]
    report = Path(path).parent / "ingest_report.json"
    groups = json.loads(report.read_text()).get("duplicate_groups", []) if report.is_file() else []
    copies = {p: [o for o in group if o != p] for group in groups for p in group}
    return Corpus(table.set_index("doc_id"), set(labels) - {""}, multilabel,
                  dict(zip(table["source_path"], table["doc_id"])), copies)


def with_copies(decisions: dict[str, tuple[int, str, str]], corpus: Corpus,
                said: dict[str, tuple[str, str]]) -> tuple[list[dict[str, str]], list[str]]:
    """Ingest refuses a corrected text whose exact copy (one ingest dropped as a duplicate)
    keeps the old answer: the copy gets the same decision -> (its rows, problems where the
    copy was decided otherwise already)."""
    rows, found = [], []
    for doc, (line, label, path) in decisions.items():
        if label == corpus.table.at[doc, "label"]:
            continue
        for copy in corpus.copies.get(path, []):
            if copy in said and said[copy][1] != label:
                found.append(f"row {line} decides {label!r} for {path}, but its exact copy {copy} is "
                             f"decided {said[copy][1]!r} in {said[copy][0]}")
            elif copy not in said:
                rows.append({"doc": copy, "label": label})
    return rows, found



def problems(decisions: dict[str, tuple[int, str]], corpus: Corpus, conflicts: str,
             standing: dict[str, str] | None = None) -> list[str]:
    """{doc_id: (sheet line, label in file form)} and the corrections file's `standing`
    {doc_id: label} -> every problem ingest would stop on, as "row N: ..." (none: the decisions
    can be written)."""
    found = []
    for doc, (line, label) in decisions.items():
        new = [x for x in (label.split(MULTI_JOIN) if corpus.multilabel else [label]) if x not in corpus.classes]
        if label != DROP and new:
            found.append(f"row {line}: label {new[0]!r} is no class of the corpus (classes: "
                         f"{', '.join(sorted(corpus.classes))})")
    table = corpus.table
    changed = {d: v for d, v in decisions.items() if v[1] != table.at[d, "label"]}
    for doc, (line, label) in changed.items():
        if conflicts != "drop" or label == DROP:
            continue
        group = table.index[(table["group"] == table.at[doc, "group"]) & (table.index != doc)]
        after = {o: decisions[o][1] if o in decisions else (standing or {}).get(o, table.at[o, "label"])
                 for o in group}
        # a near-duplicate a correction drops never reaches ingest's groups, so it leaves no conflict
        left = [o for o, was in after.items() if was not in (label, DROP)]
        if left:
            found.append(f"row {line}: relabels {table.at[doc, 'source_path']}, but its near-duplicate "
                         f"{table.at[left[0], 'source_path']} keeps {after[left[0]]!r} and "
                         "ingest.near_duplicates.conflicts: drop would drop the group: give it the same answer, "
                         "or drop it")
    return found


def refuse(where: str, found: list[str]) -> None:
    """Every problem in one line, and nothing written."""
    if found:
        more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        raise UserError(f"{where}: {len(found)} decision(s) ingest would refuse, so nothing was written: "
                        f"{'; '.join(found[:SHOWN])}{more}. Fix the `label` cells, then accept again.")
