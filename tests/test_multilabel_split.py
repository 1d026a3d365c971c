"""The split stage reads a multi-label corpus (issue 33 part 3, step split): near-duplicate
groups stay whole, every label (not every label set) reaches every split, the stable split
still moves no existing document when documents are added (but for counted repairs), the
stratified shuffle balances each label's documents, and split_counts.json counts per label."""
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textclf.errors import UserError
from textclf.config import NearDuplicateParams
from textclf.data.corpus import write_corpus
from textclf.data.labelsets import TASK_KEY, canonical, labels_of
from textclf.data.multilabel_split import _repair, label_sets
from textclf.data.split_stage import SplitPaths, run_split, split_corpus
from textclf.data.splitting import SPLITS, _cut, bucket, class_counts
from textclf.data.tables import Columns

from conftest import write_params

FRACTIONS = {"train": 0.7, "validation": 0.15, "test": 0.15}
LABELS = ("business", "politics", "sport", "tech")


def random_sets(n: int, seed: int) -> list[list[str]]:
    """n label sets of 1-3 labels, some labels commoner than others."""
    rng = np.random.default_rng(seed)
    return [sorted(rng.choice(LABELS, size=int(rng.choice([1, 2, 3], p=[0.5, 0.35, 0.15])), replace=False,
                              p=[0.4, 0.3, 0.2, 0.1])) for _ in range(n)]


def corpus(sets: list[list[str]], groups: list[str] | None = None, prefix: str = "d") -> pd.DataFrame:
    """A corpus as ingest writes it (the columns split reads), a group's key its name."""
    ids = [f"{prefix}{i:04d}" for i in range(len(sets))]
    group = groups or ids
    return pd.DataFrame({"doc_id": ids, "label": [canonical(s) for s in sets], "content_hash": ["h-" + i for i in ids],
                         "group": group, "split_key": ["k-" + g for g in group],
                         "source_path": [f"t.jsonl:{i + 1}" for i in range(len(sets))]})


def write(frame: pd.DataFrame, path, multilabel: bool = True):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({TASK_KEY: b"multilabel"} if multilabel else None), path)
    return path


def split_stage(tmp_path, corpus_path, method: str = "stable") -> tuple[pd.DataFrame, dict]:
    params = write_params(tmp_path / "params.yaml", split={"method": method})
    paths = SplitPaths(str(params), str(corpus_path), str(tmp_path / "s.parquet"), str(tmp_path / "c.json"))
    run_split(paths)
    return pd.read_parquet(paths.splits), json.loads((tmp_path / "c.json").read_text())


def splits_per_label(out: pd.DataFrame) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for label, split in zip(out["label"], out["split"]):
        for one in labels_of(label):
            found.setdefault(one, set()).add(split)
    return found


WORDS = [f"w{i}" for i in range(2000)]


def family_texts(rng: np.random.Generator, size: int) -> list[str]:
    """A story and size - 1 edited copies (two words changed: Jaccard ~0.7, one near-duplicate group)."""
    base = list(rng.choice(WORDS, 60))
    copies = [base]
    for _ in range(size - 1):
        edited = list(base)
        for at in rng.choice(60, 2, replace=False):
            edited[at] = str(rng.choice(WORDS))
        copies.append(edited)
    return [" ".join(words) for words in copies]


@pytest.mark.parametrize("method", ["stable", "stratified_shuffle"])
def test_an_ingested_multilabel_corpus_splits_with_every_label_everywhere_and_groups_whole(tmp_path, method):
    rng = np.random.default_rng(0)
    rows = []
    for n, labels in enumerate(random_sets(90, seed=1)):
        rows += [{"text": t, "label": labels} for t in family_texts(rng, 3 if n % 6 == 0 else 1)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_corpus(tmp_path / "t.jsonl", tmp_path / "c.parquet", 1_000_000, 1, NearDuplicateParams(),
                 Columns(multilabel=True))
    out, counts = split_stage(tmp_path, tmp_path / "c.parquet", method)
    assert (out["group"].value_counts() > 1).sum() >= 10  # the families were found
    assert out.groupby("group")["split"].nunique().max() == 1  # and none straddles two splits
    assert splits_per_label(out) == {label: set(SPLITS) for label in LABELS}
    assert counts["task"] == "multilabel" and sum(counts["documents"].values()) == len(out) == len(rows)


def test_the_stable_split_of_a_grown_corpus_moves_no_document_but_counted_repairs():
    old = corpus(random_sets(300, seed=2))
    added = corpus(random_sets(30, seed=3), prefix="new")
    before, moves_before = split_corpus(old, FRACTIONS, 7, "stable", multilabel=True)
    after, moves_after = split_corpus(pd.concat([old, added]), FRACTIONS, 7, "stable", multilabel=True)
    side = after.set_index("doc_id")["split"][before["doc_id"]].to_numpy()
    changed = set(before["group"][side != before["split"].to_numpy()])
    assert changed <= {m["group"] for m in moves_before + moves_after} and len(after) == 330
    # the iterative stratification reshuffles: what the stable split exists to avoid
    shuffled = [split_corpus(c, FRACTIONS, 7, "stratified_shuffle", multilabel=True)[0]
                for c in (old, pd.concat([old, added]))]
    assert (shuffled[1].set_index("doc_id")["split"][before["doc_id"]].to_numpy()
            != shuffled[0]["split"].to_numpy()).sum() > 10


def test_a_label_missing_a_split_is_repaired_with_a_counted_move_that_strips_no_other_label():
    frame = corpus(random_sets(200, seed=4) + [["rare", "sport"]] * 5)
    rare = frame[frame["label"] == canonical(["rare", "sport"])]

    def raw(seed: int) -> list[str]:  # the rare groups' sides before any repair
        return [SPLITS[i] for i in _cut(np.array([bucket(k, seed) for k in rare["split_key"]]), FRACTIONS)]
    seed = next(s for s in range(200) if len(set(raw(s))) == 2)
    out, moves = split_corpus(frame, FRACTIONS, seed, "stable", multilabel=True)
    missing = next(s for s in SPLITS if s not in raw(seed))
    assert [(m["label"], m["to"]) for m in moves] == [("rare", missing)]
    assert splits_per_label(out)["rare"] == set(SPLITS)
    others = out[~out["group"].isin([m["group"] for m in moves])]
    raw_all = [SPLITS[i] for i in _cut(np.array([bucket(k, seed) for k in "k-" + others["group"]]), FRACTIONS)]
    assert others["split"].tolist() == raw_all  # nothing else moved
    assert moves == split_corpus(frame, FRACTIONS, seed, "stable", multilabel=True)[1]  # deterministic


def test_the_nearest_group_is_not_moved_when_its_split_would_lose_another_of_its_labels():
    sets = pd.Series({"g1": ("x", "y"), "g2": ("x",), "g3": ("x",), "g4": ("y",), "g5": ("y",), "g6": ("x",)})
    places = pd.Series({"g1": 0.80, "g2": 0.50, "g3": 0.10, "g4": 0.20, "g5": 0.90, "g6": 0.75})
    split_of = pd.Series(_cut(places.to_numpy(), FRACTIONS), index=places.index)  # x in no test group
    # g1 is nearest to test, and validation keeps x without it (g6), but not y: g6 moves
    assert _repair(sets, places, split_of, FRACTIONS) == [
        {"group": "g6", "label": "x", "from": "validation", "to": "test"}]
    assert split_of.map(lambda i: SPLITS[i]).to_dict() == {
        "g1": "validation", "g2": "train", "g3": "train", "g4": "train", "g5": "test", "g6": "test"}


@pytest.mark.parametrize("method", ["stable", "stratified_shuffle"])
def test_a_label_with_too_few_groups_is_named_not_its_label_set(method):
    frame = corpus(random_sets(100, seed=5) + [["rare", "sport"]] * 2)
    with pytest.raises(UserError, match=r"^label 'rare' has 2 documents in 2 near-duplicate group\(s\) "
                                        r"\(largest 1\), too few to give split\(s\)") as err:
        split_corpus(frame, FRACTIONS, 0, method, multilabel=True)
    assert "[" not in str(err.value).split("split(s)")[0]  # 'rare', never '["rare", "sport"]'


@pytest.mark.parametrize("seed", range(3))
def test_the_stratified_shuffle_keeps_each_labels_documents_within_two_of_the_fractions(seed):
    sets = random_sets(360, seed=10 + seed)
    groups = [f"g{i // 2:04d}" if i < 40 else f"s{i:04d}" for i in range(len(sets))]  # 20 pairs
    sets[:40] = [sets[2 * (i // 2)] for i in range(40)]  # a pair shares its label set
    frame = corpus(sets, groups)
    out, moves = split_corpus(frame, FRACTIONS, seed, "stratified_shuffle", multilabel=True)
    assert moves == [] and out.groupby("group")["split"].nunique().max() == 1
    counts = class_counts(out, multilabel=True)
    for label in LABELS:
        total = sum(counts[s][label] for s in SPLITS)
        for split, share in FRACTIONS.items():
            assert abs(counts[split][label] - share * total) <= 2, (label, split)
    again = split_corpus(frame.sample(frac=1, random_state=1), FRACTIONS, seed, "stratified_shuffle",
                         multilabel=True)[0]
    assert again.equals(out)  # a pure function of the corpus and the seed, not of its row order


def test_counts_are_per_label_and_a_single_label_file_keeps_its_keys(tmp_path):
    sets = random_sets(200, seed=6)
    groups = [f"g{i:04d}" for i in range(len(sets))]
    groups[1] = groups[0]  # a group whose documents hold other label sets (conflicts: keep)
    sets[0], sets[1] = ["business"], ["tech"]
    out, counts = split_stage(tmp_path, write(corpus(sets, groups), tmp_path / "c.parquet"))
    assert label_sets(out.set_index("doc_id")["label"], out.set_index("doc_id")["group"])["g0000"] == (
        "business", "tech")
    for split in SPLITS:
        docs = [labels_of(label) for label, s in zip(out["label"], out["split"]) if s == split]
        assert counts[split] == {label: sum(label in d for d in docs) for label in LABELS}
        assert counts["documents"][split] == len(docs)
    assert list(counts) == [*SPLITS, "task", "documents", "method", "repairs"] and counts["task"] == "multilabel"
    single = corpus([[s[0]] for s in sets]).assign(label=lambda f: f["label"].map(lambda x: labels_of(x)[0]))
    (tmp_path / "one").mkdir()
    _, plain = split_stage(tmp_path / "one", write(single, tmp_path / "one" / "c.parquet", multilabel=False))
    assert list(plain) == [*SPLITS, "method", "repairs"]
