"""Tabular corpus sources: CSV, TSV, JSON Lines (`.jsonl`, or `.json` holding one object per
line) and Parquet files, the text formats optionally gzipped, one row per document with a text
column and a label column. `ingest.source` names one such file, a glob of them, or a folder
holding only them (a folder with sub-folders is the folder-per-class layout instead).

Rows come out as `Row`s in file and row order; a row that cannot be a document carries the
reason (counted by the corpus rules, never fatal). CSV and Parquet are read by pyarrow in
record batches; JSON Lines line by line, so that one malformed line is one skipped row.
"""
from __future__ import annotations

import glob
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from textclf.data.text import decode
from textclf.io import UserError, open_parquet

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
BATCH_ROWS = 10_000
MALFORMED, NO_LABEL, EMPTY_TEXT, NOT_STRING = "malformed_line", "missing_label", "empty_text", "non_string"


@dataclass(frozen=True)
class Columns:
    text: str = "text"
    label: str = "label"
    id: str = ""  # empty: a row's id is its file and row number


@dataclass(frozen=True)
class Row:
    ref: str  # file:row, or the id column's value: the document's stable path
    label: str = ""
    text: str = ""
    problem: str | None = None


def table_format(path: Path) -> str | None:
    """csv | tsv | jsonl | parquet by the file name (a text format may end in .gz), or None."""
    name = path.name.lower().removesuffix(".gz")
    fmt = FORMATS.get(Path(name).suffix)
    return None if fmt == "parquet" and path.name.lower().endswith(".gz") else fmt


def table_files(source: str) -> list[Path] | None:
    """The table files `source` names (a file, a glob, or a folder holding only tables), or
    None when it is not a tabular source."""
    if any(c in source for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(source) if Path(p).is_file())
        if not files:
            raise UserError(f"ingest.source={source!r} matches no file; fix the pattern.")
    elif Path(source).is_file():
        files = [Path(source)]
    elif Path(source).is_dir():
        children = [p for p in sorted(Path(source).iterdir()) if not p.name.startswith(".")]
        if not children or any(p.is_dir() or table_format(p) is None for p in children):
            return None  # a folder of class folders (or an archive's): not tabular
        files = children
    else:
        return None
    odd = [str(p) for p in files if table_format(p) is None]
    if odd:
        if len(files) == 1 and not any(c in source for c in "*?["):
            return None  # one file that is no table: an archive, or unknown (sources.py says)
        raise UserError(f"ingest.source={source!r} holds files that are not tables: {odd[:3]}; "
                        f"tabular sources end in {', '.join(FORMATS)} (text formats may be .gz).")
    return files


def _value(value, kind: str) -> tuple[str, str | None]:
    """A cell -> (string, problem). Labels may be integers (0/1 classes are common)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "", NO_LABEL if kind == "label" else EMPTY_TEXT
    if isinstance(value, str):
        return value, None
    if kind == "label" and isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    return "", NOT_STRING


def _row(ref: str, record: dict, cols: Columns) -> Row:
    text, problem = _value(record.get(cols.text), "text")
    label, label_problem = _value(record.get(cols.label), "label")
    if cols.id:
        ident, _ = _value(record.get(cols.id), "label")
        ref = ident or ref
    return Row(ref, label, text, problem or label_problem)


def _check_columns(path: Path, found: list[str], cols: Columns) -> None:
    missing = [c for c in (cols.text, cols.label, cols.id) if c and c not in found]
    if missing:
        raise UserError(f"{path} has no column {', '.join(map(repr, missing))}; its columns are "
                        f"{found}. Set ingest.text_column / ingest.label_column / ingest.id_column.")


def _arrow_rows(path: Path, fmt: str, cols: Columns, malformed: list[int]) -> Iterator[dict]:
    import pyarrow as pa  # here: ingest of a folder never needs it

    wanted = [c for c in (cols.text, cols.label, cols.id) if c]
    if fmt == "parquet":
        reader = open_parquet(path)
        _check_columns(path, reader.schema_arrow.names, cols)
        batches = reader.iter_batches(batch_size=BATCH_ROWS, columns=wanted)
    else:
        import pyarrow.csv as pcsv

        def skip(row) -> str:  # a row with the wrong number of fields
            malformed.append(row.number or 0)
            return "skip"
        try:
            batches = pcsv.open_csv(
                path, read_options=pcsv.ReadOptions(block_size=1 << 22),
                parse_options=pcsv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",",
                                                newlines_in_values=True, invalid_row_handler=skip),
                convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in wanted},
                                                    strings_can_be_null=False))
        except pa.ArrowInvalid as err:
            raise UserError(f"{path} is not a readable {fmt.upper()} file ({str(err).splitlines()[0]}); "
                            "tables must be UTF-8 with a header row.") from None
        _check_columns(path, batches.schema.names, cols)
    try:
        for batch in batches:
            yield from batch.select(wanted).to_pylist()
    except pa.ArrowInvalid as err:
        raise UserError(f"{path} could not be read ({str(err).splitlines()[0]}); tables must be "
                        "UTF-8 with a header row.") from None


def _jsonl_rows(path: Path, cols: Columns) -> Iterator[dict | None]:
    """One dict per line (None for a malformed one); the lines decode as files do."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    checked = False
    with opener(path, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            text, _ = decode(raw)
            try:
                record = json.loads(text) if text is not None else None
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                yield None
                continue
            if not checked:  # the first object names the columns
                _check_columns(path, list(record), cols)
                checked = True
            yield record


def read_rows(files: list[Path], cols: Columns) -> Iterator[Row]:
    """Every row of every file, as a Row; `ref` is `<file name>:<row>` (1-based, header not
    counted) unless cols.id names the id column."""
    for path in files:
        fmt = table_format(path)
        if fmt == "jsonl":
            for n, record in enumerate(_jsonl_rows(path, cols), 1):
                ref = f"{path.name}:{n}"
                yield Row(ref, problem=MALFORMED) if record is None else _row(ref, record, cols)
            continue
        malformed: list[int] = []
        n = 0
        for n, record in enumerate(_arrow_rows(path, fmt, cols, malformed), 1):
            yield _row(f"{path.name}:{n}", record, cols)
        for i, line in enumerate(malformed, 1):
            yield Row(f"{path.name}:line{line or n + i}", problem=MALFORMED)
