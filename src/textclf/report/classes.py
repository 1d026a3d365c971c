"""How the report shows a per-class table from 2 to 100 classes: worst class first, rows at
zero highlighted, the rest folded past SHOWN rows; a confusion matrix as shares of each actual
class with its largest confusions listed; a class-by-split table one column per class while
it fits, one row per class beyond."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from textclf.report.document import Table

SHOWN = 15  # rows of a per-class table shown; the rest fold away (the demo's 5 classes: all shown)
WIDE = 8  # up to this many classes, a table may give each class a column (the demo's split table)
NAMED = 12  # classes named in a sentence before "and N more"
TOP_CONFUSIONS = 10


def class_table(header: list[str], rows: list[list], worst: Callable[[int], Any],
                marked: Callable[[int], bool] = lambda i: False, rest: str = "classes") -> Table:
    """One row per class, sorted by `worst(i)` of each row's original index i (smallest first;
    ties keep the original order), rows where `marked(i)` highlighted, folded past SHOWN rows
    (past every highlighted row, up to twice SHOWN: 19 classes at F1 0 all show)."""
    order = sorted(range(len(rows)), key=worst)
    lit = frozenset(k for k, i in enumerate(order) if marked(i))
    shown = max(SHOWN, min(len(lit), 2 * SHOWN))
    return Table(header, [rows[i] for i in order], shown=shown if len(rows) > shown else None, marked=lit, rest=rest)


def named(names: Sequence[str], limit: int = NAMED) -> str:
    """`a, b, c` or `a, b, … and 7 more`: a sentence's list of classes that stays a sentence."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def f1_zero(per_class: dict[str, dict]) -> list[str]:
    """The classes with test documents and F1 0: the model gets none of them right."""
    return [c for c, s in per_class.items() if s["support"] and s["f1"] == 0]


def matrix(confusion: dict[str, dict[str, int]]) -> tuple[list[str], np.ndarray]:
    """{actual: {predicted: count}} -> (labels, (C, C) counts, rows actual)."""
    labels = list(confusion)
    return labels, np.array([[confusion[a].get(p, 0) for p in labels] for a in labels], dtype=int).reshape(
        len(labels), len(labels))


def row_shares(counts: np.ndarray) -> np.ndarray:
    """Each row over its total: the share of an actual class's documents given each class
    (0 for a class with no test documents)."""
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)


def top_confusions(confusion: dict[str, dict[str, int]], k: int = TOP_CONFUSIONS) -> list[tuple]:
    """The k largest off-diagonal cells -> (actual, predicted, documents, share of actual's),
    most documents first, then the larger share."""
    labels, counts = matrix(confusion)
    shares = row_shares(counts)
    cells = [(counts[i, j], shares[i, j], i, j) for i, j in zip(*np.nonzero(counts)) if i != j]
    cells.sort(key=lambda c: (-c[0], -c[1], c[2], c[3]))
    return [(labels[i], labels[j], int(n), float(s)) for n, s, i, j in cells[:k]]


def split_table(classes: list[str], counts: dict[str, dict[str, int]],
                splits: tuple[str, ...] = ("train", "validation", "test")) -> Table:
    """Documents per class and split: a column per class up to WIDE classes (the demo's), else
    a row per class, the smallest first, a class missing from a split highlighted."""
    if len(classes) <= WIDE:
        return Table(["split"] + classes, [[s] + [counts[s].get(c, 0) for c in classes] for s in splits])
    per_split = [[int(counts[s].get(c, 0)) for s in splits] for c in classes]
    return class_table(["class", *splits, "total"], [[c, *n, sum(n)] for c, n in zip(classes, per_split)],
                       worst=lambda i: sum(per_split[i]), marked=lambda i: 0 in per_split[i])
