"""Tabular corpus sources: CSV, TSV, JSON Lines (`.jsonl`, or `.json` holding one object per
line) and Parquet files, the text formats optionally gzipped, one row per document with a text
column and a label column. `ingest.source` names one such file, a glob of them, or a folder
holding them (a folder with sub-folders is the folder-per-class layout instead; other files
beside the tables are listed and skipped).

Rows come out as `Row`s in file and row order; a row that cannot be a document carries the
reason (counted by the corpus rules, never fatal). CSV and Parquet are read by pyarrow in
record batches, only the columns ingest needs; JSON Lines line by line, so that one malformed
line is one skipped row. A row is named `<file>:<N>`, the file's path below the source's
folder and the row's number (1-based, header not counted); a malformed row, which has no
number, `<file>:line<L>`, the physical line it starts on (a CSV's header is line 1).
"""
from __future__ import annotations

import csv
import glob
import gzip
import json
import logging
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from textclf.data.ingest_report import IngestReport, SkipReason
from textclf.data.labelsets import canonical, label_set, refuse_single_label_list
from textclf.data.text import decode, not_text
from textclf.errors import UserError
from textclf.files import open_parquet

log = logging.getLogger(__name__)

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
BATCH_ROWS = 10_000
CSV_BLOCK_BYTES = 1 << 22
SHOWN = 5  # file and column names an error line lists before counting the rest
PARTITION = re.compile(r"[^=]+=[^=]*")  # a Hive-style partition folder: key=value
SNIFF_BYTES = 1 << 16  # a CSV's head read for binary data before pyarrow parses it


@dataclass(frozen=True)
class Columns:
    """Where a table's documents are: its columns, and whether a TSV quotes fields."""
    text: str = "text"
    label: str = "label"
    id: str = ""  # empty: a row's id is its file and row number
    tsv_quoting: bool = False  # off: a `"` in a .tsv is text, as GLUE and most exports write it
    multilabel: bool = False  # the label cell holds a label list (data.labelsets)
    label_delimiter: str = ""  # multilabel: what joins labels in one string


@dataclass(frozen=True)
class Row:
    at: str  # file:row (or file:lineL for a malformed row): where the row is
    label: str = ""
    text: str = ""
    problem: SkipReason | None = None
    id: str = ""  # the id column's value
    fixed: tuple[str, ...] = ()  # multilabel: what the label set dropped (data.labelsets)

    @property
    def ref(self) -> str:
        """The document's stable path: its id, or where it is."""
        return self.id or self.at


def table_format(path: Path) -> str | None:
    """csv | tsv | jsonl | parquet by the file name (a text format may end in .gz), or None."""
    name = path.name.lower().removesuffix(".gz")
    fmt = FORMATS.get(Path(name).suffix)
    return None if fmt == "parquet" and path.name.lower().endswith(".gz") else fmt


def quoting_hint(tables: list[Path] | None, columns: Columns, malformed: int) -> str:
    """What a refusal adds when unquoted TSV rows were malformed: a TSV that quotes fields
    holding tabs or newlines (pandas' to_csv does) read unquoted leaves too few rows."""
    if not malformed or columns.tsv_quoting or not any(table_format(p) == "tsv" for p in tables or []):
        return ""
    return (f" ({malformed} row(s) had the wrong number of fields: if the TSV quotes fields that hold tabs "
            "or newlines, as pandas' to_csv writes them, set ingest.tsv_quoting: true first)")


def is_glob(source: str) -> bool:
    """A pattern: holds `*`, `?` or `[` and names no existing path (`news [v2]` may be a folder)."""
    return any(c in source for c in "*?[") and not Path(source).exists()


def source_root(source: str) -> Path:
    """The folder row ids are relative to: the source folder, a file's parent, or a glob's
    folders before its first wildcard (`data/*/part-0.csv` -> `data`)."""
    path = Path(source)
    if not is_glob(source):
        return path if path.is_dir() else path.parent
    fixed = []
    for part in path.parts[:-1]:
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _folder_listing(folder: Path) -> tuple[list[Path], list[str]] | None:
    """A folder's (table files, paths of the other files below it), or None when it holds no
    table or sub-folders that are not partitions (the folder-per-class layout). Partitions
    (`year=2023/part-0.csv`, as Spark and pyarrow write a table) are read whole, not taken for
    classes. A link out of the folder is never read."""
    children = [p for p in sorted(folder.iterdir()) if not p.name.startswith(".")]
    folders = [p for p in children if p.is_dir()]
    if folders and not all(PARTITION.fullmatch(p.name) for p in folders):
        return None
    if folders:
        children = sorted(p for p in folder.rglob("*") if not p.is_dir()
                          and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    inside = folder.resolve()
    tables = [p for p in children if table_format(p) and p.is_file()
              and (not p.is_symlink() or p.resolve().is_relative_to(inside))]
    return (tables, [p.relative_to(folder).as_posix() for p in children if p not in tables]) if tables else None


def not_tables(source: str) -> list[str]:
    """The files beside the tables of a table folder, which ingest skips."""
    listing = _folder_listing(Path(source)) if Path(source).is_dir() else None
    return listing[1] if listing else []


def table_files(source: str) -> list[Path] | None:
    """The table files `source` names (a file, a glob, or a folder holding tables), or None
    when it is not a tabular source."""
    path = Path(source)
    if not is_glob(source):
        if path.is_dir():
            listing = _folder_listing(path)
            return listing[0] if listing else None
        return [path] if path.is_file() and table_format(path) else None  # else: sources.py says
    files = sorted(Path(p) for p in glob.glob(source) if Path(p).is_file())
    if not files:
        raise UserError(f"ingest.source={source!r} matches no file; fix the pattern.")
    odd = [str(p) for p in files if table_format(p) is None]
    if odd:
        raise UserError(f"ingest.source={source!r} matches files that are not tables: {odd[:3]}; "
                        f"tabular sources end in {', '.join(FORMATS)} (text formats may be .gz).")
    return files


def _value(value, kind: str) -> tuple[str, SkipReason | None]:
    """A cell -> (string, problem). Labels may be integers (0/1 classes are common)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "", SkipReason.MISSING_LABEL if kind == "label" else SkipReason.EMPTY_TEXT
    if isinstance(value, str):
        return value, None
    if kind == "label" and isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    return "", SkipReason.NON_STRING


def _label(at: str, value, columns: Columns) -> tuple[str, SkipReason | None, tuple[str, ...]]:
    """A label cell -> (class, or canonical label set; problem; what the set dropped)."""
    if not columns.multilabel:
        refuse_single_label_list(value, at)
        return *_value(value, "label"), ()
    if value is None:
        return "", SkipReason.MISSING_LABEL, ()
    labels, fixed = label_set(value, at, columns.label_delimiter)
    if labels is None:
        return "", SkipReason.NON_STRING, ()
    return (canonical(labels), None, fixed) if labels else ("", SkipReason.MISSING_LABEL, ())


def _row(at: str, record: dict, columns: Columns) -> Row:
    text, problem = _value(record.get(columns.text), "text")
    label, label_problem, fixed = _label(at, record.get(columns.label), columns)
    ident = _value(record.get(columns.id), "label")[0] if columns.id else ""
    return Row(at, label, text, problem or label_problem, ident, fixed)


def _wanted(columns: Columns) -> list[str]:
    return list(dict.fromkeys(c for c in (columns.text, columns.label, columns.id) if c))


def _check_columns(path: Path, found: list[str], columns: Columns, whose: str = "its columns") -> None:
    missing = [c for c in _wanted(columns) if c not in found]
    if missing:
        more = f" and {len(found) - 20} more" if len(found) > 20 else ""
        raise UserError(f"{path} has no column {', '.join(map(repr, missing))}; {whose} are "
                        f"{found[:20]}{more}. Set ingest.text_column / ingest.label_column / "
                        "ingest.id_column.")


def _csv_batches(path: Path, fmt: str, columns: Columns, skipped: list[int]):
    """pyarrow's CSV reader over the needed columns only, as strings: the types of the others,
    inferred from the first block, could fail on a later one. `skipped` gets the record number
    of each row with the wrong number of fields."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    def skip(row) -> str:
        skipped.append(row.number)
        return "skip"
    quoting = fmt == "csv" or columns.tsv_quoting
    parse = pcsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",", quote_char='"' if quoting else False,
                              newlines_in_values=quoting, invalid_row_handler=skip)
    # One thread: only then does pyarrow number the rows it skips (no slower, measured).
    read = pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False)
    wanted = _wanted(columns)
    convert = pcsv.ConvertOptions(include_columns=wanted, column_types={c: pa.string() for c in wanted},
                                  strings_can_be_null=False)
    try:
        return pcsv.open_csv(path, read, parse, convert)
    except pa.ArrowKeyError:  # a needed column is not in the header: name those that are
        _check_columns(path, pcsv.open_csv(path, read, parse).schema.names, columns)
        raise


def _physical_lines(path: Path, fmt: str, columns: Columns, records: list[int]) -> dict[int, int]:
    """pyarrow numbers a CSV's records (the header is 1, blank lines are not counted) -> the
    physical line each of `records` starts on, further down once a quoted value holds a
    newline. Python's csv reads the file again, so only a file with malformed rows pays."""
    quoted = fmt == "csv" or columns.tsv_quoting
    csv.field_size_limit(sys.maxsize)  # a text field may be long; the default stops at 128 KiB
    wanted, last, lines, number, start = set(records), max(records), {}, 0, 1
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t" if fmt == "tsv" else ",",
                            quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE)
        for record in reader:
            if record:
                number += 1
                if number in wanted:
                    lines[number] = start
                if number >= last:
                    break
            start = reader.line_num + 1
    return lines


def _arrow_rows(path: Path, name: str, fmt: str, columns: Columns) -> Iterator[Row]:
    wanted = _wanted(columns)
    malformed: list[int] = []  # record numbers of rows with the wrong number of fields
    if fmt == "parquet":
        reader = open_parquet(path)
        _check_columns(path, reader.schema_arrow.names, columns)
        batches = reader.iter_batches(batch_size=BATCH_ROWS, columns=wanted)
    else:
        # pyarrow hands a malformed row's bytes to Python as UTF-8: non-UTF-8 bytes print its traceback
        with (gzip.open if path.name.lower().endswith(".gz") else open)(path, "rb") as fh:
            if why := not_text(fh.read(SNIFF_BYTES)):
                raise UserError(f"{path} is not a UTF-8 text table ({why}): a {fmt.upper()} source must be UTF-8 "
                                "text with a header row; export it as such, or remove it from ingest.source.")
        batches = _csv_batches(path, fmt, columns, malformed)
    n = 0
    for batch in batches:
        for n, record in enumerate(batch.select(wanted).to_pylist(), n + 1):
            yield _row(f"{name}:{n}", record, columns)
    if malformed and fmt == "tsv" and not columns.tsv_quoting:
        log.warning("%s: %d row(s) with the wrong number of fields; if the file quotes fields that "
                    "hold tabs or newlines, set ingest.tsv_quoting: true", path, len(malformed))
    lines = _physical_lines(path, fmt, columns, malformed) if malformed else {}
    for number in malformed:
        yield Row(f"{name}:line{lines.get(number, '?')}", problem=SkipReason.MALFORMED_LINE)


def _jsonl_rows(path: Path, name: str, columns: Columns) -> Iterator[Row]:
    """One Row per non-blank line, decoded as files are. The columns are checked across the
    file: an export may leave a null field out of any object, the first one too."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    pending, seen, n = set(_wanted(columns)), {}, 0
    with opener(path, "rb") as fh:
        for line, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            n += 1
            text, _ = decode(raw)
            try:
                record = json.loads(text) if text is not None else None
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                yield Row(f"{name}:line{line}", problem=SkipReason.MALFORMED_LINE)
                continue
            if pending:  # the columns objects hold, until every needed one was seen
                seen.update(dict.fromkeys(record))
                pending.difference_update(record)
            yield _row(f"{name}:{n}", record, columns)
    if pending and seen:
        _check_columns(path, list(seen), columns, "its objects' columns")


def read_rows(files: list[Path], columns: Columns, root: Path) -> Iterator[Row]:
    """Every row of every file, as a Row whose `at` names the file by its path below `root`
    (so that same-named files in two folders stay apart). A file that cannot be read stops
    ingest in one line naming it."""
    import pyarrow as pa  # here: ingest of a folder never needs it

    for path in files:
        fmt = table_format(path)
        if fmt is None:  # table_files lists tables only
            raise ValueError(f"{path} is not a table file")
        name = path.relative_to(root).as_posix()
        try:
            if fmt == "jsonl":
                yield from _jsonl_rows(path, name, columns)
            else:
                yield from _arrow_rows(path, name, fmt, columns)
        except (pa.ArrowException, OSError, EOFError, zlib.error) as err:
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            detail = "".join(c for c in detail if c.isprintable() and c != "\ufffd")  # pyarrow quotes raw rows
            gz = ", and the .gz whole" if path.name.lower().endswith(".gz") else ""
            need = {"parquet": "a whole Parquet file", "jsonl": "UTF-8 JSON Lines"}.get(
                fmt, "UTF-8 with a header row") + gz
            raise UserError(f"{path} could not be read as {fmt.upper()} ({detail}); it must be {need}: "
                            "fix or remove the file.") from None


def nothing_usable(report: IngestReport, files: list[Path], columns: Columns) -> str:
    """The error line for tables that gave no document: what was read, and why each row was skipped."""
    reason = report.skipped.most_common(1)[0][0] if report.skipped else None
    text, label = f"ingest.text_column={columns.text!r}", f"ingest.label_column={columns.label!r}"
    hints: dict[SkipReason | None, str] = {
        None: "the tables hold no rows",
        SkipReason.MALFORMED_LINE: "a row needs the header's number of fields, JSON Lines one object "
                                   "per line (a .json holding one JSON array is not JSON Lines)",
        SkipReason.NON_STRING: f"{text} must hold strings (labels: strings or integers)",
        SkipReason.EMPTY_TEXT: f"{text} must name the column holding the text",
        SkipReason.MISSING_LABEL: f"{label} must name the column holding the class",
        SkipReason.TOO_LARGE: "a longer text than ingest.max_bytes is skipped"}
    hint = hints.get(reason, "see the skip reasons")
    where = str(files[0]) if len(files) == 1 else (
        f"{len(files)} tables of ingest.source={report.source!r} ({', '.join(p.name for p in files[:SHOWN])}"
        f"{', …' if len(files) > SHOWN else ''})")
    return (f"no usable row in {where}: {report.seen} row(s) read, skipped {report.counts()}; "
            f"{hint}.")
