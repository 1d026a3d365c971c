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
from textclf.errors import UserError

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
    # the demo's texts hold newlines: a TSV can hold them in quoted fields only
    columns = Columns(id="id", tsv_quoting=name.endswith(".tsv"))
    table, report = build_corpus(write(rows, tmp_path / name), 1_000_000, 5, ND, columns)
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
    # ingest_report.json of a table source: the folder's keys but files_seen, then the tables'
    assert list(report) == ["source", "class_root", "kept", "skipped", "encodings", "per_class",
                            "ignored_top_level", "skipped_files", "duplicate_groups",
                            "duplicates_not_byte_identical", "conflicts", "rows_seen", "tables",
                            "columns", "near_duplicates"]
    assert report["skipped_files"][0] == {"path": "bad.csv:81", "id": "x", "reason": "missing_label"}
    assert report["columns"] == {"text": "text", "label": "label", "id": "id", "tsv_quoting": False}
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


def build_rows(path: Path, **kw):
    """A small table's corpus with every class allowed (min_per_class=1)."""
    return build_corpus(path, 1_000_000, 1, ND, Columns(**kw))


def test_a_glob_over_partitions_keeps_every_file_with_ids_below_the_globs_fixed_folder(tmp_path):
    """pyarrow's write_dataset names every partition's file part-0.csv; ids are paths below
    the glob's folder, so no partition's rows collide with another's."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    year = [2023] * 6 + [2024] * 6
    table = pa.table({"text": [f"story {i} of {y}" for i, y in enumerate(year)],
                      "label": ["ab"[i % 2] for i in range(12)], "year": year})
    ds.write_dataset(table, tmp_path / "raw", format="csv", partitioning=["year"],
                     partitioning_flavor="hive")
    frame, report = build_rows(tmp_path / "raw" / "*" / "part-0.csv")
    assert report["rows_seen"] == report["kept"] == len(frame) == 12 and report["skipped"] == {}
    assert {"year=2023/part-0.csv:1", "year=2024/part-0.csv:6"} <= set(frame["source_path"])
    single, _ = build_rows(tmp_path / "raw" / "year=2023" / "part-0.csv")
    assert single["source_path"].iloc[0] == "part-0.csv:1"  # one file: its name, as before


def test_an_existing_path_with_glob_characters_is_a_path(rows, tmp_path):
    folder = tmp_path / "news [v2]"
    folder.mkdir()
    write(rows, folder / "a?.csv")
    assert table_files(str(folder)) == [folder / "a?.csv"]
    assert table_files(str(folder / "a?.csv")) == [folder / "a?.csv"]


def test_a_tsv_quote_is_text_unless_tsv_quoting_is_on(tmp_path):
    """GLUE-style TSV: a field that starts with an unclosed quote is just text."""
    lines = ["text\tlabel", '"so it begins\ta'] + [f"row {i}\t{'ab'[i % 2]}" for i in range(8)]
    path = tmp_path / "t.tsv"
    path.write_text("\n".join(lines) + "\n")
    frame, report = build_rows(path)
    assert report["rows_seen"] == report["kept"] == 9
    assert frame["text"].iloc[0] == '"so it begins' and list(frame["label"][:3]) == ["a", "a", "b"]
    path.write_text('text\tlabel\n"a tab\tand a\nnewline"\ta\nplain\tb\n')
    quoted, _ = build_rows(path, tsv_quoting=True)
    assert list(quoted["text"]) == ["a tab\tand a\nnewline", "plain"]


def test_a_column_ingest_does_not_read_may_change_type_after_the_first_block(tmp_path):
    """pyarrow infers a CSV column's type from its first 4 MiB block: an unused `views` column
    that is an integer there and a word later must not stop ingest."""
    pad = "x" * 1000
    lines = ["text,label,views,pad", "first doc,a,1,", "second doc,b,2,"]
    lines += [f",,{i},{pad}" for i in range(4400)]  # > 4 MiB of rows without text
    lines += ["third doc,a,unknown,", "fourth doc,b,unknown,"]
    path = tmp_path / "views.csv"
    path.write_text("\n".join(lines) + "\n")
    frame, report = build_rows(path)
    assert path.stat().st_size > 1 << 22
    assert list(frame["text"]) == ["first doc", "second doc", "third doc", "fourth doc"]
    assert report["skipped"] == {"empty_text": 4400}


def test_json_lines_columns_are_checked_across_the_file(tmp_path):
    """BigQuery's export drops null fields: a first object without the label is a row without
    a label; a file where no object has the text column fails naming the columns seen."""
    objects = [{"text": "no label here"}] + [{"text": f"doc {i}", "label": "ab"[i % 2]} for i in range(4)]
    path = tmp_path / "bq.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    frame, report = build_rows(path)
    assert report["skipped"] == {"missing_label": 1} and report["kept"] == 4
    renamed = tmp_path / "body.jsonl"
    renamed.write_text("".join(json.dumps({"body": o["text"], **o}) for o in objects).replace("}{", "}\n{")
                       .replace('"text"', '"txt"'))
    with pytest.raises(UserError, match=r"body.jsonl has no column 'text'; its objects' columns are "
                                        r"\['body', 'txt', 'label'\]") as err:
        build_rows(renamed)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, data", [
    ("broken.parquet", b"PAR1 this is not a parquet file"),
    ("cut.csv.gz", gzip.compress(("text,label\n" + "".join(f"words {i},a\n" for i in range(9000))).encode())[:9000]),
    ("cut.jsonl.gz", gzip.compress("".join(f'{{"text": "{i}", "label": "a"}}\n' for i in range(9000)).encode())[:9000]),
])
def test_a_table_that_cannot_be_read_fails_in_one_line_naming_the_file(tmp_path, name, data):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(UserError, match=rf"{name}.* could not be read") as err:
        build_rows(tmp_path / name)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, frame, match", [
    ("ints.parquet", pd.DataFrame({"text": [1, 2, 3], "label": ["a", "b", "a"]}),
     r"3 row\(s\) read, skipped \{'non_string': 3\}.*ingest.text_column='text'"),
    ("empty.parquet", pd.DataFrame({"text": pd.Series([], dtype=str), "label": pd.Series([], dtype=str)}),
     r"0 row\(s\) read.*hold no rows"),
    ("array.json", None, r"1 row\(s\) read, skipped \{'malformed_line': 1\}.*one object per line"),
])
def test_tables_with_no_usable_row_say_what_was_read_and_why(tmp_path, name, frame, match):
    path = tmp_path / name
    if frame is None:
        path.write_text(json.dumps([{"text": "a", "label": "x"}, {"text": "b", "label": "y"}]))
    else:
        frame.to_parquet(path, index=False)
    with pytest.raises(UserError, match=rf"no usable row in \S*{name}: {match}") as err:
        build_rows(path)
    assert "class folders" not in str(err.value) and "\n" not in str(err.value)


def test_a_stray_file_or_a_link_out_of_a_table_folder_is_skipped_and_listed(rows, tmp_path):
    (tmp_path / "t").mkdir()
    write(rows, tmp_path / "t" / "a.csv")
    (tmp_path / "t" / "README.md").write_text("# where these rows came from\n")
    (tmp_path / "t" / "b.csv").symlink_to(write(rows, tmp_path / "outside.csv"))
    frame, report = build_corpus(tmp_path / "t", 1_000_000, 5, ND)
    assert len(frame) == report["rows_seen"] == len(rows)
    assert report["ignored_top_level"] == ["README.md", "b.csv"]


def test_skipped_rows_are_listed_by_physical_line_and_duplicate_ids_with_file_and_row(tmp_path):
    """Rows 1-3 span lines 2-13 (4 lines each); the malformed row is physical line 16."""
    lines = ["id,text,label"] + [f'{i},"a text\nthat spans\nfour\nlines {i}",{"ab"[i % 2]}' for i in range(3)]
    lines += ["3,fine,a", "3,the same id,b", "4,one field too,many,a", "5,last,b"]
    path = tmp_path / "multi.csv"
    path.write_text("\n".join(lines) + "\n")
    _, report = build_rows(path, id="id")
    assert report["skipped_files"] == [
        {"path": "multi.csv:5", "id": "3", "reason": "duplicate_id"},
        {"path": "multi.csv:line16", "reason": "malformed_line"}]


def test_many_small_classes_are_named_a_few_and_counted():
    from collections import Counter

    from textclf.data.class_sizes import check_classes

    with pytest.raises(UserError) as err:
        check_classes(Counter({f"class-{i:04d}": 1 + i % 3 for i in range(1000)}), 5)
    message = str(err.value)
    assert len(message) < 300, message
    assert "{'class-0000': 1, 'class-0003': 1, 'class-0006': 1, 'class-0009': 1, 'class-0012': 1} " \
           "and 995 more" in message


def test_the_ingest_stage_passes_tsv_quoting_from_params(tmp_path):
    from stages import ingest

    from conftest import write_params
    from textclf.config import load_params
    with pytest.raises(UserError, match=r"ingest.tsv_quoting='yes' must be true or false"):
        load_params(write_params(tmp_path / "bad.yaml", ingest={"tsv_quoting": "yes"}))
    tsv = tmp_path / "q.tsv"
    tsv.write_text('text\tlabel\n"a\ttab"\ta\nplain\tb\n')
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(tsv), "tsv_quoting": True,
                                                            "min_per_class": 1})
    ingest.main(["--params", str(params), "--corpus", str(tmp_path / "c.parquet"),
                 "--report", str(tmp_path / "r.json")])
    assert list(pd.read_parquet(tmp_path / "c.parquet")["text"]) == ["a\ttab", "plain"]


def test_a_quoted_tsv_read_unquoted_ends_with_the_quoting_fix_not_only_the_class_sizes(tmp_path):
    """pandas writes a TSV whose texts hold newlines quoted: read unquoted, every row breaks,
    every class falls under min_per_class, and the refusal names ingest.tsv_quoting too, not
    only the small classes (the warning that said it had scrolled away; issue 55)."""
    texts = [f"document {i}\nits second line" for i in range(12)]
    path = tmp_path / "export.tsv"
    pd.DataFrame({"text": texts, "label": ["a", "b"] * 6}).to_csv(path, sep="\t", index=False)
    with pytest.raises(UserError) as err:
        build_corpus(path, 1_000_000, 5, ND, Columns())
    assert "fewer than ingest.min_per_class=5" in str(err.value)
    assert "set ingest.tsv_quoting: true first" in str(err.value) and "\n" not in str(err.value)
    frame, _ = build_corpus(path, 1_000_000, 5, ND, Columns(tsv_quoting=True))
    assert list(frame["text"]) == texts


def test_a_partitioned_table_is_read_as_one_table_not_as_class_folders(rows, tmp_path):
    """Issue 60, item 10: `year=2023/part-0.csv`, as Spark and pyarrow write a table, was read
    as the folder-per-class layout: classes 'year=2023' and 'year=2024', of CSV files."""
    half = len(rows) // 2
    for year, part in (("2023", rows[:half]), ("2024", rows[half:])):
        (tmp_path / "t" / f"year={year}").mkdir(parents=True)
        write(part, tmp_path / "t" / f"year={year}" / "part-0.csv")
    (tmp_path / "t" / "year=2024" / "_SUCCESS").write_text("")
    frame, report = build_corpus(tmp_path / "t", 1_000_000, 5, ND)
    assert sorted(frame["label"].unique()) == sorted(rows["label"].unique())
    assert len(frame) == len(rows) and frame["source_path"].iloc[0] == "year=2023/part-0.csv:1"
    assert report["ignored_top_level"] == ["year=2024/_SUCCESS"]
