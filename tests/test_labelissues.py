"""The review loop: `python -m textclf.labelissues review` writes a spreadsheet of the flagged
documents prefilled with the suggestions, `accept` turns the edited sheet into corrections that
ingest applies; conflicts and foreign tables are refused in one line."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from textclf.common import UserError
from textclf.data.corpus import build_corpus
from textclf.data.corrections import read_corrections
from textclf.data.mixed_groups import other_labels
from textclf.labelissues import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample"
SHEET = ["doc_id", "source_path", "split", "given", "suggested", "quality", "group", "group_labels", "snippet",
         "label"]


def write_issues(corpus: pd.DataFrame, path: Path, suspects: dict[str, str]) -> Path:
    """A label-issues table with the shared contract's columns: `suspects` (path -> suggested
    label) flagged with a low quality, every other document unflagged."""
    table = corpus[["doc_id", "source_path"]].assign(split="train", given=corpus["label"])
    table["suggested"] = [suspects.get(p, g) for p, g in zip(table["source_path"], table["given"])]
    table["flagged"] = table["source_path"].isin(suspects)
    table["quality"] = table["flagged"].map({True: 0.05, False: 0.9})
    table["judged_by"] = "baseline"
    table["group"] = corpus["group"]
    table["group_labels"] = other_labels(corpus["group"].to_numpy(), corpus["label"].to_numpy())
    table.sort_values("quality", kind="stable").to_parquet(path, index=False)
    return path


@pytest.fixture
def reviewed(tmp_path) -> tuple[Path, Path, pd.DataFrame]:
    corpus, _ = build_corpus(SAMPLE, 1_000_000, 5)
    corpus.to_parquet(tmp_path / "corpus.parquet", index=False)
    issues = write_issues(corpus, tmp_path / "issues.parquet",
                          {"business/01.txt": "tech", "sport/02.txt": "politics", "tech/03.txt": "business"})
    sheet = tmp_path / "review.csv"
    main(["review", "--issues", str(issues), "--corpus", str(tmp_path / "corpus.parquet"), "--out", str(sheet)])
    return tmp_path, sheet, corpus


def test_review_lists_the_flagged_documents_prefilled_with_the_suggestions(reviewed):
    _, sheet, corpus = reviewed
    table = pd.read_csv(sheet)
    assert list(table.columns) == SHEET and len(table) == 3
    assert (table["label"] == table["suggested"]).all()
    first = table.set_index("source_path").loc["business/01.txt"]
    text = corpus.set_index("source_path").loc["business/01.txt", "text"]
    assert first["given"] == "business" and first["snippet"] == " ".join(text.split())[:200]


def test_review_lists_each_document_of_a_mixed_label_group_with_its_group(tmp_path):
    """A near-copy of a business story filed under tech: ingest keeps both (the default), and
    the review lists them, flagged or not, side by side with their group and the other label."""
    source = tmp_path / "src"
    shutil.copytree(SAMPLE, source)
    words = (source / "business" / "01.txt").read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (source / "tech" / "copy.txt").write_text(" ".join(words), encoding="utf-8")
    corpus, _ = build_corpus(source, 1_000_000, 5)
    corpus.to_parquet(tmp_path / "corpus.parquet", index=False)
    issues = write_issues(corpus, tmp_path / "issues.parquet", {"sport/02.txt": "politics", "tech/copy.txt": "business"})
    sheet = tmp_path / "review.csv"
    main(["review", "--issues", str(issues), "--corpus", str(tmp_path / "corpus.parquet"), "--out", str(sheet)])
    table = pd.read_csv(sheet, keep_default_na=False)
    assert list(table.columns) == SHEET
    group = corpus.set_index("source_path").loc["business/01.txt", "group"]
    # the flagged, worst first (a tie: corpus order), the flagged copy's unflagged near-duplicate beside it
    assert table["source_path"].tolist() == ["sport/02.txt", "tech/copy.txt", "business/01.txt"]
    assert table["group"].tolist() == ["", group, group]
    assert table["group_labels"].tolist() == ["", "business", "tech"]
    everything = tmp_path / "all.csv"
    main(["review", "--all", "--issues", str(issues), "--corpus", str(tmp_path / "corpus.parquet"), "--out",
          str(everything)])
    assert pd.read_csv(everything)["source_path"].tolist()[:3] == ["sport/02.txt", "tech/copy.txt", "business/01.txt"]


def test_accept_writes_the_decisions_that_ingest_applies(reviewed):
    folder, sheet, _ = reviewed
    table = pd.read_csv(sheet)
    table.loc[table["source_path"] == "sport/02.txt", "label"] = "sport"  # the person keeps this label
    table.loc[table["source_path"] == "tech/03.txt", "label"] = "drop"
    table.to_csv(sheet, index=False)
    fixes = folder / "corrections.csv"
    main(["accept", str(sheet), "--corrections", str(fixes)])
    assert fixes.read_text() == "doc,label\nbusiness/01.txt,tech\ntech/03.txt,drop\n"
    main(["accept", str(sheet), "--corrections", str(fixes)])  # again: nothing new, nothing doubled
    assert fixes.read_text() == "doc,label\nbusiness/01.txt,tech\ntech/03.txt,drop\n"
    _, report = build_corpus(SAMPLE, 1_000_000, 5, corrections=read_corrections(fixes))
    assert report["relabelled_by_corrections"]["count"] == 1 and report["dropped_by_corrections"]["count"] == 1


def test_accept_refuses_a_decision_that_contradicts_the_corrections_file(reviewed):
    folder, sheet, _ = reviewed
    fixes = folder / "corrections.csv"
    fixes.write_text("doc,label\nbusiness/01.txt,entertainment\n")
    with pytest.raises(UserError, match=r"row 2 decides 'tech' for .*corrections.csv row 2 says 'entertainment'"):
        main(["accept", str(sheet), "--corrections", str(fixes)])
    assert fixes.read_text() == "doc,label\nbusiness/01.txt,entertainment\n"  # nothing written


def test_accept_refuses_a_decision_that_names_no_document(reviewed):
    folder, sheet, _ = reviewed
    table = pd.read_csv(sheet)
    table.loc[0, "source_path"] = None
    table.to_csv(sheet, index=False)
    with pytest.raises(UserError, match="row 2 decides 'tech' but names no document"):
        main(["accept", str(sheet), "--corrections", str(folder / "corrections.csv")])
    assert not (folder / "corrections.csv").exists()


def test_review_refuses_a_table_of_another_data_version(reviewed, tmp_path):
    folder, _, corpus = reviewed
    other = corpus.assign(doc_id=corpus["doc_id"].str[::-1])
    issues = write_issues(other, tmp_path / "other.parquet", {"business/01.txt": "tech"})
    with pytest.raises(UserError, match="does not hold"):
        main(["review", "--issues", str(issues), "--corpus", str(folder / "corpus.parquet"),
              "--out", str(tmp_path / "x.csv")])
    with pytest.raises(UserError, match="has no column"):
        main(["accept", str(write_csv(tmp_path))])


def write_csv(folder: Path) -> Path:
    path = folder / "not_a_review.csv"
    path.write_text("a,b\n1,2\n")
    return path


def test_the_command_runs_as_a_module(tmp_path):
    import subprocess
    out = subprocess.run([sys.executable, "-m", "textclf.labelissues", "review", "--issues",
                          str(tmp_path / "absent.parquet")], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "`dvc repro labels` writes it" in out.stderr
