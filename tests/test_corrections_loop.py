"""The corrections loop on a real DVC project (a temp copy, the tiny random BERT's tokenizer, the
stages up to split, no training): review file -> `accept` -> data/corrections.csv -> `dvc repro`
reruns ingest -> the data diff says relabelled and removed by the corrections, each corrected
document in its old split."""
import shutil
import subprocess
import sys

import pandas as pd

from conftest import REPO, copy_repo, dvc, write_params
from test_datadiff import commit, datadiff
from test_labelissues import write_issues


def labelissues(repo, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "textclf.labelissues", *args], cwd=repo, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_review_accept_repro_and_the_diff_says_relabelled(tmp_path, tiny_random_bert):
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)})
    dvc(repo, "repro", "split")
    # a repro stages nothing behind the person's back (issue 60, rough edges: core.autostage staged dvc.lock)
    assert subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout == ""
    commit(repo, "data v1", "data-v1")
    splits = repo / "data" / "processed" / "splits.parquet"
    shutil.copy(splits, tmp_path / "v1.parquet")
    corpus = pd.read_parquet(repo / "data" / "interim" / "corpus.parquet")
    issues = write_issues(corpus, tmp_path / "issues.parquet", {"business/01.txt": "tech", "sport/03.txt": "tech"})

    labelissues(repo, "review", "--issues", str(issues), "--out", str(tmp_path / "review.csv"))
    sheet = pd.read_csv(tmp_path / "review.csv")
    sheet.loc[sheet["source_path"] == "sport/03.txt", "label"] = "drop"  # the person's decision
    sheet.to_csv(tmp_path / "review.csv", index=False)
    labelissues(repo, "accept", str(tmp_path / "review.csv"))
    assert (repo / "data" / "corrections.csv").read_text() == "doc,label,kept\nbusiness/01.txt,tech,\nsport/03.txt,drop,\n"

    assert "data/corrections.csv" in dvc(repo, "status", "ingest")  # a dependency: ingest reruns
    dvc(repo, "repro", "split")
    commit(repo, "data v2: corrected", "data-v2")
    shown = datadiff(repo, "data-v1", "data-v2", "--json", str(tmp_path / "diff.json"))
    assert shown.returncode == 0, shown.stderr
    assert "0 added, 1 removed, 1 relabelled, 0 edited" in shown.stdout
    assert "business/01.txt (business -> tech)" in shown.stdout
    assert "sport/03.txt (dropped at ingest: dropped_by_correction)" in shown.stdout
    found = pd.read_json(tmp_path / "diff.json", typ="series")
    assert found["relabelled"]["by_corrections"] == 1

    old, new = (pd.read_parquet(p).set_index("source_path")["split"] for p in (tmp_path / "v1.parquet", splits))
    assert new["business/01.txt"] == old["business/01.txt"]  # the corrected document kept its side
    assert "Data and pipelines are up to date" in dvc(repo, "repro", "split")

