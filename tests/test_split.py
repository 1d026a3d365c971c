import numpy as np
import pandas as pd
import pytest

from textclf.splitting import allocate, check_disjoint, class_counts, stratified_split

FRACTIONS = {"train": 0.6, "validation": 0.2, "test": 0.2}


def corpus(sizes: dict[str, int]) -> pd.DataFrame:
    """No near-duplicates: every document is its own group, as ingest writes it."""
    rows = [(f"{label}-{i:03d}", label, f"hash-{label}-{i}") for label, n in sizes.items() for i in range(n)]
    frame = pd.DataFrame(rows, columns=["doc_id", "label", "content_hash"])
    return frame.assign(group=frame["doc_id"])


def test_allocate_sums_and_rounds():
    assert allocate(10, FRACTIONS) == {"train": 6, "validation": 2, "test": 2}
    assert sum(allocate(17, FRACTIONS).values()) == 17


def test_stratification_holds_per_class():
    sizes = {"a": 100, "b": 37, "c": 12}
    counts = class_counts(stratified_split(corpus(sizes), FRACTIONS, seed=1))
    for label, n in sizes.items():
        for split, frac in FRACTIONS.items():
            assert abs(counts[split][label] - n * frac) < 1, (label, split)


def test_same_seed_same_split_other_seed_other_split():
    frame = corpus({"a": 50, "b": 50})
    one = stratified_split(frame, FRACTIONS, seed=7)
    assert one.equals(stratified_split(frame.sample(frac=1, random_state=3), FRACTIONS, seed=7))
    assert not one["split"].equals(stratified_split(frame, FRACTIONS, seed=8)["split"])


def test_no_content_hash_in_two_splits():
    out = stratified_split(corpus({"a": 40, "b": 40}), FRACTIONS, seed=0)
    assert out.groupby("content_hash")["split"].nunique().max() == 1
    leaked = out.copy()
    leaked.loc[leaked.index[1], "content_hash"] = leaked.loc[leaked.index[0], "content_hash"]
    if leaked.loc[leaked.index[0], "split"] == leaked.loc[leaked.index[1], "split"]:
        leaked.loc[leaked.index[1], "split"] = next(
            s for s in ("train", "test") if s != leaked.loc[leaked.index[0], "split"])
    with pytest.raises(ValueError, match="more than one split"):
        check_disjoint(leaked)


def test_class_too_small_for_every_split_names_it():
    with pytest.raises(ValueError, match="'tiny'"):
        stratified_split(corpus({"big": 30, "tiny": 2}), FRACTIONS, seed=0)


def test_every_split_gets_every_class():
    out = stratified_split(corpus({"a": 5, "b": 5, "c": 5}), FRACTIONS, seed=0)
    assert (out.groupby("split")["label"].nunique() == 3).all()
    assert np.array_equal(np.sort(out["doc_id"]), out["doc_id"].to_numpy())
