"""Near-duplicate groups whose documents carry two labels (ingest keeps them: near_duplicates.
conflicts: keep), found from the corpus's `group` and `label` columns, for the label review."""
from __future__ import annotations

import numpy as np
import pandas as pd

JOIN = "; "  # between the other labels of a group (not "|": that joins a multi-label correction)


def other_labels(groups: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(N,) per document: the labels its near-duplicate group holds besides its own, sorted and
    joined by JOIN; "" for a document whose group holds one label (most of them)."""
    frame = pd.DataFrame({"group": groups, "label": labels})
    held = frame.drop_duplicates().groupby("group")["label"].agg(lambda s: sorted(s))
    mixed = held[held.map(len) > 1]
    out = np.full(len(frame), "", dtype=object)
    at = np.flatnonzero(frame["group"].isin(mixed.index).to_numpy())
    for i, group, label in zip(at.tolist(), frame["group"].to_numpy()[at], frame["label"].to_numpy()[at]):
        out[i] = JOIN.join(x for x in mixed[group] if x != label)
    return out


def mixed_counts(table: pd.DataFrame) -> dict[str, int]:
    """A label-issues table (group, group_labels, flagged) -> the mixed-label groups it holds,
    their documents, and how many of those cleanlab flagged."""
    mixed = table[table["group_labels"] != ""]
    return {"groups": int(mixed["group"].nunique()), "documents": len(mixed),
            "flagged": int(mixed["flagged"].sum())}


def together(table: pd.DataFrame) -> pd.DataFrame:
    """A label-issues table, sorted -> the same rows, each mixed-label group's rows moved up to
    its first one, in their order: a person decides a group seeing all of it. Other rows keep
    their order."""
    key = table["group"].where(table["group_labels"] != "", table["doc_id"])  # a group id is a member's doc id
    lead = pd.Series(np.arange(len(table)), index=table.index).groupby(key.to_numpy()).transform("min")
    return table.iloc[np.argsort(lead.to_numpy(), kind="stable")]


def mixed_groups(table: pd.DataFrame) -> pd.DataFrame:
    """A label-issues table -> one row per mixed-label group (group, split, documents: "path
    (label)" in path order joined by JOIN, flagged, quality: its least), the least quality first."""
    mixed = table[table["group_labels"] != ""].sort_values("source_path", kind="stable")
    named = mixed.assign(document=mixed["source_path"] + " (" + mixed["given"].astype(str) + ")")
    rows = named.groupby("group", sort=True).agg(split=("split", "first"), documents=("document", JOIN.join),
                                                 flagged=("flagged", "sum"), quality=("quality", "min"))
    return rows.sort_values("quality", kind="stable").reset_index()
