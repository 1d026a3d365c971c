"""Seeded stratified train / validation / test split."""
from __future__ import annotations

import numpy as np
import pandas as pd

SPLITS = ("train", "validation", "test")


def allocate(n: int, fractions: dict[str, float]) -> dict[str, int]:
    """Largest-remainder counts per split that sum to n."""
    raw = {s: n * fractions[s] for s in SPLITS}
    counts = {s: int(np.floor(v)) for s, v in raw.items()}
    by_remainder = sorted(SPLITS, key=lambda s: (raw[s] - counts[s], -SPLITS.index(s)), reverse=True)
    for s in by_remainder[: n - sum(counts.values())]:
        counts[s] += 1
    return counts


def stratified_split(corpus: pd.DataFrame, fractions: dict[str, float], seed: int) -> pd.DataFrame:
    """-> DataFrame(doc_id, label, content_hash, split), every class in every split."""
    rng = np.random.default_rng(seed)
    parts = []
    for label, group in corpus.sort_values("doc_id").groupby("label", sort=True):
        counts = allocate(len(group), fractions)
        empty = [s for s, c in counts.items() if c == 0]
        if empty:
            raise ValueError(f"class {label!r} has {len(group)} documents, too few to give "
                             f"split(s) {empty} one each with split.fractions={fractions}; add "
                             "documents or raise ingest.min_per_class.")
        order = rng.permutation(len(group))
        names = np.repeat(SPLITS, [counts[s] for s in SPLITS])
        parts.append(group.iloc[order][["doc_id", "label", "content_hash"]].assign(split=names))
    out = pd.concat(parts).sort_values("doc_id").reset_index(drop=True)
    check_disjoint(out)
    return out


def check_disjoint(assignment: pd.DataFrame) -> None:
    """No content hash may sit in two splits: that would leak test text into training."""
    per_hash = assignment.groupby("content_hash")["split"].nunique()
    leaked = per_hash[per_hash > 1]
    if len(leaked):
        raise ValueError(f"{len(leaked)} content hash(es) appear in more than one split, e.g. "
                         f"{leaked.index[0]}; rerun ingest, which removes duplicates.")


def class_counts(assignment: pd.DataFrame) -> dict[str, dict[str, int]]:
    table = assignment.groupby(["split", "label"]).size()
    return {s: {l: int(n) for l, n in table[s].items()} for s in SPLITS}
