"""Stage labels (docs/label_issues.md): planted wrong labels are found through the real stages
(ingest, split, baseline, labels); the table keeps issue 40's contract; bad input gets one line."""
import shutil

import numpy as np
import pandas as pd
import pytest

from stages import labels as labels_stage
from textclf.common import UserError
from textclf.evaluate.label_issues import COLUMNS

from conftest import REPO, ingest_tokenize_split, run_baseline, write_params

PLANTED = 8  # of the demo's 80 documents (10 %), each moved to another class folder


def plant(dst, seed: int = 0) -> set[str]:
    """A copy of the demo corpus with PLANTED files moved to a random other class folder ->
    their source paths as ingest writes them (class/file)."""
    shutil.copytree(REPO / "data" / "sample", dst)
    rng = np.random.default_rng(seed)
    classes = sorted(p.name for p in dst.iterdir())
    files = sorted(dst.glob("*/*.txt"))
    moved = set()
    for i in rng.choice(len(files), PLANTED, replace=False):
        src = files[i]
        to = rng.choice([c for c in classes if c != src.parent.name])
        target = dst / to / f"planted-{src.parent.name}-{src.name}"  # renamed: no collision
        src.rename(target)
        moved.add(f"{to}/{target.name}")
    return moved


def run_labels(p):
    labels_stage.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--predictions", "bp.parquet",
                           "--table", "li.parquet", "--summary", "li.json"])
    return pd.read_parquet("li.parquet")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """ingest, split and baseline on the planted corpus, then the labels stage (the baseline
    stage's test predictions stand in for the model's: the same columns)."""
    tmp = tmp_path_factory.mktemp("planted")
    moved = plant(tmp / "sample")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        p = ingest_tokenize_split(write_params(tmp / "params.yaml", ingest={"source": str(tmp / "sample")},
                                               tokenize={"max_length": 64}))
        run_baseline(p)
        table = run_labels(p)
    return tmp, moved, table


def test_flagged_documents_are_mostly_the_planted_ones(planted):
    _, moved, table = planted
    flagged = set(table.loc[table["flagged"], "source_path"])
    assert len(flagged & moved) >= 0.75 * len(moved), (sorted(flagged), sorted(moved))
    clean = len(table) - len(moved)
    assert len(flagged - moved) <= 0.1 * clean, sorted(flagged - moved)


def test_table_keeps_the_contract(planted):
    """One row per corpus document, issue 40's columns and types, most suspect first; the
    test documents judged by both models, the rest by the baseline alone."""
    tmp, _, table = planted
    corpus = pd.read_parquet(tmp / "c.parquet", columns=["doc_id", "source_path", "label"])
    assert list(table.columns) == COLUMNS
    assert sorted(table["doc_id"]) == sorted(corpus["doc_id"])
    assert table.merge(corpus, on="doc_id").eval("given == label and source_path_x == source_path_y").all()
    assert table["quality"].between(0, 1).all() and table["quality"].is_monotonic_increasing
    assert table["flagged"].dtype == bool and set(table["split"]) == {"train", "validation", "test"}
    test_ids = set(pd.read_parquet(tmp / "bp.parquet")["doc_id"])
    assert (table["judged_by"] == np.where(table["doc_id"].isin(test_ids), "baseline+model", "baseline")).all()
    assert set(table["suggested"]) <= set(table["given"])


def test_summary_counts_what_the_table_holds(planted):
    import json

    tmp, _, table = planted
    summary = json.loads((tmp / "li.json").read_text())
    assert summary["flagged"] == table["flagged"].sum() == sum(summary["flagged_by_split"].values())
    assert summary["label_noise"] == ("warn" if summary["estimated_noise"] > summary["noise_warn"] else "pass")
    test = table[table["split"] == "test"]
    assert summary["test"]["documents"] == len(test) and summary["test"]["flagged"] == test["flagged"].sum()
    assert sum(c["documents"] for c in summary["per_class"].values()) == len(table)


def test_more_folds_than_groups_is_one_line(planted, monkeypatch):
    tmp, _, _ = planted
    monkeypatch.chdir(tmp)
    params = write_params(tmp / "params_folds.yaml", labels={"folds": 50})
    corpus = pd.read_parquet("c.parquet")
    corpus.assign(group=corpus["group"].iloc[0]).iloc[:40].to_parquet("c_one_group.parquet")
    with pytest.raises(UserError, match="labels.folds=50 but the corpus holds 1 document group"):
        labels_stage.main(["--params", str(params), "--corpus", "c_one_group.parquet", "--splits", "sp.parquet",
                           "--predictions", "bp.parquet", "--table", "x.parquet", "--summary", "x.json"])


def test_a_multilabel_corpus_is_refused_in_one_line(planted, monkeypatch):
    """Not built yet: said so, instead of judging label sets as single labels."""
    import pyarrow.parquet as pq

    from textclf.data.labelsets import task_metadata

    tmp, _, _ = planted
    monkeypatch.chdir(tmp)
    table = pq.read_table("c.parquet")
    pq.write_table(table.replace_schema_metadata(task_metadata(True)), "c_multi.parquet")
    with pytest.raises(UserError, match="label issues for multi-label corpora are not built yet"):
        labels_stage.main(["--params", "params.yaml", "--corpus", "c_multi.parquet", "--splits", "sp.parquet",
                           "--predictions", "bp.parquet", "--table", "x.parquet", "--summary", "x.json"])
