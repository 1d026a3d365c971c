"""Tabular sources: CSV, TSV, JSON Lines, Parquet (text formats also gzipped) give the same
corpus as the folder-per-class layout for the same documents; every bad row is counted under
its reason; missing columns fail in one line naming the columns there are."""
import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from textclf.config import NearDuplicateParams
from textclf.data.corpus import build_corpus
from textclf.data.tables import Columns, table_files
from textclf.data.text import decode
from textclf.io import UserError

from conftest import REPO

SAMPLE = REPO / "data" / "sample"
ND = NearDuplicateParams()


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """The demo corpus's files as rows: id (the path below the source), label, text."""
    out = []
    for path in sorted(SAMPLE.rglob("*.txt")):
        rel = path.relative_to(SAMPLE).as_posix()
        out.append({"id": rel, "label": rel.split("/")[0], "text": decode(path.read_bytes())[0]})
    return pd.DataFrame(out)


def write(frame: pd.DataFrame, path: Path) -> Path:
    name = path.name.removesuffix(".gz")
    if name.endswith(".parquet"):
        frame.to_parquet(path, index=False)
    elif name.endswith((".jsonl", ".json")):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in frame.to_dict("records"))
        path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    else:
        frame.to_csv(path, index=False, sep="\t" if ".tsv" in path.name else ",",
                     compression="gzip" if path.name.endswith(".gz") else None)
    return path


@pytest.mark.parametrize("name", ["c.csv", "c.tsv", "c.jsonl", "c.json", "c.parquet", "c.csv.gz",
                                  "c.jsonl.gz"])
def test_every_table_format_gives_the_folders_corpus(rows, tmp_path, name):
    folder, _ = build_corpus(SAMPLE, 1_000_000, 5, ND)
    table, report = build_corpus(write(rows, tmp_path / name), 1_000_000, 5, ND, Columns(id="id"))
    pd.testing.assert_frame_equal(table, folder)
    assert report["rows_seen"] == len(rows) == report["kept"] + sum(report["skipped"].values())


def test_a_glob_or_a_folder_of_tables_reads_every_file_and_ids_default_to_file_and_row(rows, tmp_path):
    (tmp_path / "t").mkdir()
    write(rows.iloc[:40], tmp_path / "t" / "a.csv")
    write(rows.iloc[40:], tmp_path / "t" / "b.parquet")
    frame, report = build_corpus(tmp_path / "t", 1_000_000, 5, ND)
    assert len(frame) == len(rows) and report["rows_seen"] == len(rows)
    assert set(frame["source_path"]) >= {"a.csv:1", "a.csv:40", "b.parquet:1"}
    assert table_files(str(tmp_path / "t" / "*.csv")) == [tmp_path / "t" / "a.csv"]


def test_every_bad_row_is_counted_under_its_reason(rows, tmp_path):
    good = rows.to_dict("records")
    limit = max(len(t.encode()) for t in rows["text"])
    csv = tmp_path / "bad.csv"
    bad_csv = ['"x",,"no label"', '"y","sport",""', '"z","sport","' + "long " * limit + '"',
               '"w","sport","text","an extra field"', '"v","sport","   "']
    csv.write_text(pd.DataFrame(good).to_csv(index=False) + "\n".join(bad_csv) + "\n")
    frame, report = build_corpus(csv, limit, 5, ND, Columns(id="id"))
    assert report["skipped"] == {"empty_text": 2, "malformed_line": 1, "missing_label": 1, "too_large": 1}
    assert report["rows_seen"] == report["kept"] + sum(report["skipped"].values()) == len(rows) + 5
    jsonl = tmp_path / "bad.jsonl"
    lines = [json.dumps(r) for r in good] + [
        '{"id": "n", "label": "sport", "text": 42}', '{"id": "m", "label": null, "text": "x"}',
        '{"id": "o", "label": "sport", "text": "half a line', '[1, 2]', '{"id": "p", "label": 3, "text": "a number label"}']
    jsonl.write_text("\n".join(lines) + "\n")
    frame, report = build_corpus(jsonl, 1_000_000, 1, ND, Columns(id="id"))
    assert report["skipped"] == {"malformed_line": 2, "missing_label": 1, "non_string": 1}
    assert "3" in set(frame["label"])  # an integer label is a class name


def test_missing_columns_fail_in_one_line_naming_the_columns_there_are(rows, tmp_path):
    path = write(rows.rename(columns={"text": "body"}), tmp_path / "c.csv")
    with pytest.raises(UserError, match=r"has no column 'text'; its columns are \['id', 'label', 'body'\]"):
        build_corpus(path, 1_000_000, 5, ND)
    build_corpus(path, 1_000_000, 5, ND, Columns(text="body"))  # named: fine


def test_the_ingest_stage_reads_a_table_named_in_params(rows, tmp_path):
    """params.yaml names the file and its columns; the stage writes the corpus and a report
    that counts rows."""
    from stages import ingest

    from conftest import write_params
    table = write(rows.rename(columns={"text": "body", "label": "topic"}), tmp_path / "news.jsonl.gz")
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(table), "text_column": "body",
                                                            "label_column": "topic"})
    ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                 "--report", str(tmp_path / "r.json")])
    corpus = pd.read_parquet(tmp_path / "c.parquet")
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(corpus) == report["kept"] == report["rows_seen"] - sum(report["skipped"].values())
    assert corpus["source_path"].iloc[0].startswith("news.jsonl.gz:")
    assert set(corpus["label"]) == set(rows["label"])


def test_a_table_larger_than_a_spill_batch_keeps_row_order_and_every_rule(tmp_path):
    """Ingest streams: texts spill to disk SPILL_ROWS at a time and the corpus is written back
    batch by batch. Past three batches, duplicates, a conflict and a near-duplicate pair that
    straddle batch boundaries are all still found; rows keep their table order."""
    from textclf.data.ledger import SPILL_ROWS

    n = 3 * SPILL_ROWS + 17
    texts = [f"document {i} says {i % 97} things about item {i * 7919 % 100003}" for i in range(n)]
    labels = ["a" if i % 2 else "b" for i in range(n)]
    base = " ".join(f"w{k}" for k in range(60))
    texts[5], texts[2 * SPILL_ROWS + 3] = base, base + " plus"  # near-duplicates, one label
    labels[5] = labels[2 * SPILL_ROWS + 3] = "a"
    texts[SPILL_ROWS + 1] = texts[1]  # an exact duplicate (row 1's label is "a")
    labels[SPILL_ROWS + 1] = "a"
    texts[3 * SPILL_ROWS + 2], labels[3 * SPILL_ROWS + 2] = texts[9], "b"  # row 9 is "a": conflict
    path = write(pd.DataFrame({"text": texts, "label": labels}), tmp_path / "big.parquet")
    frame, report = build_corpus(path, 1_000_000, 1, ND)
    assert report["skipped"] == {"duplicate": 1, "conflicting_label": 2}
    assert len(frame) == n - 3 == report["kept"]
    rows = frame["source_path"].str.split(":").str[1].astype(int)
    assert rows.is_monotonic_increasing  # table order, not the order of the strings "big.parquet:10" < ":9"
    assert frame.set_index(rows)["text"].equals(pd.Series(texts, index=range(1, n + 1))[rows.to_numpy()])
    grouped = frame[frame.duplicated("group", keep=False)]
    assert sorted(grouped["source_path"]) == [f"big.parquet:{2 * SPILL_ROWS + 4}", "big.parquet:6"]
    assert (grouped["group"] == frame.loc[rows == 6, "doc_id"].item()).all()
