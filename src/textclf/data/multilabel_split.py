"""The split of a multi-label corpus (ingest.task: multilabel): near-duplicate groups stay
whole, and every label, not every label set, is what must reach every split.

A group's labels are the union of its documents' label sets.

`stable` (split.method): each group's place is hashed exactly as for a single-label corpus
(textclf.data.splitting.bucket: its split_key and split.seed), so adding documents moves no
existing one. Then, per label (sorted) and per split lacking it, the group carrying the label
nearest to that split's interval moves in, chosen among the groups whose move leaves each of
their labels in the split they leave: a repair never takes a label out of a split, so no later
repair undoes an earlier one.

`stratified_shuffle`: iterative stratification (Sechidis, Tsoumakas & Vlahavas 2011) over
groups, in documents: the rarest label left goes first, each of its groups to the split that
still wants the most of that label's documents. Written here rather than taken from the
`iterative-stratification` package: that package imports scikit-learn (1.3 s, and its private
model_selection API) into the data layer, which the import contracts keep free of it, and it
counts a group of twelve near-duplicates as one sample.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from textclf.data.labelsets import labels_of
from textclf.data.splitting import (SPLITS, _distance, _finish, _needs, per_label_rows,
                                    stable_places)


def label_sets(labels: pd.Series, groups: pd.Series) -> pd.Series:
    """Label sets and groups per doc id -> each group's labels (the union of its documents'),
    sorted, indexed by group in sort order."""
    def union(sets: pd.Series) -> tuple[str, ...]:
        return tuple(sorted({label for s in sets for label in labels_of(s)}))
    return labels.groupby(groups, sort=True).agg(union)


def _repair(sets: pd.Series, places: pd.Series, split_of: pd.Series,
            fractions: dict[str, float]) -> list[dict]:
    """Per label missing a split, move in the nearest group carrying it whose labels all stay
    in the split it leaves. -> the moves (split_of is changed in place)."""
    held = pd.DataFrame({"labels": sets, "split": split_of}).explode("labels").dropna()
    present = held.groupby(["split", "labels"]).size().to_dict()  # (split, label) -> groups
    moves = []
    for label in sorted(held["labels"].unique()):
        carriers = held.index[held["labels"] == label]
        for where, name in enumerate(SPLITS):
            if present.get((where, label), 0):
                continue
            movable = [g for g in carriers if all(present[split_of[g], other] > 1 for other in sets[g])]
            if not movable:
                continue  # too few groups: the check names the label
            group = min(movable, key=lambda g: (_distance(places[g], where, fractions), g))
            source = int(split_of[group])
            for other in sets[group]:
                present[source, other] -= 1
                present[where, other] = present.get((where, other), 0) + 1
            split_of[group] = where
            moves.append({"group": group, "label": label, "from": SPLITS[source], "to": name})
    return moves


def stable_assign(labels: pd.Series, groups: pd.Series, keys: pd.Series, fractions: dict[str, float],
                  seed: int) -> tuple[pd.Series, list[dict]]:
    """As splitting.stable_assign, with label sets: (split name per doc id, the repair moves)."""
    order = labels.index.sort_values()
    labels, groups, keys = labels[order], groups[order], keys[order]
    places, split_of = stable_places(groups, keys, fractions, seed)
    moves = _repair(label_sets(labels, groups), places, split_of, fractions)
    return groups.map(lambda g: SPLITS[split_of[g]]).rename("split"), moves


def iterative_stratification(counts: np.ndarray, sizes: np.ndarray, fractions: dict[str, float],
                             rng: np.random.Generator) -> np.ndarray:
    """counts[g, l]: group g's documents with label l; sizes[g]: its documents -> each group's
    split index. Sechidis et al. 2011 (Algorithm 1) with a group weighing its documents."""
    share = np.array([fractions[s] for s in SPLITS])
    wanted = np.outer(share, counts.sum(axis=0)).astype(float)  # split x label: documents still wanted
    room = share * sizes.sum()  # documents still wanted per split: the tie-break
    where = np.full(len(counts), -1)
    order = rng.permutation(len(counts))  # the groups' visiting order within a label
    while (where < 0).any():
        left = counts[where < 0].sum(axis=0)
        if not left.any():  # groups with no label (not written by ingest): fill the emptiest split
            for g in order[where[order] < 0]:
                where[g] = int(np.argmax(room))
                room[where[g]] -= sizes[g]
            break
        rarest = np.flatnonzero(left == left[left > 0].min())
        label = rarest[rng.integers(len(rarest))]
        for g in order[(where[order] < 0) & (counts[order, label] > 0)]:
            best = np.flatnonzero(wanted[:, label] == wanted[:, label].max())
            best = best[room[best] == room[best].max()]
            where[g] = best[rng.integers(len(best))]
            wanted[where[g]] -= counts[g]
            room[where[g]] -= sizes[g]
    return where


def stratified_assign(labels: pd.Series, groups: pd.Series, fractions: dict[str, float],
                      seed: int) -> pd.Series:
    """A pure function of (label sets, groups, fractions, seed), indexed by doc id -> split name
    per doc id, by iterative stratification over groups."""
    order = labels.index.sort_values()
    labels, groups = labels[order], groups[order]
    rows = per_label_rows(pd.DataFrame({"label": labels, "group": groups}))
    every = pd.Index(groups.unique()).sort_values()  # a group with no label still needs a split
    counts = rows.groupby(["group", "label"]).size().unstack(fill_value=0).reindex(every, fill_value=0)
    sizes = groups.value_counts()[counts.index]
    where = iterative_stratification(counts.to_numpy(), sizes.to_numpy(), fractions,
                                     np.random.default_rng(seed))
    split_of = pd.Series([SPLITS[w] for w in where], index=counts.index)
    return groups.map(split_of).rename("split")


def split_multilabel(corpus: pd.DataFrame, fractions: dict[str, float], seed: int,
                     method: str) -> tuple[pd.DataFrame, list[dict]]:
    """split_stage.split_corpus for a multi-label corpus (its `label` the canonical label sets)
    -> (assignment, repair moves); every label in every split, else a UserError naming it."""
    _needs(corpus, "group", "near-duplicate grouping")
    frame = corpus.set_index("doc_id")
    if method == "stratified_shuffle":
        split = stratified_assign(frame["label"], frame["group"], fractions, seed)
        return _finish(frame, split, fractions, multilabel=True), []
    _needs(corpus, "split_key", "the stable split")
    split, moves = stable_assign(frame["label"], frame["group"], frame["split_key"], fractions, seed)
    return _finish(frame, split, fractions, multilabel=True), moves
