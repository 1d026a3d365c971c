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


def run_labels(p, **overrides):
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
