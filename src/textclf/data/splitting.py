"""Seeded, stratified, group-aware train / validation / test split.

Near-duplicates share a `group` (ingest), and a group never straddles two splits: otherwise
the test set would grade memory. Per class, the groups are shuffled and laid end to end, and
each goes to the split its midpoint falls in. A class's count in a split therefore differs
from its largest-remainder target by at most the size of the class's largest group (half of
it for train and test, one boundary each). With no near-duplicates every group is one
document and the split is exactly the one a plain stratified shuffle gives.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from textclf.io import UserError

SPLITS = ("train", "validation", "test")


def allocate(n: int, fractions: dict[str, float]) -> dict[str, int]:
    """Largest-remainder counts per split that sum to n."""
    raw = {s: n * fractions[s] for s in SPLITS}
    counts = {s: int(np.floor(v)) for s, v in raw.items()}
    by_remainder = sorted(SPLITS, key=lambda s: (raw[s] - counts[s], -SPLITS.index(s)), reverse=True)
    for s in by_remainder[: n - sum(counts.values())]:
        counts[s] += 1
    return counts


def group_labels(labels: pd.Series, groups: pd.Series) -> pd.Series:
    """The stratum of each group: its most common label, ties to the first in sort order
    (a group keeps two labels only under ingest.near_duplicates.conflicts: keep)."""
    def majority(values: pd.Series) -> str:
        counts = Counter(values)
        return min(counts, key=lambda label: (-counts[label], label))
    return labels.groupby(groups, sort=False).agg(majority)


def _place(sizes: np.ndarray, counts: dict[str, int]) -> np.ndarray:
    """Split index of each group, laid end to end in the given order: the split whose
    target range holds the group's midpoint. Doubled to stay in integers."""
    bounds = 2 * np.cumsum([counts[s] for s in SPLITS])[:-1]
    midpoints = 2 * (np.cumsum(sizes) - sizes) + sizes
    return np.searchsorted(bounds, midpoints, side="right")


def assign_splits(labels: pd.Series, groups: pd.Series, fractions: dict[str, float],
                  seed: int) -> pd.Series:
    """A pure function of (labels, groups, fractions, seed), both Series indexed by doc id
    -> split name per doc id. Every group lands in one split; every class in every split."""
    order = labels.index.sort_values()
    labels, groups = labels[order], groups[order]
    stratum = group_labels(labels, groups)  # groups in order of their first doc id
    sizes = groups.value_counts(sort=False)
    rng = np.random.default_rng(seed)
    split_of = {}
    for label, members in stratum.groupby(stratum, sort=True):
        names = members.index[rng.permutation(len(members))]
        counts = allocate(int(sizes[names].sum()), fractions)
        for name, where in zip(names, _place(sizes[names].to_numpy(), counts)):
            split_of[name] = SPLITS[where]
    return groups.map(split_of).rename("split")


def _check_every_class_everywhere(assignment: pd.DataFrame, fractions: dict[str, float]) -> None:
    present = assignment.groupby("label")["split"].agg(set)
    for label, splits in present.items():
        missing = [s for s in SPLITS if s not in splits]
        if missing:
            docs = assignment[assignment["label"] == label]
            largest = int(docs["group"].value_counts().max())
            raise UserError(
                f"class {label!r} has {len(docs)} documents in {docs['group'].nunique()} "
                f"near-duplicate group(s) (largest {largest}), too few to give split(s) {missing} "
                f"one each with split.fractions={fractions}; add documents, raise "
                "ingest.min_per_class, or raise ingest.near_duplicates.threshold.")


def stratified_split(corpus: pd.DataFrame, fractions: dict[str, float], seed: int) -> pd.DataFrame:
    """corpus (doc_id, label, content_hash, group) -> DataFrame(doc_id, label, content_hash,
    group, split) sorted by doc_id."""
    if "group" not in corpus:
        raise UserError("the corpus has no `group` column: it was written before near-duplicate "
                         "grouping; rerun ingest (`dvc repro ingest`).")
    frame = corpus.set_index("doc_id")
    split = assign_splits(frame["label"], frame["group"], fractions, seed)
    out = (frame[["label", "content_hash", "group"]].join(split).sort_index()
           .rename_axis("doc_id").reset_index())
    _check_every_class_everywhere(out, fractions)
    check_disjoint(out)
    return out


def check_disjoint(assignment: pd.DataFrame) -> None:
    """No content hash and no near-duplicate group may sit in two splits: either would leak
    test text into training."""
    for column, fix in (("content_hash", "rerun ingest, which removes duplicates"),
                        ("group", "split by group (textclf.data.splitting.stratified_split)")):
        per_key = assignment.groupby(column)["split"].nunique()
        leaked = per_key[per_key > 1]
        if len(leaked):
            raise UserError(f"{len(leaked)} {column} value(s) appear in more than one split, "
                             f"e.g. {leaked.index[0]}; {fix}.")


def class_counts(assignment: pd.DataFrame) -> dict[str, dict[str, int]]:
    table = assignment.groupby(["split", "label"]).size()
    return {s: {l: int(n) for l, n in table[s].items()} for s in SPLITS}
