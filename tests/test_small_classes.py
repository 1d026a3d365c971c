"""ingest.small_classes (issue 39 item 13): a class below ingest.min_per_class stops ingest
(`fail`, the default) naming the param, or with `drop` loses its documents, counted as the
skip reason small_class, each class named with its count in ingest_report.json, logged as a
WARNING, in the report's headline and as a tag of the training run."""
import json
import logging
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest

from stages import ingest

from textclf.errors import UserError
from textclf.config import NearDuplicateParams, parse_section
from textclf.data.class_sizes import _without
from textclf.data.corpus import build_corpus
from textclf.data.tables import Columns

from conftest import REPO, report_with_ingest, write_params

DEMO = REPO / "data" / "sample"
TINY = ["a tiny class: the only two invoices about llama grooming this quarter",
        "a tiny class: a second note on llama grooming fees, paid in advance"]


def demo_rows() -> list[dict]:
    return [{"text": f.read_text(encoding="utf-8", errors="replace"), "label": d.name}
            for d in sorted(p for p in DEMO.iterdir() if p.is_dir()) for f in sorted(d.glob("*.txt"))]


def table(tmp_path, tiny: list[str] = TINY):
    """The demo corpus as a CSV, the tiny class's rows last."""
    path = tmp_path / "t.csv"
    pd.DataFrame(demo_rows() + [{"text": t, "label": "tiny"} for t in tiny]).to_csv(path, index=False)
    return path


def test_a_tiny_class_stops_ingest_by_default_naming_the_param(tmp_path):
    with pytest.raises(UserError, match=r"class\(es\) \{'tiny': 2\} have fewer than ingest.min_per_class=5 "
                                        r"documents .* set ingest.small_classes: drop, or"):
        build_corpus(table(tmp_path), 1_000_000, 5)
    assert parse_section("ingest", {}).small_classes == "fail"
    with pytest.raises(UserError, match="small_classes.*'fail', 'drop'"):
        parse_section("ingest", {"small_classes": "keep"})


def test_drop_drops_the_class_counted_logged_and_the_rest_as_without_it(tmp_path, caplog):
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(table(tmp_path)), "small_classes": "drop"})
    with caplog.at_level(logging.WARNING):
        ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                     "--report", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["skipped"] == {"small_class": 2} and report["dropped_classes"] == {"tiny": 2}
    assert report["rows_seen"] == report["kept"] + 2 and "tiny" not in report["per_class"]
    assert any(r.levelno == logging.WARNING and "{'tiny': 2}" in r.getMessage() for r in caplog.records)
    (tmp_path / "without").mkdir()
    without, _ = build_corpus(table(tmp_path / "without", tiny=[]), 1_000_000, 5)
    assert pd.read_parquet(tmp_path / "c.parquet").equals(without)  # as if its rows were never there


def test_fail_mode_reports_stay_as_they_were(tmp_path):
    _, report = build_corpus(DEMO, 1_000_000, 5)
    assert "dropped_classes" not in report  # the demo's ingest_report.json, bit for bit
    _, report = build_corpus(DEMO, 1_000_000, 5, small_classes="drop")
    assert report["dropped_classes"] == {} and "small_class" not in report["skipped"]


def test_a_class_folder_with_few_or_no_documents_is_dropped_with_its_count(tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(DEMO, root)
    (root / "empty").mkdir()
    (root / "empty" / "blank.txt").write_text("   \n")
    (root / "one").mkdir()
    (root / "one" / "only.txt").write_text(TINY[0])
    corpus, report = build_corpus(root, 1_000_000, 5, small_classes="drop")
    assert report["dropped_classes"] == {"empty": 0, "one": 1}
    assert report["skipped"] == {"empty": 1, "small_class": 1}
    assert sorted(corpus["label"].unique()) == ["business", "entertainment", "politics", "sport", "tech"]


def test_a_multilabel_document_goes_with_its_small_label_which_may_leave_another_short(tmp_path):
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    labels = [["a"]] * 6 + [["b"]] * 6 + [["c", "rare"]] * 2 + [["c"]] * 3
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"text": f"doc {i} " + " ".join(words[(i * k) % 13] for k in range(1, 9)),
                                        "label": lab}) + "\n" for i, lab in enumerate(labels)))
    corpus, report = build_corpus(path, 1_000_000, 5, NearDuplicateParams(enabled=False),
                                  Columns(multilabel=True), small_classes="drop")
    assert report["dropped_classes"] == {"rare": 2, "c": 3}  # c had 5, then 3 once rare's went
    assert report["skipped"] == {"small_class": 5} and report["per_class"] == {"a": 6, "b": 6}
    assert len(corpus) == 12


def test_a_group_whose_first_document_is_dropped_is_led_by_its_first_kept_one(tmp_path):
    order, group_of = np.array([10, 11, 12, 13]), np.array([0, 0, 2, 0])
    kept, groups = _without(order, group_of, np.array([False, True, True, True]))
    assert kept.tolist() == [11, 12, 13] and groups.tolist() == [0, 1, 0]
    kept, groups = _without(order, group_of, np.array([True, False, True, True]))
    assert kept.tolist() == [10, 12, 13] and groups.tolist() == [0, 1, 0]  # a kept leader stays
    # through ingest: near_duplicates.conflicts keep, the tiny class's row leads a mixed group
    near = demo_rows()[0]["text"]
    rows = [{"text": near + " llama", "label": "tiny"}, {"text": near + " llama!", "label": "tiny"}] + demo_rows()
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    corpus, report = build_corpus(path, 1_000_000, 5, NearDuplicateParams(conflicts="keep"), small_classes="drop")
    assert report["dropped_classes"] == {"tiny": 2}
    first = corpus.iloc[0]
    assert first["source_path"] == "t.csv:3" and first["group"] == first["doc_id"]


def test_the_report_headline_and_the_training_run_name_the_dropped_classes(tmp_path, tiny_trained, monkeypatch):
    """The report stage on a trained model's files, its ingest report saying a class was dropped,
    logging into a fresh run of a fresh store (the shared fixture's store stays as it was)."""
    def drop(report: dict) -> None:
        report["skipped"]["small_class"] = 2
        report["dropped_classes"] = {"tiny": 2}

    md, _, run_id = report_with_ingest(tmp_path, tiny_trained, monkeypatch, drop)
    assert md.index("WARNING: ingest dropped 1 class(es) below ingest.min_per_class, 2 documents "
                    "(`ingest.small_classes: drop`): tiny (2)") < md.index("## Data")
    assert mlflow.get_run(run_id).data.tags["ingest.dropped_classes"] == '{"tiny": 2}'
