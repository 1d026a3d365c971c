"""Batch scoring of a table (CSV, TSV, JSON Lines, Parquet) into a Parquet file of predictions,
a chunk of rows at a time: memory stays flat in the table's size.

The output keeps every input column, in order (or only the id column), then the prediction
columns of `frames.probability_frame` and `skip_reason`. Every input row has one output row,
in input order; a row that cannot be scored (no text, not a string, empty, a malformed line)
keeps null predictions and names why in `skip_reason`. CSV, TSV and JSON Lines columns come out
as strings (a JSON value that is not a string as its JSON text); Parquet keeps its types.
"""
from __future__ import annotations

import json
import logging
import sys
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from tqdm import tqdm

from textclf.errors import UserError
from textclf.files import atomic_path, open_parquet
from textclf.inference.frames import PROB_PREFIX
from textclf.inference.rows import Scorer, Skip, scored

log = logging.getLogger(__name__)

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet"}
CHUNK_ROWS = 4096  # rows scored at a time: the Predictor length-sorts within a chunk
CSV_BLOCK_BYTES = 1 << 22
# besides prob_<class>; labels, set_size and needs_review where the model answers with them
PREDICTED = ("label", "probability", "labels", "set_size", "needs_review", "skip_reason")

# A chunk of the table (the kept columns and the text column) and, per row, a reason the
# reader already knows it cannot be scored (None: the text decides).
Chunk = tuple[pa.Table, list]


@dataclass(frozen=True)
class Table:
    """An input table, checked: its columns are there and it can be read."""
    path: Path
    fmt: str
    text: str
    keep: list[str]  # the input columns the output keeps
    schema: pa.Schema  # of `keep`
    rows: int | None  # when known up front (Parquet, JSON Lines), for the progress bar
    chunks: Callable[[], Iterator[Chunk]]

    def read(self) -> Iterator[Chunk]:
        """The chunks in order, CHUNK_ROWS at most (a CSV block holds more); a file that turns
        out unreadable further on stops in one line."""
        try:
            for table, flags in self.chunks():
                for start in range(0, table.num_rows, CHUNK_ROWS):
                    yield table.slice(start, CHUNK_ROWS), flags[start:start + CHUNK_ROWS]
        except (pa.ArrowException, OSError) as err:
            raise _unreadable(self.path, self.fmt, err) from None


def table_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserError(f"--table {path}: unknown format; pass a table ending in {', '.join(FORMATS)}.")
    return fmt


def check_columns(path: str | Path, found: list[str], text: str, id_column: str) -> list[str]:
    """-> the kept columns; a one-line error for a missing or clashing column."""
    missing = [c for c in (text, id_column) if c and c not in found]
    if missing:
        raise UserError(f"{path} has no column {', '.join(map(repr, missing))}; its columns are "
                        f"{found[:20]}. Name them with --text-column / --id-column.")
    keep = [id_column] if id_column else found
    clash = [c for c in keep if c in PREDICTED or c.startswith(PROB_PREFIX)]
    if clash:
        raise UserError(f"{path} has columns the predictions are written to ({clash[:5]}); pass "
                        "--id-column ID to keep only an id column, or rename them.")
    return keep


def _unreadable(path: Path, fmt: str, err: Exception) -> UserError:
    detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    need = {"parquet": "a whole Parquet file", "jsonl": "UTF-8 JSON Lines"}.get(fmt, "UTF-8 with a header row")
    return UserError(f"{path} could not be read as {fmt.upper()} ({detail}); it must be {need}: fix the file.")


def open_table(path: str | Path, text: str = "text", id_column: str = "") -> Table:
    """The table at `path`, checked before a model is loaded: format, readable, columns."""
    path = Path(path)
    fmt = table_format(path)
    if not path.is_file():
        raise UserError(f"--table {path} is not a file; pass the table to score.")
    try:
        if fmt == "parquet":
            return _parquet_table(path, text, id_column)
        if fmt == "jsonl":
            return _jsonl_table(path, text, id_column)
        return _csv_table(path, fmt, text, id_column)
    except (pa.ArrowException, OSError) as err:
        raise _unreadable(path, fmt, err) from None


def _parquet_table(path: Path, text: str, id_column: str) -> Table:
    reader = open_parquet(path)
    schema = reader.schema_arrow
    keep = check_columns(path, schema.names, text, id_column)
    kind = schema.field(text).type
    value = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_string_view(value)):
        raise UserError(f"{path}: column {text!r} holds {kind}, not text; name the text column "
                        "with --text-column.")
    read = list(dict.fromkeys([*keep, text]))

    def chunks() -> Iterator[Chunk]:
        for batch in open_parquet(path).iter_batches(batch_size=CHUNK_ROWS, columns=read):
            yield pa.Table.from_batches([batch]), [None] * batch.num_rows
    return Table(path, "parquet", text, keep, pa.schema([schema.field(c) for c in keep]),
                 reader.metadata.num_rows, chunks)


def _csv_options(fmt: str, skipped: list[int]) -> tuple[pcsv.ReadOptions, pcsv.ParseOptions]:
    """A TSV quotes nothing (a `"` is text, as most exports write it); `skipped` gets the record
    number of each row with the wrong number of fields (pyarrow numbers them with one thread)."""
    def skip(row) -> str:
        skipped.append(row.number)
        return "skip"
    quoted = fmt == "csv"
    parse = pcsv.ParseOptions(delimiter="," if quoted else "\t", quote_char='"' if quoted else False,
                              newlines_in_values=quoted, invalid_row_handler=skip)
    return pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False), parse


def _csv_table(path: Path, fmt: str, text: str, id_column: str) -> Table:
    names = pcsv.open_csv(path, *_csv_options(fmt, [])).schema.names
    keep = check_columns(path, names, text, id_column)
    read = list(dict.fromkeys([*keep, text]))

    def chunks() -> Iterator[Chunk]:
        skipped: list[int] = []
        # Every column as a string: types inferred from the first block could fail on a later one.
        convert = pcsv.ConvertOptions(include_columns=read, column_types={c: pa.string() for c in read},
                                      strings_can_be_null=False)
        reader = pcsv.open_csv(path, *_csv_options(fmt, skipped), convert)
        pending: deque[int] = deque()
        first = 2  # the record number of the next row: the header is record 1
        for batch in reader:
            pending.extend(skipped)
            skipped.clear()
            table, first = _put_back(pa.Table.from_batches([batch]), first, pending)
            yield _flag_nulls(table, text)
        pending.extend(skipped)
        if pending:  # malformed rows after the last good one
            yield _flag_nulls(_put_back(reader.schema.empty_table(), first, pending)[0], text)
    return Table(path, fmt, text, keep, pa.schema([(c, pa.string()) for c in keep]), None, chunks)


def _put_back(table: pa.Table, first: int, pending: deque[int]) -> tuple[pa.Table, int]:
    """pyarrow leaves a malformed row out: put a null row back where it was. `first` is the
    record number of the table's first row -> (table, the record number after it)."""
    places: list[int] = []
    while pending and pending[0] - first <= table.num_rows + len(places):
        places.append(pending.popleft() - first)
    if not places:
        return table, first + table.num_rows
    hole = np.zeros(table.num_rows + len(places), dtype=bool)
    hole[places] = True
    index = np.zeros(len(hole), dtype=np.int64)
    index[~hole] = np.arange(table.num_rows)
    return table.take(pa.array(index, mask=hole)), first + len(hole)


def _flag_nulls(table: pa.Table, text: str) -> Chunk:
    """A CSV's text is never null (strings_can_be_null=False) but in a malformed row put back."""
    return table, [Skip.MALFORMED_LINE if t is None else None for t in table.column(text).to_pylist()]


def _jsonl_records(path: Path) -> Iterator[dict | None]:
    """One object per non-blank line, None for a line that is not a JSON object."""
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:  # not JSON, or not UTF-8
                record = None
            yield record if isinstance(record, dict) else None


def _as_text(value) -> str | None:
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _jsonl_table(path: Path, text: str, id_column: str) -> Table:
    """A first pass finds the columns (any object may leave a field out) and counts the rows."""
    found: dict[str, None] = {}
    rows = 0
    for record in _jsonl_records(path):
        rows += 1
        found.update(dict.fromkeys(record or ()))
    if not found:
        raise UserError(f"{path} holds no JSON object ({rows} lines); JSON Lines is one object per line.")
    keep = check_columns(path, list(found), text, id_column)
    read = list(dict.fromkeys([*keep, text]))

    def chunk(records: list[dict | None]) -> Chunk:
        table = pa.table({c: pa.array([_as_text(r.get(c)) if r else None for r in records], pa.string())
                          for c in read})
        flags = [Skip.MALFORMED_LINE if r is None else
                 Skip.NON_STRING if r.get(text) is not None and not isinstance(r[text], str) else None
                 for r in records]
        return table, flags

    def chunks() -> Iterator[Chunk]:
        records: list[dict | None] = []
        for record in _jsonl_records(path):
            records.append(record)
            if len(records) == CHUNK_ROWS:
                yield chunk(records)
                records = []
        if records:
            yield chunk(records)
    return Table(path, "jsonl", text, keep, pa.schema([(c, pa.string()) for c in keep]), rows, chunks)


def _predictions(table: pa.Table, flags: list, text: str, scorer: Scorer,
                 schema: pa.Schema) -> tuple[list[pa.Array], list[Skip | None]]:
    """The chunk's prediction columns (null where a row is skipped) and skip reasons."""
    texts = table.column(text).to_pylist()
    frame, reasons = scored(texts, flags, scorer)
    skipped = np.array([r is not None for r in reasons], dtype=bool)
    index = np.zeros(len(texts), dtype=np.int64)
    index[~skipped] = np.arange(len(frame))
    spread = pa.Table.from_pandas(frame, schema=schema, preserve_index=False).take(pa.array(index, mask=skipped))
    return [*spread.columns, pa.array([r.value if r else None for r in reasons], pa.string())], reasons


def score_table(table: Table, scorer: Scorer, out: str | Path) -> Counter:
    """Score every row of `table` into the Parquet file `out`, written atomically; -> the
    count of rows per skip reason ("scored": the rows that have predictions)."""
    predicted = answer_schema(scorer)
    schema = pa.schema([*table.schema, *predicted, ("skip_reason", pa.string())])
    counts: Counter = Counter()
    bar = tqdm(total=table.rows, unit="rows", disable=not sys.stderr.isatty())
    with bar, atomic_path(out) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for chunk, flags in table.read():
            columns, reasons = _predictions(chunk, flags, table.text, scorer, predicted)
            kept = [chunk.column(c) for c in table.keep]
            writer.write_table(pa.Table.from_arrays([*kept, *columns], schema=schema))
            counts.update(r.value if r else "scored" for r in reasons)
            if "needs_review" in predicted.names:
                counts["needs_review"] += int(pc.sum(columns[predicted.names.index("needs_review")]).as_py() or 0)
            bar.update(chunk.num_rows)
    skips = ", ".join(f"{r} {n}" for r, n in sorted(counts.items()) if r not in ("scored", "needs_review")) or "none"
    review = f"; {counts['needs_review']} need review" if "needs_review" in predicted.names else ""
    log.info("scored %d of %d rows of %s into %s%s; skipped: %s", counts["scored"],
             counts.total() - counts["needs_review"], table.path, out, review, skips)
    return counts


def answer_schema(scorer: Scorer) -> pa.Schema:
    """The prediction columns answered_frame gives for this scorer, typed."""
    multilabel, review = scorer.thresholds is not None, scorer.review
    several = [("labels", pa.list_(pa.string()))] if multilabel else []
    sets = [("labels", pa.list_(pa.string())), ("set_size", pa.int64())] \
        if not multilabel and review is not None and review.cut is not None else []
    flag = [("needs_review", pa.bool_())] if review is not None else []
    return pa.schema([*several, ("label", pa.string()), ("probability", pa.float64())]
                     + [(PROB_PREFIX + c, pa.float64()) for c in scorer.labels] + sets + flag)
