"""A class too small to learn (`ingest.min_per_class`): it stops ingest naming it, or with
`ingest.small_classes: drop` its documents are dropped, counted and named in the report."""
from __future__ import annotations

import logging
from collections import Counter

import numpy as np

from textclf.errors import UserError
from textclf.data.ingest_report import IngestReport, SkipReason
from textclf.data.labelsets import labels_of

log = logging.getLogger(__name__)


def _smallest(counts: dict[str, int]) -> str:
    """The 5 smallest classes named, the rest counted: 1 000 classes made a 15 000-character line."""
    small = sorted((n, c) for c, n in counts.items())
    return f"{dict((c, n) for n, c in small[:5])}" + (f" and {len(small) - 5} more" if len(small) > 5 else "")


def check_classes(per_class: Counter, min_per_class: int) -> None:
    small = {c: n for c, n in per_class.items() if n < min_per_class}
    if small:
        raise UserError(
            f"class(es) {_smallest(small)} have fewer than ingest.min_per_class={min_per_class} "
            "documents after cleaning; add documents, remove the class (its folder or rows), set "
            "ingest.small_classes: drop, or lower ingest.min_per_class.")
    if len(per_class) < 2:
        raise UserError(f"found {len(per_class)} class(es) {sorted(per_class)}; a classifier needs "
                        "at least two classes (class folders under ingest.source, or label values).")


def _without(order: np.ndarray, group_of: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, group_of) as Ledger.write takes them, of the documents `keep` leaves; a group
    whose first document went is led by its first kept one (near_duplicates.conflicts: keep
    lets a group span two classes)."""
    position = np.cumsum(keep) - 1
    lead, roots = np.where(keep, position, -1), group_of[keep]
    gone = ~keep[roots]
    leaderless, first = np.unique(roots[gone], return_index=True)
    lead[leaderless] = position[keep][gone][first]
    return order[keep], lead[roots]


def drop_small_classes(labels: list[str], order: np.ndarray, group_of: np.ndarray, classes: set[str],
                       min_per_class: int, multilabel: bool,
                       report: IngestReport) -> tuple[np.ndarray, np.ndarray]:
    """The corpus's documents (`labels` at `order`, grouped by `group_of`) less those of each
    class below min_per_class (`classes` holds those with no document left too), counted as
    small_class and each class named in report.dropped_classes with its count. A multi-label
    document goes with any of its labels, which may leave another label short: it goes next."""
    names = [set(labels_of(label)) if multilabel else {label} for label in labels]
    keep, dropped = np.ones(len(order), bool), dict[str, int]()
    while True:
        counts = Counter(c for k, held in enumerate(names) if keep[k] for c in held)
        small = {c: counts[c] for c in sorted(classes | set(counts))
                 if c not in dropped and counts[c] < min_per_class}
        if not small:
            break
        dropped |= small
        keep &= np.array([not held & small.keys() for held in names], bool)
    report.dropped_classes = dropped
    if dropped:
        report.drop(SkipReason.SMALL_CLASS, int((~keep).sum()))
        log.warning("ingest.small_classes: drop: dropped %d document(s) of %d class(es) below "
                    "ingest.min_per_class=%d: %s", (~keep).sum(), len(dropped), min_per_class, _smallest(dropped))
    return _without(order, group_of, keep)
