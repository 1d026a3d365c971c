"""What changed between two data versions, document by document: added, removed, relabelled
(the same text under another label), edited (the same id, other text), and documents that
changed split. A version is a split table (doc_id, label, content_hash, split[, source_path]):
what the split stage writes, and what a registered model's run carries.

Texts are matched by content hash (ingest's normalised text), so a relabelled file, whose
folder-based id changes with its class folder, is still the same document. A removed document
whose file is still in the source was dropped at ingest: the newer version's ingest report
says why (its reason, and with which documents), and the diff names it.
"""
from __future__ import annotations

import pandas as pd

from textclf.errors import UserError

KINDS = ("added", "removed", "relabelled", "edited")
EXAMPLES = 3  # documents named per kind
NEEDED = ("doc_id", "label", "content_hash")


def _check(frame: pd.DataFrame, which: str) -> pd.DataFrame:
    missing = [c for c in NEEDED if c not in frame]
    if missing:
        raise UserError(f"the {which} data version has no column(s) {missing} (columns: "
                        f"{list(frame.columns)}); it needs a split table from `dvc repro split`.")
    if not frame["content_hash"].is_unique or not frame["doc_id"].is_unique:
        raise UserError(f"the {which} data version holds a document twice (a content hash or an "
                        "id appears in two rows); rerun `dvc repro ingest split` on it.")
    if "source_path" not in frame:
        frame = frame.assign(source_path=frame["doc_id"])
    return frame.set_index("content_hash", drop=False)


def _kind_table(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """One row per document of either version with its kind (or "same") and both labels."""
    both = old.index.intersection(new.index)
    rows = [pd.DataFrame({"kind": "same", "label": new.loc[both, "label"],
                          "old_label": old.loc[both, "label"], "path": new.loc[both, "source_path"]})]
    rows[0].loc[rows[0]["label"] != rows[0]["old_label"], "kind"] = "relabelled"
    gone, fresh = old.drop(both), new.drop(both)
    edited_ids = set(gone["doc_id"]) & set(fresh["doc_id"])  # the same id now holds another text
    kind = fresh["doc_id"].isin(edited_ids).map({True: "edited", False: "added"})
    rows.append(pd.DataFrame({"kind": kind, "label": fresh["label"], "old_label": None,
                              "path": fresh["source_path"]}))
    removed = gone[~gone["doc_id"].isin(edited_ids)]
    rows.append(pd.DataFrame({"kind": "removed", "label": None, "old_label": removed["label"],
                              "path": removed["source_path"]}))
    return pd.concat(rows)


def _moves(old: pd.DataFrame, new: pd.DataFrame) -> dict:
    """Documents present in both versions that sit in another split now."""
    if "split" not in old or "split" not in new:
        return {}
    both = old.index.intersection(new.index)
    pair = pd.DataFrame({"old": old.loc[both, "split"], "new": new.loc[both, "split"]})
    moved = pair[pair["old"] != pair["new"]]
    routes = moved.value_counts().sort_index()
    return {"moved": len(moved), "test_to_train": int(routes.get(("test", "train"), 0)),
            "by_route": {f"{a}->{b}": int(n) for (a, b), n in zip(routes.index, routes.tolist())}}


def dropped_at_ingest(ingest: dict) -> dict:
    """What an ingest report (ingest_report.json) says it read and dropped -> {"paths": {path:
    {"reason", "with": the other documents involved}}, "classes": {class: "small_class"}}: a
    skipped file or row (a table row by its id, as its path is), both copies of a text under
    two labels, a near-duplicate group under two labels (conflicts: drop), a small class's
    documents (small_classes: drop); with corrections, "corrected": the paths they relabelled.
    {} for no report."""
    if not ingest:
        return {}
    paths: dict[str, dict] = {}
    for entry in ingest.get("skipped_files", []):
        paths[entry.get("id") or entry["path"]] = {"reason": entry["reason"]}
    groups = [("conflicting_label", c["paths"]) for c in ingest.get("conflicts", [])]
    groups += [("near_duplicate_conflict", g["paths"])
               for g in (ingest.get("near_duplicates") or {}).get("mixed_label_groups", [])
               if g.get("action") == "dropped"]
    for reason, members in groups:
        for path in members:
            paths[path] = {"reason": reason, "with": [p for p in members if p != path][:EXAMPLES]}
    out = {"paths": paths, "classes": {c: "small_class" for c in ingest.get("dropped_classes") or {}}}
    if "relabelled_by_corrections" in ingest:  # the corrections file's relabels (data.corrections)
        out["corrected"] = [d["path"] for d in ingest["relabelled_by_corrections"]["documents"]]
    return out


def _why_removed(table: pd.DataFrame, dropped: dict) -> pd.Series:
    """Per removed document, why ingest dropped it ({"reason", "with"}), or None: its path
    among the dropped, else its class among those dropped whole."""
    paths, classes = dropped.get("paths", {}), dropped.get("classes", {})
    return pd.Series([paths.get(path) or ({"reason": classes[label]} if label in classes else None)
                      for path, label in zip(table["path"], table["old_label"])], index=table.index, dtype=object)


def diff(old: pd.DataFrame, new: pd.DataFrame, examples: int = EXAMPLES, dropped: dict | None = None) -> dict:
    """The document-level diff of two split tables -> counts per kind and per class (a
    relabelled document counts under its new class, a removed one under its old), a few
    examples of each kind, and the documents that changed split. With `dropped` (from
    dropped_at_ingest of the newer version's ingest report), a removed document whose file
    ingest read and dropped says so: `removed.dropped_at_ingest`, and its example's `dropped`."""
    old, new = _check(old, "old"), _check(new, "new")
    table = _kind_table(old, new).reset_index(drop=True)
    table["dropped"] = None
    if dropped is not None:
        gone = table["kind"] == "removed"
        table.loc[gone, "dropped"] = _why_removed(table[gone], dropped)
    out: dict = {"old_documents": len(old), "new_documents": len(new),
                 "unchanged": int((table["kind"] == "same").sum())}
    for kind in KINDS:
        rows = table[table["kind"] == kind]
        label = rows["old_label"] if kind == "removed" else rows["label"]
        sample = rows.sort_values("path").head(examples)
        per_class = label.value_counts().sort_index()
        out[kind] = {"count": len(rows), "per_class": {str(k): int(n) for k, n in per_class.items()},
                     "examples": [_example(kind, r) for r in sample.itertuples()]}
    if dropped is not None:
        out["removed"]["dropped_at_ingest"] = _dropped_summary(table[table["dropped"].notna()], examples)
    if dropped and "corrected" in dropped:  # relabelled by the corrections file, not in the source
        relabelled = table[table["kind"] == "relabelled"]
        out["relabelled"]["by_corrections"] = int(relabelled["path"].isin(dropped["corrected"]).sum())
    out["split_moves"] = _moves(old, new)
    return out


def _example(kind: str, row) -> dict:
    if kind == "relabelled":
        return {"path": row.path, "label": row.label, "old_label": row.old_label}
    return {"path": row.path, **({"dropped": row.dropped} if row.dropped else {})}


def _dropped_summary(rows: pd.DataFrame, examples: int) -> dict:
    """The removed documents ingest read and dropped: counted per reason, a few named."""
    reasons = pd.Series([d["reason"] for d in rows["dropped"]], dtype=object).value_counts().sort_index()
    return {"count": len(rows), "per_reason": {str(k): int(n) for k, n in reasons.items()},
            "examples": [{"path": r.path, "dropped": r.dropped}
                         for r in rows.sort_values("path").head(examples).itertuples()]}


def described(example: dict) -> str:
    """One example of the diff as a reader sees it: its path, with its labels (relabelled) or
    why ingest dropped it (removed)."""
    if "old_label" in example:
        return f"{example['path']} ({example['old_label']} -> {example['label']})"
    if "dropped" in example:
        others = example["dropped"].get("with")
        return (f"{example['path']} (dropped at ingest: {example['dropped']['reason']}"
                + (f" with {', '.join(others)})" if others else ")"))
    return example["path"]


def summary(found: dict) -> str:
    """One line: the counts of each kind and of split moves."""
    moves = found.get("split_moves") or {}
    tail = f"; {moves['moved']} changed split ({moves['test_to_train']} test -> train)" if moves else ""
    return ", ".join(f"{found[k]['count']} {k}" for k in KINDS) + f", {found['unchanged']} unchanged" + tail
