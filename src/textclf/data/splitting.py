"""Seeded, group-aware train / validation / test split: stable (the default) or an exact
stratified shuffle.

Near-duplicates share a `group` (ingest), and a group never straddles two splits: otherwise
the test set would grade memory.

`stable` (split.method): a group's split is a pure function of its `split_key` (ingest: the
smallest shingle hash of the group's texts, or its content hash without near-duplicate
detection) and split.seed: the key is hashed to [0, 1) and cut by split.fractions. Adding
documents moves no existing one, removing some moves no other, and relabelling a document
(same text, other label) keeps its side. Stratification is approximate (binomial counts);
a class that would miss a split gets one group moved into it, the fewest moves, chosen
deterministically (`repairs`).

`stratified_shuffle`: per class, the groups are shuffled and laid end to end, and each goes
to the split its midpoint falls in. A class's count in a split then differs from its
largest-remainder target by at most the size of the class's largest group (half of it for
train and test, one boundary each). Exact counts, but one RNG permutes every class: adding a
single document reshuffles documents of every class.

A multi-label corpus (ingest.task: multilabel, its task in the Parquet metadata) is split by
textclf.data.multilabel_split, per label: the checks and counts here read it a row per label.
"""
from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pandas as pd

from textclf.errors import UserError
from textclf.data.labelsets import labels_of

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
    """The stratum of each group: its most common label, ties to the first in sort order (a
    group keeps two labels under ingest.near_duplicates.conflicts: keep, the default; its
    other labels' documents go where the group goes)."""
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


def bucket(key: str, seed: int) -> float:
    """A group's place in [0, 1): its key and the seed hashed, so no other group's affects it."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def _cut(places: np.ndarray, fractions: dict[str, float]) -> np.ndarray:
    """Split index of each place in [0, 1): train [0, f_train), validation next, test last."""
    edges = np.cumsum([fractions[s] for s in SPLITS])[:-1]
    return np.searchsorted(edges, places, side="right")


def _distance(place: float, where: int, fractions: dict[str, float]) -> float:
    """How far `place` lies outside split `where`'s interval (0 inside it)."""
    edges = np.concatenate([[0.0], np.cumsum([fractions[s] for s in SPLITS])])
    return max(edges[where] - place, place - edges[where + 1], 0.0)


def _repair(labels: pd.Series, groups: pd.Series, places: pd.Series, split_of: pd.Series,
            fractions: dict[str, float]) -> list[dict]:
    """Move, per class missing a split, the group holding that class nearest to that split's
    interval into it, taken from a split that keeps another group of each class the group
    holds: the fewest moves, the same ones for the same corpus. A group counts for every label
    its documents carry, so a class found only in groups whose majority is another class (a
    mixed-label group, ingest.near_duplicates.conflicts: keep) is repaired too, and moving such
    a group never takes the last of another class from a split. -> the moves (split_of is
    changed in place)."""
    held_by = pd.Series(groups.to_numpy(), index=labels.to_numpy()).groupby(level=0, sort=True).unique()
    labels_of_group = pd.Series(labels.to_numpy(), index=groups.to_numpy()).groupby(level=0).unique()
    moves = []
    for label, members in held_by.items():
        for where, name in enumerate(SPLITS):
            if (split_of[members] == where).any():
                continue

            def spare(g: str) -> bool:  # every class of g keeps a group in g's split without it
                return all(((split_of[held_by[c]] == split_of[g]).sum() > 1) for c in labels_of_group[g])
            movable = [g for g in members if spare(g)]
            if not movable:
                continue  # too few groups: _check_every_class_everywhere names the class
            group = min(movable, key=lambda g: (_distance(places[g], where, fractions), g))
            moves.append({"group": group, "label": label, "from": SPLITS[split_of[group]], "to": name})
            split_of[group] = where
    return moves


def stable_places(groups: pd.Series, keys: pd.Series, fractions: dict[str, float],
                  seed: int) -> tuple[pd.Series, pd.Series]:
    """groups, keys in doc id order -> (each group's place in [0, 1), its split index before
    any repair), both indexed by group."""
    group_key = keys.groupby(groups, sort=True).min()  # one key per group (ingest writes them equal)
    places = pd.Series([bucket(k, seed) for k in group_key], index=group_key.index)
    return places, pd.Series(_cut(places.to_numpy(), fractions), index=places.index)


def stable_assign(labels: pd.Series, groups: pd.Series, keys: pd.Series,
                  fractions: dict[str, float], seed: int) -> tuple[pd.Series, list[dict]]:
    """labels, groups, keys indexed by doc id (a group's documents share its key) -> (split
    name per doc id, the repair moves). A group's split depends on its key and the seed alone,
    unless it was moved to give its class a split it would otherwise lack."""
    order = labels.index.sort_values()
    labels, groups, keys = labels[order], groups[order], keys[order]
    places, split_of = stable_places(groups, keys, fractions, seed)
    moves = _repair(labels, groups, places, split_of, fractions)
    return groups.map(lambda g: SPLITS[split_of[g]]).rename("split"), moves


def per_label_rows(assignment: pd.DataFrame) -> pd.DataFrame:
    """A multi-label assignment -> a row per (document, label): a document counts once for
    each of its labels, in the checks and the counts alike."""
    return assignment.assign(label=assignment["label"].map(labels_of)).explode("label")


def _check_every_class_everywhere(assignment: pd.DataFrame, fractions: dict[str, float],
                                  kind: str = "class") -> None:
    """Every `label` value in every split (given per_label_rows: every label, `kind` 'label')."""
    present = assignment.groupby("label")["split"].agg(set)
    for label, splits in present.items():
        missing = [s for s in SPLITS if s not in splits]
        if missing:
            docs = assignment[assignment["label"] == label]
            largest = int(docs["group"].value_counts().max())
            raise UserError(
                f"{kind} {label!r} has {len(docs)} documents in {docs['group'].nunique()} "
                f"near-duplicate group(s) (largest {largest}), too few to give split(s) {missing} "
                f"one each with split.fractions={fractions}; add documents, raise "
                "ingest.min_per_class, or raise ingest.near_duplicates.threshold.")


def _needs(corpus: pd.DataFrame, column: str, since: str) -> None:
    if column not in corpus:
        raise UserError(f"the corpus has no `{column}` column: it was written before {since}; "
                        "rerun ingest (`dvc repro ingest`).")


def _finish(frame: pd.DataFrame, split: pd.Series, fractions: dict[str, float],
            multilabel: bool = False) -> pd.DataFrame:
    kept = ["label", "content_hash", "group"] + (["source_path"] if "source_path" in frame else [])
    out = (frame[kept].join(split).sort_index()
           .rename_axis("doc_id").reset_index())
    if multilabel:  # per label: a label set is no class
        _check_every_class_everywhere(per_label_rows(out), fractions, "label")
    else:
        _check_every_class_everywhere(out, fractions)
    check_disjoint(out)
    return out


def stratified_split(corpus: pd.DataFrame, fractions: dict[str, float], seed: int) -> pd.DataFrame:
    """split.method stratified_shuffle: corpus (doc_id, label, content_hash, group) ->
    DataFrame(doc_id, label, content_hash, group, split) sorted by doc_id."""
    _needs(corpus, "group", "near-duplicate grouping")
    frame = corpus.set_index("doc_id")
    return _finish(frame, assign_splits(frame["label"], frame["group"], fractions, seed), fractions)


def stable_split(corpus: pd.DataFrame, fractions: dict[str, float],
                 seed: int) -> tuple[pd.DataFrame, list[dict]]:
    """split.method stable: corpus (doc_id, label, content_hash, group, split_key) -> (the
    assignment as stratified_split gives it, the repair moves)."""
    _needs(corpus, "group", "near-duplicate grouping")
    _needs(corpus, "split_key", "the stable split")
    frame = corpus.set_index("doc_id")
    split, moves = stable_assign(frame["label"], frame["group"], frame["split_key"], fractions, seed)
    return _finish(frame, split, fractions), moves


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


def class_counts(assignment: pd.DataFrame, multilabel: bool = False) -> dict[str, dict[str, int]]:
    """Documents per class per split; multi-label: per label (a document once for each of its labels)."""
    if multilabel:
        assignment = per_label_rows(assignment)
    table = assignment.groupby(["split", "label"]).size()  # sorted by split, then label
    counts: dict[str, dict[str, int]] = {split: {} for split in SPLITS}
    for (split, label), n in zip(table.index, table.tolist()):
        counts[split][label] = int(n)
    return counts
