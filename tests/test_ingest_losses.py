"""Documents lost at ingest are said out loud: more than LOST_WARN of what ingest saw is a
WARNING and an alert at the top of the report, whatever the reason (exact duplicates and
hidden files lose no text and are not counted); under it, INFO as before."""
import json
import logging

import pandas as pd

from textclf.config import NearDuplicateParams
from textclf.data.corpus import build_corpus
from textclf.data.ingest_report import LOST_WARN, lost_line
from textclf.data.tables import Columns
from textclf.data.versions import diff, dropped_at_ingest
from textclf.report.document import Alert, Para, to_markdown
from textclf.report.sections import data_version_section, lost_alert

from conftest import report_with_ingest

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()


def text(k: int) -> str:
    """A distinct text per k: no two share a 5-word shingle by accident."""
    return " ".join(f"{WORDS[(k * 7 + i) % len(WORDS)]}{k}x{i}" for i in range(40))


def test_duplicate_ids_removing_half_the_rows_is_a_warning(tmp_path, caplog):
    """Two exports of one table with new texts under the old ids: `duplicate_id` keeps the
    first of each id, so half the rows go. It was an INFO count only."""
    rows = [{"id": f"t{k % 20}", "text": text(k), "label": "ab"[k % 2]} for k in range(40)]
    pd.DataFrame(rows).to_csv(tmp_path / "tickets.csv", index=False)
    with caplog.at_level(logging.INFO):
        _, report = build_corpus(tmp_path / "tickets.csv", 10_000, 2, columns=Columns(id="id"))
    assert report["skipped"] == {"duplicate_id": 20}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == [lost_line(report)]
    assert warned[0].getMessage().startswith("ingest dropped 20 of 40 rows (50.0%, above 5%): duplicate_id 20;")


def test_a_near_duplicate_conflict_drop_warns_above_the_threshold_only(tmp_path, caplog):
    """A near-copy of a document under another class: conflicts: drop removes both. 2 of 40
    files (5 %) is no warning; 2 of 20 (10 %) is, naming the reason."""
    def corpus(n: int):
        root = tmp_path / f"c{n}"
        for k in range(n - 1):
            (root / "ab"[k % 2]).mkdir(parents=True, exist_ok=True)
            (root / "ab"[k % 2] / f"{k:02d}.txt").write_text(text(k), encoding="utf-8")
        copy = text(0).split()
        copy[6] = "changed"
        (root / "b" / "copy.txt").write_text(" ".join(copy), encoding="utf-8")
        return root
    for n, warns in ((40, False), (20, True)):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            _, report = build_corpus(corpus(n), 10_000, 2, NearDuplicateParams(conflicts="drop"))
        assert report["skipped"] == {"near_duplicate_conflict": 2}
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warned == ([f"ingest dropped 2 of {n} files (10.0%, above 5%): near_duplicate_conflict 2; "
                           "the model is trained and tested without them (ingest_report.json names them)."]
                          if warns else [])


def test_the_report_says_so_at_its_top_counting_every_reason_but_duplicates_and_hidden_files():
    report = {"files_seen": 100, "skipped": {"duplicate": 30, "hidden": 30, "empty": 5}}
    assert LOST_WARN == 0.05 and lost_line(report) is None and lost_alert(report) == []  # 5 %: not above
    report["skipped"]["small_class"] = 3  # a reason added later counts, as every reason does
    (alert,) = lost_alert(report)
    assert isinstance(alert, Alert) and alert.text.startswith(
        "ingest dropped 8 of 100 files (8.0%, above 5%): empty 5, small_class 3;")


def test_the_reports_data_diff_says_why_a_removed_document_went():
    old = pd.DataFrame({"doc_id": ["b/1.txt", "b/2.txt"], "label": "b", "content_hash": ["A", "B"],
                        "split": ["test", "train"]})
    new = pd.DataFrame({"doc_id": ["b/2.txt", "c/9.txt"], "label": ["b", "c"], "content_hash": ["B", "C"],
                        "split": ["train", "test"]})
    ingest = {"near_duplicates": {"mixed_label_groups": [
        {"labels": ["b", "s"], "paths": ["b/1.txt", "s/copy.txt"], "action": "dropped"}]}}
    found = {"against_version": 1, **diff(old, new, dropped=dropped_at_ingest(ingest))}
    text = to_markdown(data_version_section(found, None, {}))
    assert "b/1.txt (dropped at ingest: near_duplicate_conflict with s/copy.txt)" in text
    assert ("Of the removed, 1 are still in the source: ingest dropped them (near_duplicate_conflict 1), "
            "e.g. b/1.txt (dropped at ingest: near_duplicate_conflict with s/copy.txt).") in text
    assert any(isinstance(b, Para) for b in data_version_section(found, None, {}))


def test_the_report_stage_puts_the_loss_at_the_top(tmp_path, tiny_trained, monkeypatch):
    """The report stage on a trained model's files whose ingest report lost 20 of 100 files:
    the alert is in the headline area, before the Data section."""
    def lose(report: dict) -> None:
        report["files_seen"] += 20
        report["skipped"]["near_duplicate_conflict"] = 20

    md, report, _ = report_with_ingest(tmp_path, tiny_trained, monkeypatch, lose)
    seen = report["files_seen"]
    assert md.index(f"WARNING: ingest dropped 20 of {seen} files ({20 / seen:.1%}, above 5%): "
                    "near_duplicate_conflict 20;") < md.index("## Data")
