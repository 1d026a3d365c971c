"""Several labels per document (`ingest.task: multilabel`): a table's label cell -> the
document's label set, kept in the corpus's `label` column as its canonical JSON list (distinct,
sorted), so that de-duplication, near-duplicate groups and the ledger treat a label set as
they treat a class (two copies with other label sets are a conflict, as two classes are).

The shape is never guessed: a JSON list (JSONL) or a list column (Parquet), or a string cut
at `ingest.label_delimiter` (CSV/TSV, or any format that sets it). A list under
`task: single_label`, or a scalar (string or number) under `multilabel` with no delimiter,
stops ingest naming the param. The corpus says which task made it (TASK_KEY in its Parquet metadata), and so does
the token store tokenize derives from it: the stages after ingest go by that, never by the
shape of a label.
"""
from __future__ import annotations

import json
from collections import Counter

import numpy as np

from textclf.errors import UserError

TASK_KEY = b"textclf.task"
MULTILABEL = "multilabel"


def canonical(labels: list[str]) -> str:
    """A label set as the corpus keeps it: '["politics", "sport"]' (distinct, sorted)."""
    return json.dumps(sorted(set(labels)))


def labels_of(label: str) -> list[str]:
    """The corpus's label of a multi-label document -> its labels."""
    return json.loads(label)


def label_sets(hot, labels: list[str]) -> list[str]:
    """(N, C) multi-hot rows (bool or 0/1) -> each row's label set as the corpus writes it."""
    return [json.dumps(sorted(label for label, on in zip(labels, row) if on)) for row in hot]


def hot(sets, labels: list[str]) -> np.ndarray:
    """Label sets as the corpus writes them -> (N, C) multi-hot over `labels`."""
    index = {label: i for i, label in enumerate(labels)}
    out = np.zeros((len(sets), len(labels)), dtype=bool)
    for row, label_set in enumerate(sets):
        out[row, [index[label] for label in labels_of(label_set)]] = True
    return out


def per_label(per_set: Counter) -> Counter:
    """Documents per label set -> documents per label (a document counts once for each)."""
    out: Counter = Counter()
    for label_set, n in per_set.items():
        for label in labels_of(label_set):
            out[label] += n
    return out


# what a label cell can hold that its label set drops, counted in ingest_report.json's
# `label_fixes` (the row is kept: the set is what the cell means)
REPEATED_LABEL, BLANK_LABEL = "repeated_label", "blank_label"


def label_set(value, at: str, delimiter: str) -> tuple[list[str] | None, tuple[str, ...]]:
    """A multi-label cell -> (its labels, stripped and distinct, or None where an item is not
    a label: neither a string nor an integer; what was dropped: REPEATED_LABEL, BLANK_LABEL).
    A list holds labels; any other cell, a string or a number alike, is labels joined by
    `delimiter` (an integer is one label), and without one it stops ingest: `3` as class "3"
    beside `"sport"` refused would be two rules for one shape."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif not delimiter and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        shown = f"string {value[:60]!r}" if isinstance(value, str) else f"number {value}"
        raise UserError(f"{at}: the label is the {shown}, but ingest.task: multilabel reads "
                        "label lists: a JSON list in JSON Lines, a list column in Parquet, or set "
                        "ingest.label_delimiter (e.g. '|') for labels joined in one string (CSV/TSV). "
                        "A document with one label is a list of one ([\"sport\"]).")
    else:
        items = value.split(delimiter) if isinstance(value, str) else [value]
    labels: list[str] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)
        if not isinstance(item, str):
            return None, ()
        if item.strip():
            labels.append(item.strip())
    repeated = len(set(labels)) < len(labels)
    blank = bool(labels) and len(labels) < len(items)  # all blank: a missing_label row
    return list(dict.fromkeys(labels)), (REPEATED_LABEL,) * repeated + (BLANK_LABEL,) * blank


def refuse_single_label_list(value, at: str) -> None:
    """A list in the label column of a single-label corpus: it holds label sets."""
    if isinstance(value, (list, tuple)):
        raise UserError(f"{at}: the label is a list ({json.dumps(value)[:80]}); a document with several "
                        "labels needs ingest.task: multilabel.")


def is_multilabel(metadata: dict | None) -> bool:
    """A corpus's (or token store's) Parquet metadata -> whether ingest.task: multilabel made it."""
    return (metadata or {}).get(TASK_KEY) == MULTILABEL.encode()


def task_metadata(multilabel: bool) -> dict[bytes, bytes]:
    """What a stage writes into the Parquet metadata of a file it derives from a multi-label
    corpus (nothing for single-label: its files stay as they were)."""
    return {TASK_KEY: MULTILABEL.encode()} if multilabel else {}
