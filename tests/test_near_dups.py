"""Near-duplicate groups at ingest and the group-aware split, on real BBC articles where
the grouping's accuracy matters."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from stages import ingest
from textclf.config import NearDuplicateParams
from textclf.data.corpus import build_corpus
from textclf.data.near_dups import (MAX_MISS, SKETCH_MISS, candidate_pairs, find_groups, lsh_bands,
                                    min_agreement, shingle_hashes, shingles)
from textclf.data.splitting import allocate, stable_split, stratified_split

from conftest import BBC, REPO, write_params

needs_bbc = pytest.mark.skipif(not BBC.is_dir(), reason=f"BBC corpus not found at {BBC} "
                               "(shared/data/bbc): the grouping is checked on real articles")
FRACTIONS = {"train": 0.7, "validation": 0.15, "test": 0.15}


def bbc_text(rel: str) -> str:
    return (BBC / rel).read_bytes().decode("cp1252" if rel == "sport/199.txt" else "utf-8")


def write_corpus(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def exact_groups(texts: list[str], threshold: float, size: int = 5) -> np.ndarray:
    """Connected components of every pair with Jaccard >= threshold, by brute force on the
    shingle strings themselves (no MinHash, no hashing)."""
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, text in enumerate(texts):
        for s in set(shingles(text, size)):
            rows.append(i)
            cols.append(vocab.setdefault(s, len(vocab)))
    x = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(texts), len(vocab)))
    inter = (x @ x.T).tocoo()
    sizes = np.asarray(x.sum(axis=1)).ravel()
    similar = inter.data / (sizes[inter.row] + sizes[inter.col] - inter.data) >= threshold
    graph = sparse.coo_matrix((np.ones(similar.sum()), (inter.row[similar], inter.col[similar])),
                              shape=inter.shape)
    return connected_components(graph, directed=False)[1]


def same_partition(a, b) -> bool:
    pairs = pd.DataFrame({"a": a, "b": b}).drop_duplicates()
    return pairs["a"].is_unique and pairs["b"].is_unique


@pytest.fixture(scope="module")
def bbc():
    if not BBC.is_dir():
        pytest.skip(f"BBC corpus not found at {BBC} (shared/data/bbc)")
    return build_corpus(BBC, 1_000_000, 5)


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_lsh_groups_equal_brute_force_groups_on_bbc(bbc, threshold):
    frame, _ = bbc
    found = find_groups(frame["text"].tolist(), NearDuplicateParams(threshold=threshold))
    assert same_partition(found.group_of, exact_groups(frame["text"].tolist(), threshold))


@pytest.mark.slow
def test_bbc_near_duplicates_reported_and_never_split(bbc):
    frame, report = bbc
    nd = report["near_duplicates"]
    # Figures measured by brute force: 68 pairs at Jaccard >= 0.5, no two sharing a document.
    assert nd["groups"] == 68 and nd["group_sizes"] == {"2": 68} and nd["linked_pairs"] == 68
    assert nd["mixed_label_groups"] == [] and report["kept"] == 2125
    top = nd["top_pairs"]
    assert top[0] == {"a": "tech/153.txt", "b": "tech/185.txt", "jaccard": 0.9982}
    assert len(top) == 20 and [p["jaccard"] for p in top] == sorted((p["jaccard"] for p in top), reverse=True)
    assert (frame["group"] != frame["doc_id"]).sum() == 68
    in_groups = frame[frame.duplicated("group", keep=False)]
    for seed in range(7):
        split = stratified_split(frame, FRACTIONS, seed)
        assert split[split["group"].isin(in_groups["group"])].groupby("group")["split"].nunique().max() == 1
        # Each split within a few documents of its share: groups here hold two documents.
        for name, n in allocate(len(frame), FRACTIONS).items():
            assert abs((split["split"] == name).sum() - n) <= 5, (seed, name)


@pytest.mark.slow
def test_the_pages_bbc_split_sizes_are_each_methods(bbc):
    """docs/near_duplicates.md gives the default (stable) split's sizes and stratified_shuffle's;
    it once gave only the latter's, under the default's name."""
    frame, _ = bbc
    stable, _ = stable_split(frame, FRACTIONS, 42)
    sizes = {name: [int((s["split"] == n).sum()) for n in ("train", "validation", "test")]
             for name, s in (("stable", stable), ("stratified_shuffle", stratified_split(frame, FRACTIONS, 42)))}
    assert sizes == {"stable": [1481, 319, 325], "stratified_shuffle": [1487, 321, 317]}
    page = (REPO / "docs" / "near_duplicates.md").read_text()
    assert "1481 / 319 / 325" in page and "1487 / 321 / 317" in page


@needs_bbc
@pytest.mark.slow
def test_variant_families_form_one_group_each_and_unrelated_articles_none(tmp_path):
    # 12 BBC articles, none a near-duplicate of another, each in 3 copies that differ by a
    # `variant k` line, plus 12 other articles once: 12 groups of 3, nothing else grouped.
    articles = [f"{c}/{n:03d}.txt" for c in ("business", "sport", "tech") for n in range(1, 9)]
    files = {}
    for rel in articles[:12]:
        for k in range(1, 4):
            files[rel.replace(".txt", f"_v{k}.txt")] = f"{bbc_text(rel)}\nvariant {k}\n"
    files.update({rel: bbc_text(rel) for rel in articles[12:]})
    frame, report = build_corpus(write_corpus(tmp_path / "c", files), 1_000_000, 1)
    family = frame["source_path"].str.replace(r"_v\d\.txt$", ".txt", regex=True)
    assert same_partition(frame["group"], family)
    assert report["near_duplicates"]["group_sizes"] == {"3": 12}
    assert all(p["jaccard"] > 0.95 for p in report["near_duplicates"]["top_pairs"])


@needs_bbc
def test_threshold_param_changes_what_is_grouped(tmp_path):
    # Jaccard 0.60 (an edited re-post) and 0.94 (a lightly edited copy), from BBC.
    rels = ["sport/424.txt", "sport/511.txt", "politics/212.txt", "politics/329.txt",
            "sport/001.txt", "politics/001.txt"]
    source = write_corpus(tmp_path / "c", {rel: bbc_text(rel) for rel in rels})

    def groups(threshold: float) -> list[list[str]]:
        params = write_params(tmp_path / f"p{threshold}.yaml", ingest={
            "source": str(source), "min_per_class": 1,
            "near_duplicates": {"threshold": threshold}})
        ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                     "--report", str(tmp_path / "r.json")])
        frame = pd.read_parquet(tmp_path / "c.parquet")
        return sorted(sorted(g) for g in frame.groupby("group")["source_path"].agg(list) if len(g) > 1)

    assert groups(0.5) == [["politics/212.txt", "politics/329.txt"], ["sport/424.txt", "sport/511.txt"]]
    assert groups(0.8) == [["politics/212.txt", "politics/329.txt"]]
    assert groups(1.0) == []


def look_alikes(tmp_path: Path) -> Path:
    """The demo corpus plus a near-copy of business/01.txt filed under tech (one word changed),
    and an exact copy of sport/02.txt filed under politics."""
    sample = REPO / "data" / "sample"
    files = {p.relative_to(sample).as_posix(): p.read_text(encoding="utf-8") for p in sample.glob("*/*.txt")}
    words = files["business/01.txt"].split()
    words[len(words) // 2] = "indeed"
    files["tech/near_copy.txt"] = " ".join(words)
    files["politics/exact_copy.txt"] = files["sport/02.txt"]
    return write_corpus(tmp_path / "c", files)


def test_by_default_a_near_duplicate_pair_with_two_labels_is_kept_grouped_and_counted(tmp_path):
    """params.yaml's default (conflicts: keep): the near-copy and its original stay, each with
    its label, in one group and so in one split, counted; the exact copy under another label is
    a real conflict, dropped with its original (conflicting_label) and counted; the report adds up."""
    default = NearDuplicateParams()
    assert default.conflicts == "keep"
    frame, report = build_corpus(look_alikes(tmp_path), 1_000_000, 5, default)
    pair = frame.set_index("source_path").loc[["business/01.txt", "tech/near_copy.txt"]]
    assert pair["label"].tolist() == ["business", "tech"] and pair["group"].nunique() == 1
    nd = report["near_duplicates"]
    assert nd["near_duplicate_mixed_groups"] == 1 and nd["near_duplicate_mixed_documents"] == 2
    assert nd["mixed_label_groups"] == [{"group": pair["group"].iloc[0], "labels": ["business", "tech"],
                                         "paths": ["business/01.txt", "tech/near_copy.txt"], "action": "kept"}]
    assert report["skipped"] == {"conflicting_label": 2}
    assert report["conflicts"][0]["paths"] == ["politics/exact_copy.txt", "sport/02.txt"]
    assert report["files_seen"] == 82 == report["kept"] + 2 and report["kept"] == len(frame) == 80
    split, _ = stable_split(frame, FRACTIONS, seed=42)
    assert split[split["doc_id"].isin(pair["doc_id"])]["split"].nunique() == 1


def test_conflicts_drop_still_drops_the_whole_group(tmp_path):
    frame, report = build_corpus(look_alikes(tmp_path), 1_000_000, 5, NearDuplicateParams(conflicts="drop"))
    assert not frame["source_path"].isin(["business/01.txt", "tech/near_copy.txt"]).any()
    assert report["skipped"] == {"conflicting_label": 2, "near_duplicate_conflict": 2}
    assert report["near_duplicates"]["near_duplicate_mixed_groups"] == 1
    assert report["near_duplicates"]["mixed_label_groups"][0]["action"] == "dropped"
    assert report["files_seen"] == report["kept"] + 4 and report["kept"] == len(frame) == 78


@needs_bbc
@pytest.mark.parametrize("conflicts", ["drop", "keep"])
def test_mixed_label_group_follows_conflicts_policy(tmp_path, conflicts):
    # The same article filed under two labels, once with an extra byline: not an exact
    # duplicate, so only near-duplicate detection sees the conflict.
    story = bbc_text("tech/048.txt")
    files = {"business/story.txt": story, "tech/story.txt": f"By a staff writer\n{story}"}
    files.update({f"{c}/{n:03d}.txt": bbc_text(f"{c}/{n:03d}.txt")
                  for c in ("business", "tech") for n in range(1, 6)})
    source = write_corpus(tmp_path / "c", files)
    frame, report = build_corpus(source, 1_000_000, 5, NearDuplicateParams(conflicts=conflicts))
    (mixed,) = report["near_duplicates"]["mixed_label_groups"]
    assert mixed["labels"] == ["business", "tech"]
    assert sorted(mixed["paths"]) == ["business/story.txt", "tech/story.txt"]
    assert report["files_seen"] == report["kept"] + sum(report["skipped"].values())
    stories = frame[frame["source_path"].str.endswith("story.txt")]
    if conflicts == "drop":
        assert mixed["action"] == "dropped" and stories.empty
        assert report["skipped"] == {"near_duplicate_conflict": 2}
    else:
        assert mixed["action"] == "kept" and len(stories) == 2 and stories["group"].nunique() == 1
        split = stratified_split(frame, {"train": 0.5, "validation": 0.25, "test": 0.25}, seed=0)
        assert split[split["doc_id"].isin(stories["doc_id"])]["split"].nunique() == 1


def test_disabled_detection_gives_every_document_its_own_group(tmp_path):
    source = write_corpus(tmp_path / "c", {f"{c}/{i}.txt": f"{c} text {i} " * 20 + c
                                           for c in ("a", "b") for i in range(3)})
    frame, report = build_corpus(source, 1_000_000, 1, NearDuplicateParams(enabled=False))
    assert (frame["group"] == frame["doc_id"]).all()
    assert report["near_duplicates"] == {"enabled": False}


def test_demo_corpus_has_no_near_duplicates():
    frame, report = build_corpus(REPO / "data" / "sample", 1_000_000, 5)
    assert report["near_duplicates"]["groups"] == 0 and frame["group"].is_unique


def test_short_texts_are_one_shingle():
    assert shingles("a  b\nc", 5) == ["a b c"]
    assert shingles("one two three", 2) == ["one two", "two three"]


@pytest.mark.parametrize("threshold", [0.5, 0.6, 0.8, 0.9, 1.0])
@pytest.mark.parametrize("num_perm", [16, 64, 128, 256])
def test_lsh_banding_misses_a_pair_at_the_threshold_rarely(threshold, num_perm):
    bands = lsh_bands(threshold, num_perm)
    rows = num_perm // bands
    assert num_perm % bands == 0
    assert (1 - threshold ** rows) ** bands <= MAX_MISS or rows == 1
    if num_perm % (2 * rows) == 0:  # one more row per band would miss too often
        assert (1 - threshold ** (2 * rows)) ** (num_perm // (2 * rows)) > MAX_MISS


def test_ingest_report_lists_groups_and_pairs(tmp_path):
    base = " ".join(f"word{i}" for i in range(60))
    files = {"a/1.txt": base, "a/2.txt": base + " extra ending", "a/3.txt": "something else " * 9,
             "b/1.txt": "another topic entirely " * 5, "b/2.txt": "and one more text here " * 4}
    params = write_params(tmp_path / "params.yaml", ingest={
        "source": str(write_corpus(tmp_path / "c", files)), "min_per_class": 2})
    ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                 "--report", str(tmp_path / "r.json")])
    nd = json.loads((tmp_path / "r.json").read_text())["near_duplicates"]
    assert nd["groups"] == 1 and nd["group_sizes"] == {"2": 1}
    assert nd["top_pairs"] == [{"a": "a/1.txt", "b": "a/2.txt", "jaccard": round(56 / 58, 4)}]
    frame = pd.read_parquet(tmp_path / "c.parquet")
    by_path = frame.set_index("source_path")
    assert by_path.loc["a/2.txt", "group"] == by_path.loc["a/1.txt", "doc_id"]  # the first one's id


@pytest.mark.parametrize("script", ["scale/ingest_scale.py", "data/baseline_seeds.py", "data/minhash_libraries.py"])
def test_benchmark_scripts_compile(script):
    """The benchmarks never run here, so at least their scripts must parse."""
    path = REPO / "benchmarks" / script
    compile(path.read_text(), str(path), "exec")


def test_ingest_scale_family_check_catches_a_split_family(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks" / "scale"))
    from ingest_scale import family_check
    bbc_groups = pd.Series({"a/1.txt": "g1", "a/2.txt": "g1", "a/3.txt": "g3"})
    paths = [f"a/{n}_v{k:02d}.txt" for n in (1, 2, 3) for k in (1, 2)]
    good = pd.DataFrame({"source_path": paths, "group": ["x"] * 4 + ["y"] * 2})
    assert family_check(good, bbc_groups) == (0, True)
    split = good.assign(group=["x", "z"] + ["x"] * 2 + ["y"] * 2)  # family a/1 in two groups
    assert family_check(split, bbc_groups) == (1, False)
    merged = good.assign(group=["x"] * 6)  # a/3 joined to a family it is not near
    assert family_check(merged, bbc_groups) == (0, False)


def test_hashed_shingles_are_the_shingle_strings_one_to_one():
    """shingle_hashes stands for shingles(): as many distinct hashes per text as distinct
    shingle strings, and two texts share a hash exactly where they share a shingle."""
    texts = ["a b c d e f g a b c d e", "x y", "c d e f g h i", "one two three four five",
             "b c d e f g a b"]
    hashes, offsets = shingle_hashes(texts, 5)
    sets = [set(hashes[lo:hi].tolist()) for lo, hi in zip(offsets[:-1], offsets[1:])]
    strings = [set(shingles(t, 5)) for t in texts]
    for i in range(len(texts)):
        assert len(sets[i]) == len(strings[i])
        for j in range(len(texts)):
            assert len(sets[i] & sets[j]) == len(strings[i] & strings[j]), (i, j)


def test_candidate_pairs_are_the_rows_equal_on_a_band_and_agreeing_enough():
    """Against brute force over every pair of a small random sketch matrix with planted
    near-copies: equal on some band, and on at least `least` slots overall."""
    rng = np.random.default_rng(0)
    digests = rng.integers(0, 4, size=(60, 8), dtype=np.uint32)  # few values: many collisions
    digests[10] = digests[3]
    digests[20, :6] = digests[7, :6]
    for least in (0, 4, 7):
        want = [(i, j) for i in range(60) for j in range(i + 1, 60)
                if any((digests[i, b:b + 2] == digests[j, b:b + 2]).all() for b in range(0, 8, 2))
                and (digests[i] == digests[j]).sum() >= least]
        got = candidate_pairs(digests, 4, least)
        assert [tuple(p) for p in got.tolist()] == want, least
        assert (3, 10) in want and ((7, 20) in want or least > 6)


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_the_agreement_filter_misses_a_pair_at_the_threshold_less_than_one_in_a_million(threshold):
    from math import comb

    least = min_agreement(threshold, 128)
    below = sum(comb(128, k) * threshold ** k * (1 - threshold) ** (128 - k) for k in range(least))
    assert below <= SKETCH_MISS < below + comb(128, least) * threshold ** least * (1 - threshold) ** (128 - least)
