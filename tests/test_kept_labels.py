"""A label kept at review is a keep, not a correction: it records what it kept, and once the
source itself labels the document otherwise it stops applying, saying so in one line, and the
next review lists the document again (issue 60, defect 2)."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from test_labelissues import SAMPLE, write_issues
from textclf.data.corpus import build_corpus, write_corpus
from textclf.data.corrections import read_corrections
from textclf.data.tables import Columns
from textclf.labelissues import main

BY_ID = Columns(id="id")


def write_table(path: Path, relabel: dict[str, str] | None = None) -> Path:
    """The demo corpus as one CSV (id, text, label), so a document's label can change in the
    source while its id stays; `relabel`: id -> the source's new label."""
    rows = [{"id": f"{p.parent.name}-{p.stem}", "text": p.read_text(encoding="utf-8"), "label": p.parent.name}
            for p in sorted(SAMPLE.glob("*/*.txt"))]
    table = pd.DataFrame(rows)
    table["label"] = [(relabel or {}).get(i, label) for i, label in zip(table["id"], table["label"])]
    table.to_csv(path, index=False)
    return path


def keep_at_review(tmp_path: Path) -> tuple[Path, Path]:
    """sport-02 flagged as politics, the person keeps 'sport' -> (the source, the corrections file)."""
    source = write_table(tmp_path / "t.csv")
    corpus = tmp_path / "corpus.parquet"
    write_corpus(source, corpus, 1_000_000, 5, columns=BY_ID)
    issues = write_issues(pd.read_parquet(corpus), tmp_path / "issues.parquet", {"sport-02": "politics"})
    sheet, fixes = tmp_path / "review.csv", tmp_path / "corrections.csv"
    main(["review", "--issues", str(issues), "--corpus", str(corpus), "--out", str(sheet)])
    pd.read_csv(sheet).assign(label="sport").to_csv(sheet, index=False)
    main(["accept", str(sheet), "--corrections", str(fixes), "--corpus", str(corpus),
          "--params", str(tmp_path / "params.yaml")])
    return source, fixes


def test_a_kept_label_is_recorded_as_kept(tmp_path):
    source, fixes = keep_at_review(tmp_path)
    assert fixes.read_text() == "doc,label,kept\nsport-02,sport,yes\n"
    corpus, report = build_corpus(source, 1_000_000, 5, columns=BY_ID, corrections=read_corrections(fixes))
    assert corpus.set_index("source_path").loc["sport-02", "label"] == "sport"
    assert report["relabelled_by_corrections"]["count"] == 0


def test_a_keep_stops_applying_once_the_source_disagrees(tmp_path, caplog):
    _, fixes = keep_at_review(tmp_path)
    source = write_table(tmp_path / "t.csv", {"sport-02": "politics"})  # the source's own relabel
    with caplog.at_level(logging.WARNING):
        corpus, report = build_corpus(source, 1_000_000, 5, columns=BY_ID, corrections=read_corrections(fixes))
    assert corpus.set_index("source_path").loc["sport-02", "label"] == "politics"  # not put back to 'sport'
    assert report["relabelled_by_corrections"]["count"] == 0  # a correction nobody made is not counted
    assert report["kept_no_longer_applied"]["count"] == 1
    lines = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "row 2 kept 'sport' for sport-02, but the source now labels it 'politics'" in lines[0]

    # the next review lists it again, and a new decision replaces the old keep
    corpus.to_parquet(tmp_path / "corpus.parquet", index=False)
    issues = write_issues(corpus, tmp_path / "issues.parquet", {"sport-02": "sport"})
    sheet = tmp_path / "again.csv"
    main(["review", "--issues", str(issues), "--corpus", str(tmp_path / "corpus.parquet"), "--out", str(sheet),
          "--corrections", str(fixes)])
    table = pd.read_csv(sheet)
    assert table["source_path"].tolist() == ["sport-02"]
    table.assign(label="politics").to_csv(sheet, index=False)  # the person agrees with the source now
    main(["accept", str(sheet), "--corrections", str(fixes), "--corpus", str(tmp_path / "corpus.parquet"),
          "--params", str(tmp_path / "params.yaml")])
    assert fixes.read_text() == "doc,label,kept\nsport-02,politics,yes\n"


def test_a_kept_cell_is_yes_or_blank(tmp_path):
    import pytest
    from textclf.errors import UserError
    fixes = tmp_path / "corrections.csv"
    for bad in ("x.txt,sport,maybe", "x.txt,drop,yes"):
        fixes.write_text(f"doc,label,kept\n{bad}\n")
        with pytest.raises(UserError, match=r"row 2: `kept` is"):
            read_corrections(fixes)
