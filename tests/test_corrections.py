"""Corrections as a data version: ingest applies a corrections file (doc,label) to the demo
corpus, accounts for it, keeps each document's split side, and refuses a bad file in one line."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `stages` is not an installed package
    sys.path.insert(0, str(REPO))

from stages import ingest  # noqa: E402
from textclf.errors import UserError  # noqa: E402
from textclf.config import NearDuplicateParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402
from textclf.data.corrections import read_corrections  # noqa: E402
from textclf.data.ingest_report import lost_line  # noqa: E402
from textclf.data.ledger import doc_id  # noqa: E402
from textclf.data.splitting import stable_split  # noqa: E402
from textclf.data.versions import diff, dropped_at_ingest  # noqa: E402

SAMPLE = REPO / "data" / "sample"
MAX, MIN = 1_000_000, 5
FRACTIONS = {"train": 0.7, "validation": 0.15, "test": 0.15}


def corrections(tmp_path: Path, text: str):
    path = tmp_path / "corrections.csv"
    path.write_text(text, encoding="utf-8")
    return read_corrections(path)


def corpus(source: Path = SAMPLE, fixes=None, conflicts: str = "keep"):
    return build_corpus(source, MAX, MIN, NearDuplicateParams(conflicts=conflicts), corrections=fixes)


def test_a_relabel_and_a_drop_are_applied_and_accounted(tmp_path):
    fixes = corrections(tmp_path, f"doc,label\nbusiness/01.txt,tech\n{doc_id('sport/02.txt')},drop\n")
    table, report = corpus(fixes=fixes)
    row = table.set_index("source_path").loc["business/01.txt"]
    assert row["label"] == "tech" and row["doc_id"] == doc_id("business/01.txt")  # same id: the raw file's
    assert "sport/02.txt" not in set(table["source_path"]) and len(table) == 79
    assert report["relabelled_by_corrections"]["count"] == 1
    assert report["relabelled_by_corrections"]["documents"][0] | {} == {
        "path": "business/01.txt", "doc_id": doc_id("business/01.txt"), "label": "business", "row": 2,
        "new_label": "tech"}
    assert report["dropped_by_corrections"]["count"] == 1
    assert report["skipped"] == {"dropped_by_correction": 1}  # counted: files seen = kept + skipped
    assert report["per_class"] == {"business": 15, "entertainment": 16, "politics": 16, "sport": 15, "tech": 17}
    assert report["corrections"]["rows"] == 2 and len(report["corrections"]["md5"]) == 32


def test_documents_dropped_by_corrections_are_no_loss(tmp_path):
    """Dropping 10 of 80 documents is a person's decision: no "ingest dropped ... above 5 %" line."""
    rows = "".join(f"sport/{i:02d}.txt,drop\n" for i in range(1, 11))
    report = corpus(fixes=corrections(tmp_path, "doc,label\n" + rows))[1]
    assert report["skipped"] == {"dropped_by_correction": 10} and lost_line(report) is None


def test_a_header_only_file_changes_nothing(tmp_path):
    """The demo ships data/corrections.csv with its header only: its outputs stay byte-identical."""
    assert corpus(fixes=corrections(tmp_path, "doc,label\n"))[1] == corpus()[1]
    assert (REPO / "data" / "corrections.csv").read_text() == "doc,label\n"


def test_a_corrected_document_keeps_its_split_side_and_the_diff_says_so(tmp_path):
    before, _ = corpus()
    fixes = corrections(tmp_path, "doc,label\nbusiness/01.txt,tech\npolitics/03.txt,sport\n"
                                  "entertainment/04.txt,drop\n")
    after, report = corpus(fixes=fixes)
    old, old_repairs = stable_split(before, FRACTIONS, 42)
    new, new_repairs = stable_split(after, FRACTIONS, 42)
    sides = old.set_index("doc_id")[["split", "group"]].join(new.set_index("doc_id")["split"].rename("now"),
                                                            how="inner")
    assert len(sides) == 79
    for path in ("business/01.txt", "politics/03.txt"):  # the corrected documents stay where they were
        assert sides.loc[doc_id(path), "split"] == sides.loc[doc_id(path), "now"]
    # Only a repair moves others: 16 documents a class, every class must reach every split, and
    # which tech group the repair picks follows tech's members (splitting.py, `repairs`).
    repaired = {r["group"] for r in old_repairs + new_repairs}
    moved = sides[sides["split"] != sides["now"]]
    assert set(moved["group"]) <= repaired and len(moved) == 2
    found = diff(old, new, dropped=dropped_at_ingest(report))
    assert found["relabelled"]["count"] == 2 and found["relabelled"]["per_class"] == {"sport": 1, "tech": 1}
    assert found["removed"]["dropped_at_ingest"]["per_reason"] == {"dropped_by_correction": 1}
    assert found["relabelled"]["by_corrections"] == 2
    assert found["split_moves"]["moved"] == 2


def test_a_document_named_by_its_path_and_its_id_with_one_answer_is_one_correction(tmp_path):
    fixes = corrections(tmp_path, f"doc,label\nbusiness/01.txt,tech\n{doc_id('business/01.txt')},tech\n")
    assert corpus(fixes=fixes)[1]["relabelled_by_corrections"]["count"] == 1  # was: row 3 "names no document"


def test_the_ingest_stage_reads_the_file_it_is_given(tmp_path, caplog):
    (tmp_path / "c.csv").write_text("doc,label\ntech/05.txt,business\ntech/06.txt,drop\n")
    params = tmp_path / "params.yaml"
    params.write_text(f"ingest:\n  source: {json.dumps(str(SAMPLE))}\n")
    caplog.set_level("INFO")
    ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"), "--report",
                 str(tmp_path / "r.json"), "--corrections", str(tmp_path / "c.csv")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["relabelled_by_corrections"]["documents"][0]["new_label"] == "business"
    # the log says what the file did, not only the report
    assert f"corrections {tmp_path / 'c.csv'} (2 rows): 1 relabelled, 1 dropped" in caplog.text


@pytest.mark.parametrize("text, says", [
    ("doc,label\nbusiness/99.txt,tech\n", "row 2 ('business/99.txt') names no document"),
    ("doc,label\nbusiness/01.txt,finance\n", "gives label 'finance', which no class has"),
    ("doc,label\nbusiness/01.txt,tech\nbusiness/01.txt,sport\n", "rows 2 and 3 name 'business/01.txt' with two"),
    (f"doc,label\nbusiness/01.txt,tech\n{doc_id('business/01.txt')},drop\n", "name the same document with two"),
    ("doc,label\nnews/1.txt,tech\nnews/2.txt,tech\nbusiness/01.txt,tech\n", "looks like another corpus"),
    ("doc,label\nbusiness/01.txt,\n", "row 2: label is blank"),
])
def test_a_bad_corrections_file_stops_ingest_in_one_line(tmp_path, text, says):
    with pytest.raises(UserError, match=r"corrections\.csv") as err:
        corpus(fixes=corrections(tmp_path, text))
    assert says in str(err.value) and "\n" not in str(err.value)
    if "which no class has" in says:
        assert "a class folder" in str(err.value)  # how a new class is added


@pytest.mark.parametrize("text, says", [
    ("", "is empty: it needs at least the header line `doc,label`"),
    ("id,new\nbusiness/01.txt,tech\n", "has no column(s) ['doc', 'label']"),
])
def test_an_empty_or_malformed_file_is_refused(tmp_path, text, says):
    with pytest.raises(UserError) as err:
        corrections(tmp_path, text)
    assert says in str(err.value) and "corrections.csv" in str(err.value)
    with pytest.raises(UserError, match="No such file"):
        read_corrections(tmp_path / "absent.csv")


def test_an_uncorrected_exact_copy_is_refused(tmp_path):
    """Otherwise the copy keeps a dropped text in the corpus, or brings its old label back."""
    source = tmp_path / "src"
    shutil.copytree(SAMPLE, source)
    shutil.copy(source / "business" / "01.txt", source / "business" / "17.txt")
    fixes = corrections(tmp_path, "doc,label\nbusiness/01.txt,drop\n")
    with pytest.raises(UserError, match="business/17.txt holds the same text"):
        corpus(source, fixes)
    both = corrections(tmp_path, "doc,label\nbusiness/01.txt,drop\nbusiness/17.txt,drop\n")
    assert corpus(source, both)[1]["dropped_by_corrections"]["count"] == 2


def test_a_multilabel_table_is_corrected_by_row_and_by_id(tmp_path):
    """A table's document is named by its row (file:row) or its id column; a multi-label
    correction joins labels with "|", as the label-issues table does."""
    from textclf.config import NearDuplicateParams
    from textclf.data.tables import Columns
    off = NearDuplicateParams(enabled=False)  # the rows below are near-copies of each other
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = [{"id": f"r{i}", "text": " ".join(words[i:] + words[:i]) + f" document {i}",
             "label": ["x|y", "y", "x|z", "z"][i % 4]} for i in range(12)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    multi = Columns(id="id", multilabel=True, label_delimiter="|")
    fixes = read_corrections(_write(tmp_path, "doc,label\nr1,y|z\nr3,drop\n"), multilabel=True)
    table, report = build_corpus(tmp_path / "t.csv", MAX, 1, off, columns=multi, corrections=fixes)
    assert table.set_index("doc_id").loc[doc_id("r1"), "label"] == '["y", "z"]'
    assert "r3" not in set(table["source_path"]) and report["dropped_by_corrections"]["count"] == 1
    unknown = read_corrections(_write(tmp_path, "doc,label\nr1,y|w\n"), multilabel=True)
    with pytest.raises(UserError, match="gives label 'w', which no class has"):
        build_corpus(tmp_path / "t.csv", MAX, 1, off, columns=multi, corrections=unknown)
    by_row = read_corrections(_write(tmp_path, "doc,label\nt.csv:2,z\n"))
    _, report = build_corpus(tmp_path / "t.csv", MAX, 1, off, columns=Columns(), corrections=by_row)
    assert report["relabelled_by_corrections"]["documents"][0]["path"] == "t.csv:2"


def _write(folder: Path, text: str) -> Path:
    (folder / "fixes.csv").write_text(text)
    return folder / "fixes.csv"


def test_a_relabelled_near_duplicate_whose_group_keeps_the_old_label_is_refused_under_drop(tmp_path):
    """conflicts: drop would drop the corrected document with its near-copy: the correction
    would remove the text it meant to relabel. Under keep (the default) the group stays, with
    two labels, for the label review."""
    source = tmp_path / "src"
    shutil.copytree(SAMPLE, source)
    words = (source / "business" / "01.txt").read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (source / "business" / "17.txt").write_text(" ".join(words), encoding="utf-8")
    with pytest.raises(UserError, match=r"relabels business/01.txt 'tech', but its near-duplicate\(s\) "
                                        r"business/17.txt keep another label"):
        corpus(source, corrections(tmp_path, "doc,label\nbusiness/01.txt,tech\n"), conflicts="drop")
    _, report = corpus(source, corrections(tmp_path, "doc,label\nbusiness/01.txt,tech\nbusiness/17.txt,tech\n"),
                       conflicts="drop")
    assert report["relabelled_by_corrections"]["count"] == 2 and report["skipped"] == {}
    table, report = corpus(source, corrections(tmp_path, "doc,label\nbusiness/01.txt,tech\n"))
    assert report["skipped"] == {} and report["near_duplicates"]["near_duplicate_mixed_groups"] == 1
    pair = table.set_index("source_path").loc[["business/01.txt", "business/17.txt"]]
    assert pair["label"].tolist() == ["tech", "business"] and pair["group"].nunique() == 1
