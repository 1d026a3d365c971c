"""The review loop: `python -m textclf.labelissues review` writes a spreadsheet of the flagged
documents prefilled with the suggestions, `accept` turns the edited sheet into corrections that
ingest applies; conflicts and foreign tables are refused in one line."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from textclf.errors import UserError
from textclf.data.corpus import build_corpus, write_corpus
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
    accept(folder, sheet, fixes)
    # the kept label is a row too, marked kept: remembered, so the next review leaves it out
    written = "doc,label,kept\nbusiness/01.txt,tech,\nsport/02.txt,sport,yes\ntech/03.txt,drop,\n"
    assert fixes.read_text() == written
    accept(folder, sheet, fixes)  # again: nothing new, nothing doubled
    assert fixes.read_text() == written
    _, report = build_corpus(SAMPLE, 1_000_000, 5, corrections=read_corrections(fixes))
    assert report["relabelled_by_corrections"]["count"] == 1 and report["dropped_by_corrections"]["count"] == 1


def test_accept_refuses_a_decision_that_contradicts_the_corrections_file(reviewed):
    folder, sheet, _ = reviewed
    fixes = folder / "corrections.csv"
    fixes.write_text("doc,label\nbusiness/01.txt,entertainment\n")
    with pytest.raises(UserError, match=r"row 2 decides 'tech' for .*corrections.csv row 2 says 'entertainment'"):
        accept(folder, sheet, fixes)
    assert fixes.read_text() == "doc,label\nbusiness/01.txt,entertainment\n"  # nothing written


def test_accept_refuses_a_sheet_that_gives_one_document_two_labels_naming_both_rows(reviewed):
    """Issue 60, defect 1: decisions are keyed by document, so the second row overwrote the
    first and the last row won without a word."""
    folder, sheet, _ = reviewed
    table = pd.read_csv(sheet)
    table.loc[table["source_path"] == "sport/02.txt", "label"] = "sport"
    twice = table[table["source_path"] == "business/01.txt"].assign(label="entertainment")
    pd.concat([table, twice]).to_csv(sheet, index=False)  # business/01.txt: row 2 says tech, row 5 entertainment
    fixes = folder / "corrections.csv"
    with pytest.raises(UserError, match=r"rows 2 and 5 decide business/01.txt two ways \('tech' / 'entertainment'\)"):
        accept(folder, sheet, fixes)
    assert not fixes.exists()
    pd.concat([table, twice.assign(label="tech")]).to_csv(sheet, index=False)  # twice the same answer: one row
    accept(folder, sheet, fixes)
    assert pd.read_csv(fixes)["doc"].tolist().count("business/01.txt") == 1


def test_accept_refuses_a_decision_that_names_no_document(reviewed):
    folder, sheet, _ = reviewed
    table = pd.read_csv(sheet)
    table.loc[0, "source_path"] = None
    table.to_csv(sheet, index=False)
    with pytest.raises(UserError, match="row 2 decides 'tech' but names no document"):
        accept(folder, sheet, folder / "corrections.csv")
    assert not (folder / "corrections.csv").exists()


def accept(folder: Path, sheet: Path, fixes: Path, *options: str) -> None:
    main(["accept", str(sheet), "--corrections", str(fixes), "--corpus", str(folder / "corpus.parquet"),
          "--params", str(folder / "params.yaml"), *options])


def test_accept_reads_the_params_file_as_the_stages_do(reviewed):
    """Issue 62: accept read ingest.near_duplicates.conflicts as raw YAML with a default of its
    own; through textclf.config, a value ingest would refuse is refused here, before a write."""
    folder, sheet, _ = reviewed
    (folder / "params.yaml").write_text("ingest:\n  near_duplicates:\n    conflicts: dorp\n")
    with pytest.raises(UserError, match=r"conflicts='dorp' must be one of \['drop', 'keep'\]"):
        accept(folder, sheet, folder / "corrections.csv", "--all-suggestions")
    assert not (folder / "corrections.csv").exists()


def test_an_unedited_sheet_is_not_taken_unread(reviewed):
    """A sheet exactly as review prefilled it would write every suggestion as a relabel
    (2 019 on a real corpus) without a word: refused, unless asked for."""
    folder, sheet, _ = reviewed
    fixes = folder / "corrections.csv"
    with pytest.raises(UserError, match=r"its 3 relabels are the suggestions exactly as `review` prefilled .*"
                                        r"--all-suggestions"):
        accept(folder, sheet, fixes)
    assert not fixes.exists()
    accept(folder, sheet, fixes, "--all-suggestions")
    assert len(pd.read_csv(fixes)) == 3


def test_accept_checks_every_row_against_the_corpus_and_names_every_problem_at_once(reviewed):
    """A label no class has, a document the corpus does not hold, a row with a field too many:
    accept said "dvc repro applies them" and ingest then stopped, one row per run."""
    folder, sheet, _ = reviewed
    fixes = folder / "corrections.csv"
    fixes.write_text("doc,label\n")
    table = pd.read_csv(sheet)
    table.loc[0, "label"] = "weather"
    table.loc[1, ["doc_id", "source_path"]] = ["0000000000000000", "sport/99.txt"]
    table.to_csv(sheet, index=False)
    with sheet.open("a") as fh:
        fh.write(",".join(table.fillna("").astype(str).iloc[2].tolist()) + ",an extra field\n")
    with pytest.raises(UserError) as err:
        accept(folder, sheet, fixes)
    message = str(err.value)
    assert "3 decision(s) ingest would refuse, so nothing was written" in message and "\n" not in message
    assert "row 2: label 'weather' is no class of the corpus" in message
    assert "row 3: sport/99.txt is not in the corpus" in message
    assert "row 5 has more fields than the header" in message
    assert fixes.read_text() == "doc,label\n"


def test_accept_applies_ingests_rules_for_copies_and_near_duplicate_groups(tmp_path):
    """An exact copy (dropped by ingest as a duplicate) left with the old answer, and under
    conflicts: drop a near-duplicate left with the old label, stop ingest: accept gives the
    copy its text's answer, and names the near-duplicate first."""
    source = tmp_path / "src"
    shutil.copytree(SAMPLE, source)
    words = (source / "business" / "01.txt").read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (source / "business" / "near.txt").write_text(" ".join(words), encoding="utf-8")
    shutil.copy(source / "sport" / "02.txt", source / "sport" / "copy.txt")
    (tmp_path / "data").mkdir()
    report = write_corpus(source, tmp_path / "data" / "corpus.parquet", 1_000_000, 5)
    (tmp_path / "data" / "ingest_report.json").write_text(json.dumps(report.to_json()))  # as ingest writes it
    corpus = pd.read_parquet(tmp_path / "data" / "corpus.parquet")
    issues = write_issues(corpus, tmp_path / "issues.parquet", {"business/01.txt": "tech", "sport/02.txt": "politics"})
    sheet, fixes = tmp_path / "review.csv", tmp_path / "corrections.csv"
    main(["review", "--issues", str(issues), "--corpus", str(tmp_path / "data" / "corpus.parquet"), "--out", str(sheet)])
    options = ["--corpus", str(tmp_path / "data" / "corpus.parquet"), "--params", str(tmp_path / "params.yaml"),
               "--all-suggestions"]
    (tmp_path / "params.yaml").write_text("ingest:\n  near_duplicates:\n    conflicts: drop\n")
    with pytest.raises(UserError, match=r"row \d: relabels business/01.txt, but its near-duplicate "
                                        r"business/near.txt keeps 'business'"):
        main(["accept", str(sheet), "--corrections", str(fixes), *options])
    (tmp_path / "params.yaml").write_text("ingest:\n  near_duplicates:\n    conflicts: keep\n")
    main(["accept", str(sheet), "--corrections", str(fixes), *options])
    written = pd.read_csv(fixes).set_index("doc")["label"].to_dict()
    assert written == {"business/01.txt": "tech", "sport/02.txt": "politics", "sport/copy.txt": "politics"}
    build_corpus(source, 1_000_000, 5, corrections=read_corrections(fixes))  # ingest takes it


def near_copy_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """The demo corpus with business/near.txt, a near-duplicate of business/01.txt, under
    conflicts: drop -> (the source, the corpus as ingest wrote it)."""
    source = tmp_path / "src"
    shutil.copytree(SAMPLE, source)
    words = (source / "business" / "01.txt").read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (source / "business" / "near.txt").write_text(" ".join(words), encoding="utf-8")
    (tmp_path / "data").mkdir()
    write_corpus(source, tmp_path / "data" / "corpus.parquet", 1_000_000, 5)
    (tmp_path / "params.yaml").write_text("ingest:\n  near_duplicates:\n    conflicts: drop\n")
    return source, tmp_path / "data" / "corpus.parquet"


@pytest.mark.parametrize("drop_in", ["sheet", "corrections file"])
def test_accept_takes_a_relabel_whose_near_duplicate_is_dropped_as_ingest_does(tmp_path, drop_in):
    """Issue 60, defect 4: relabelling a document and dropping its near-duplicate leaves ingest
    no mixed group to drop (conflicts: drop), yet accept said "the near-duplicate keeps 'business'"."""
    from textclf.config import NearDuplicateParams
    source, corpus = near_copy_corpus(tmp_path)
    issues = write_issues(pd.read_parquet(corpus), tmp_path / "issues.parquet", {"business/01.txt": "tech"})
    sheet, fixes = tmp_path / "review.csv", tmp_path / "corrections.csv"
    main(["review", "--all", "--issues", str(issues), "--corpus", str(corpus), "--out", str(sheet)])
    table = pd.read_csv(sheet).assign(label="")
    table.loc[table["source_path"] == "business/01.txt", "label"] = "tech"
    if drop_in == "sheet":
        table.loc[table["source_path"] == "business/near.txt", "label"] = "drop"
    else:
        fixes.write_text("doc,label\nbusiness/near.txt,drop\n")
    table.to_csv(sheet, index=False)
    main(["accept", str(sheet), "--corrections", str(fixes), "--corpus", str(corpus),
          "--params", str(tmp_path / "params.yaml")])
    assert pd.read_csv(fixes).set_index("doc")["label"].to_dict() == {"business/01.txt": "tech",
                                                                      "business/near.txt": "drop"}
    fixed, _ = build_corpus(source, 1_000_000, 5, NearDuplicateParams(conflicts="drop"),
                            corrections=read_corrections(fixes))  # ingest takes it too
    assert fixed.set_index("source_path").loc["business/01.txt", "label"] == "tech"


def test_a_kept_label_is_remembered_and_the_next_review_leaves_it_out(reviewed):
    folder, sheet, _ = reviewed
    fixes = folder / "corrections.csv"
    table = pd.read_csv(sheet)
    table["label"] = table["given"]  # the person keeps every given label
    table.to_csv(sheet, index=False)
    accept(folder, sheet, fixes)
    again = folder / "again.csv"
    main(["review", "--issues", str(folder / "issues.parquet"), "--corpus", str(folder / "corpus.parquet"),
          "--out", str(again), "--corrections", str(fixes)])
    assert pd.read_csv(again).empty


def test_review_pairs_each_snippet_with_its_document_whatever_the_tables_order(reviewed, tmp_path):
    folder, _, corpus = reviewed
    issues = pd.read_parquet(folder / "issues.parquet")
    issues["flagged"] = True
    issues["quality"] = np.linspace(0.9, 0.1, len(issues))  # the worst last: the sheet reverses it
    issues.iloc[::-1].set_index(issues.index * 7).to_parquet(folder / "shuffled.parquet")
    main(["review", "--issues", str(folder / "shuffled.parquet"), "--corpus", str(folder / "corpus.parquet"),
          "--out", str(tmp_path / "s.csv")])
    sheet = pd.read_csv(tmp_path / "s.csv")
    texts = corpus.set_index("doc_id")["text"].map(lambda t: " ".join(t.split())[:200])
    assert (sheet["snippet"] == texts.loc[sheet["doc_id"]].to_numpy()).all()
    assert sheet["quality"].is_monotonic_increasing


def test_the_multilabel_loop_review_accept_ingest(tmp_path):
    """review writes a label set as a|b (not the corpus's JSON list), accept takes either form and
    stores a kept set as a keep, and ingest applies what accept wrote."""
    from textclf.config import NearDuplicateParams
    from textclf.data.corpus import write_corpus
    from textclf.data.tables import Columns
    off, multi = NearDuplicateParams(enabled=False), Columns(id="id", multilabel=True, label_delimiter="|")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = [{"id": f"r{i}", "text": " ".join(words[i:] + words[:i]) + f" document {i}",
             "label": ["x|y", "y", "x|z", "z"][i % 4]} for i in range(12)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    write_corpus(tmp_path / "t.csv", tmp_path / "corpus.parquet", 1_000_000, 1, off, multi)
    corpus = pd.read_parquet(tmp_path / "corpus.parquet")
    by_id = corpus.set_index("source_path")
    issues = write_issues(corpus, tmp_path / "issues.parquet", {by_id.index[1]: '["y", "z"]',
                                                                by_id.index[2]: '["x"]'})
    sheet, fixes = tmp_path / "review.csv", tmp_path / "corrections.csv"
    main(["review", "--issues", str(issues), "--corpus", str(tmp_path / "corpus.parquet"), "--out", str(sheet)])
    table = pd.read_csv(sheet)
    assert table["suggested"].tolist() == ["y|z", "x"] and table["given"].tolist() == ["y", "x|z"]
    table.loc[1, "label"] = "z|x"  # the person keeps the given set, written the other way round
    table.to_csv(sheet, index=False)
    accept(tmp_path, sheet, fixes)
    assert fixes.read_text() == f"doc,label,kept\n{by_id.index[1]},y|z,\n{by_id.index[2]},x|z,yes\n"
    fixed, report = build_corpus(tmp_path / "t.csv", 1_000_000, 1, off, columns=multi,
                                 corrections=read_corrections(fixes, multilabel=True))
    assert fixed.set_index("source_path").loc[by_id.index[1], "label"] == '["y", "z"]'
    assert report["relabelled_by_corrections"]["count"] == 1  # the keep changes nothing


def test_review_refuses_a_table_of_another_data_version(reviewed, tmp_path):
    folder, _, corpus = reviewed
    other = corpus.assign(doc_id=corpus["doc_id"].str[::-1])
    issues = write_issues(other, tmp_path / "other.parquet", {"business/01.txt": "tech"})
    with pytest.raises(UserError, match="does not hold"):
        main(["review", "--issues", str(issues), "--corpus", str(folder / "corpus.parquet"),
              "--out", str(tmp_path / "x.csv")])
    with pytest.raises(UserError, match="has no column"):
        main(["accept", str(write_csv(tmp_path)), "--corpus", str(folder / "corpus.parquet")])


def write_csv(folder: Path) -> Path:
    path = folder / "not_a_review.csv"
    path.write_text("a,b\n1,2\n")
    return path


def test_the_command_runs_as_a_module(tmp_path):
    import subprocess
    out = subprocess.run([sys.executable, "-m", "textclf.labelissues", "review", "--issues",
                          str(tmp_path / "absent.parquet")], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1 and "`dvc repro labels` writes it" in out.stderr
