"""ingest.task: multilabel (part 3 of issue 33, its first step): a table's label cell holding
several labels becomes the document's label set, in every table format, and the shape is
never guessed: a list under single_label, a string with no delimiter, a class-folder corpus
and a delimiter without the task each stop in one line naming the param. The stages after it
read label sets: tests/test_multilabel_split.py, tests/test_multilabel.py."""
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textclf.errors import UserError
from textclf.config import NearDuplicateParams, parse_section
from textclf.data.corpus import build_corpus, write_corpus
from textclf.data.labelsets import TASK_KEY
from textclf.data.tables import Columns

from conftest import REPO

ND = NearDuplicateParams(enabled=False)
MULTI = Columns(multilabel=True)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def text(i: int) -> str:
    return f"document {i}: " + " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 9)) + f" number {i}"


LABELS = [["sport"], ["sport", "politics"], ["politics", "tech"], [" tech ", "sport", "sport"], [1, "tech"],
          ["politics"], ["sport", "tech"], ["politics", "sport", ""]]


def jsonl(tmp_path, labels, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": text(i), "label": lab}) + "\n" for i, lab in enumerate(labels)))
    return path


def test_label_lists_become_canonical_label_sets_counted_per_label(tmp_path):
    corpus, report = build_corpus(jsonl(tmp_path, LABELS + [[], None]), 1_000_000, 1, ND, MULTI)
    assert corpus["label"].tolist() == [
        '["sport"]', '["politics", "sport"]', '["politics", "tech"]', '["sport", "tech"]', '["1", "tech"]',
        '["politics"]', '["sport", "tech"]', '["politics", "sport"]']  # stripped, distinct, sorted; ints are labels
    assert report["per_class"] == {"sport": 5, "politics": 4, "tech": 4, "1": 1}  # documents per label
    assert report["skipped"] == {"missing_label": 2}  # [] and null: counted, not kept
    assert report["label_fixes"] == {"blank_label": 1, "repeated_label": 1}  # kept, and counted
    assert report["fixed_rows"] == [{"path": "t.jsonl:4", "fix": "repeated_label"},
                                    {"path": "t.jsonl:8", "fix": "blank_label"}]
    out = tmp_path / "corpus.parquet"
    write_corpus(jsonl(tmp_path, LABELS), out, 1_000_000, 1, ND, MULTI)
    assert pq.read_schema(out).metadata[TASK_KEY] == b"multilabel"


def test_parquet_lists_and_a_csv_delimiter_read_alike(tmp_path):
    lists = [[str(x) for x in lab if str(x).strip()] for lab in LABELS]
    pq.write_table(pa.table({"text": [text(i) for i in range(len(lists))], "label": lists}), tmp_path / "t.parquet")
    from_parquet, _ = build_corpus(tmp_path / "t.parquet", 1_000_000, 1, ND, MULTI)
    pd.DataFrame({"text": [text(i) for i in range(len(lists))], "label": ["|".join(x) for x in lists]}).to_csv(
        tmp_path / "t.csv", index=False)
    from_csv, _ = build_corpus(tmp_path / "t.csv", 1_000_000, 1, ND, Columns(multilabel=True, label_delimiter="|"))
    expected, _ = build_corpus(jsonl(tmp_path, LABELS), 1_000_000, 1, ND, MULTI)
    assert from_parquet["label"].tolist() == from_csv["label"].tolist() == expected["label"].tolist()


def test_a_label_too_rare_is_named_as_a_class_is(tmp_path):
    with pytest.raises(UserError, match=r"'1'.*ingest.min_per_class=2"):
        build_corpus(jsonl(tmp_path, LABELS), 1_000_000, 2, ND, MULTI)


@pytest.mark.parametrize("how, columns, message", [
    ("csv", MULTI, "ingest.task: multilabel reads label lists: a JSON list in JSON Lines, a list column in "
                   "Parquet, or set ingest.label_delimiter"),
    ("jsonl", Columns(), r"t.jsonl:1: the label is a list \(\[\"sport\"\]\); a document with several labels "
                         "needs ingest.task: multilabel"),
    ("folder", MULTI, "is a folder of class folders .* set ingest.task: single_label, or give a table"),
])
def test_the_wrong_shape_stops_ingest_naming_the_param(tmp_path, how, columns, message):
    if how == "csv":
        source = tmp_path / "t.csv"
        source.write_text("text,label\n" + "".join(f"{text(i)},sport|tech\n" for i in range(3)))
    elif how == "jsonl":
        source = jsonl(tmp_path, LABELS)
    else:
        source = REPO / "data" / "sample"
    with pytest.raises(UserError, match=message) as err:
        build_corpus(source, 1_000_000, 1, ND, columns)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("scalar", [3, "sport"])
def test_a_scalar_label_is_one_rule_number_or_string(tmp_path, scalar):
    """Issue 39 item 10: `3` became class "3" where `"sport"` stopped ingest. A cell that is no
    list is labels joined by ingest.label_delimiter, a number as a string; without one, both stop."""
    rows = [["sport"], ["tech"], scalar]
    with pytest.raises(UserError, match=rf"t.jsonl:3: the label is the (number 3|string 'sport'), but "
                                        r"ingest.task: multilabel reads label lists.*a list of one"):
        build_corpus(jsonl(tmp_path, rows), 1_000_000, 1, ND, MULTI)
    corpus, report = build_corpus(jsonl(tmp_path, rows + ["sport|tech|"]), 1_000_000, 1, ND,
                                  Columns(multilabel=True, label_delimiter="|"))
    assert corpus["label"].tolist() == ['["sport"]', '["tech"]', json.dumps([str(scalar)]), '["sport", "tech"]']
    assert report["label_fixes"] == {"blank_label": 1}  # the delimiter's trailing empty label


def test_a_corpus_without_fixes_says_so(tmp_path):
    _, report = build_corpus(jsonl(tmp_path, [["sport"], ["tech", "sport"]]), 1_000_000, 1, ND, MULTI)
    assert report["label_fixes"] == {} and report["fixed_rows"] == []


def test_a_delimiter_without_the_task_is_refused():
    with pytest.raises(UserError, match="ingest.label_delimiter='\\|' splits label lists, which only "
                                        "ingest.task: multilabel reads"):
        parse_section("ingest", {"label_delimiter": "|"})
    assert parse_section("ingest", {"task": "multilabel", "label_delimiter": "|"}).label_delimiter == "|"
