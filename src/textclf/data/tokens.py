"""The tokenize stage and the token store: unpadded ids (truncated by data.tokenizing's
rules) of every document, read back as compact arrays. With tokenize.truncation chunks, a
row per window instead: a document's windows are consecutive rows, numbered by `window`.

Padding happens per batch at train time (dynamic padding), so nothing here pads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textclf.config import TokenizeParams, load_params
from textclf.errors import UserError
from textclf.files import atomic_path, open_parquet, write_csv, write_json
from textclf.data.tokenizing import CHUNKS, Encoded, RustTokenizer, encode_texts
from textclf.data.labelsets import is_multilabel, task_metadata
from textclf.model_source import hub_offline, not_found, resolve_model_name

CHUNK = 2_000  # documents tokenized and written per record batch: their encodings are the peak


class TokenIds:
    """The token ids of many documents as Arrow holds a list<int32> column: one int32 array of
    every id and N + 1 offsets; document i is values[offsets[i]:offsets[i + 1]]. 4 bytes a
    token, where lists of Python ints take about 36."""

    def __init__(self, values: np.ndarray, offsets: np.ndarray):
        self.values, self.offsets = values, offsets

    @classmethod
    def from_arrow(cls, column) -> "TokenIds":
        """A list<int32> column (chunked or not) -> TokenIds, without a Python int per id."""
        import pyarrow as pa

        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        offsets = array.offsets.to_numpy()
        return cls(array.values.to_numpy()[offsets[0]:offsets[-1]], offsets - offsets[0])

    @classmethod
    def concat(cls, parts: list["TokenIds"]) -> "TokenIds":
        values = np.concatenate([p.values for p in parts]) if parts else np.zeros(0, np.int32)
        lengths = np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, np.int64)
        return cls(values, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))

    def compact(self) -> "TokenIds":
        """The same ids in 2 bytes each where every id is below 65 536 (BERT-family
        vocabularies are about 30 000): half the memory of a training split."""
        fits = len(self.values) == 0 or int(self.values.max()) < 2 ** 16
        return TokenIds(self.values.astype(np.uint16), self.offsets) if fits else self

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, indices) -> "TokenIds":
        """The documents at `indices`, in that order, as new arrays."""
        indices = np.asarray(indices, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(self.lengths[indices])]).astype(np.int64)
        # views joined once: the result is the only new memory (a gather index of every
        # token would be int64, twice the size of the ids it gathers)
        values = np.concatenate([self.values[self.offsets[i]:self.offsets[i + 1]] for i in indices]
                                or [self.values[:0]])
        return TokenIds(values, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.values[self.offsets[i]:self.offsets[i + 1]]  # (T,) int32, a view


def token_batch(doc_ids, labels, ids: list[list[int]], lengths, window=None):
    """One record batch of the token store: doc_id, label (lists or Arrow string arrays),
    input_ids list<int32>, n_tokens (untruncated, int32) and, with chunks, window (int32: the
    row's place among its document's windows, from 0). Without chunks the store has no
    window column, and is byte for byte what it was before chunks existed."""
    import pyarrow as pa

    def strings(values):
        return values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    columns = [strings(doc_ids), strings(labels), pa.array(ids, pa.list_(pa.int32())),
               pa.array(lengths, pa.int32())]
    names = ["doc_id", "label", "input_ids", "n_tokens"]
    if window is not None:
        columns, names = columns + [pa.array(window, pa.int32())], names + ["window"]
    return pa.record_batch(columns, names=names)


def encoded_batch(part, enc: Encoded):
    """A corpus record batch (doc_id, label) and its Encoded texts -> a token store batch;
    with chunks each document's doc_id, label and n_tokens repeat on each of its windows."""
    import pyarrow as pa

    owner = enc.owner
    if owner is None or enc.counts is None:
        return token_batch(part.column("doc_id"), part.column("label"), enc.ids, enc.lengths)
    counts = np.asarray(enc.counts)
    first = np.cumsum(counts) - counts  # each document's first row
    rows = pa.array(owner)
    return token_batch(part.column("doc_id").take(rows), part.column("label").take(rows), enc.ids,
                       np.asarray(enc.lengths, dtype=np.int32)[owner], np.arange(len(owner)) - first[owner])


def load_ids_tokenizer(name: str):
    """The tokenizer of model.name for tokenize_texts: its tokenizer.json without transformers
    where the model is a folder or a package, else (a hub id) transformers' own, from the hub
    cache unless HF_HUB_OFFLINE=0 (model_source.hub_offline)."""
    folder = Path(resolve_model_name(name))
    if (folder / "tokenizer.json").is_file():
        return RustTokenizer(folder / "tokenizer.json")
    from transformers import AutoTokenizer  # a hub id only: the one transformers import in data/

    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=hub_offline())
    except OSError as err:
        raise not_found(name, err) from None


def write_tokens(tokenizer, corpus: str | Path, params: TokenizeParams,
                 path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Tokenize the corpus parquet (doc_id, label, text) CHUNK documents at a time, read and
    written as record batches (the token store, written atomically), so that memory holds
    one chunk -> (every document's untruncated length, its rows in the store), (N,) int32 each."""
    import pyarrow.parquet as pq

    lengths, rows = [], []
    source = open_parquet(corpus)
    task = task_metadata(is_multilabel(source.schema_arrow.metadata))  # train reads label sets by it
    with atomic_path(path) as tmp:
        writer = None
        for part in source.iter_batches(batch_size=CHUNK, columns=["doc_id", "label", "text"]):
            enc = encode_texts(tokenizer, part.column("text").to_pylist(), params.max_length,
                               params.truncation, params.stride)
            batch = encoded_batch(part, enc)
            writer = writer or pq.ParquetWriter(tmp, batch.schema.with_metadata(task) if task else batch.schema)
            writer.write_batch(batch)
            lengths.append(np.asarray(enc.lengths, dtype=np.int32))
            rows.append(np.asarray(enc.counts or [1] * len(enc.lengths), dtype=np.int32))
        if writer is None:
            raise UserError("the corpus is empty: there is nothing to tokenize.")
        writer.close()
    return np.concatenate(lengths), np.concatenate(rows)


def length_stats(lengths: np.ndarray | list[int], max_length: int, truncation: str = "head+tail",
                 windows: np.ndarray | list[int] | None = None) -> dict:
    """Untruncated lengths (special tokens included) -> their stats, and what the configured
    truncation leaves unread: head, tail and head+tail skip max(0, length - max_length) tokens
    of a document (its body beyond the budget), chunks none. pct_truncated: documents longer
    than max_length, cut (0 with chunks, which read them whole: pct_multi_window says how many
    take more than one window, `windows` per document)."""
    arr = np.asarray(lengths)
    unread = 0 if truncation == CHUNKS else int(np.clip(arr.astype(np.int64) - max_length, 0, None).sum())
    longer = round(100.0 * float((arr > max_length).mean()), 2)
    stats = {
        "documents": int(arr.size),
        "mean": round(float(arr.mean()), 1),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "max": int(arr.max()),
        "max_length": max_length,
        "pct_truncated": 0.0 if truncation == CHUNKS else longer,
        "truncation": truncation,
        "unread_tokens": unread,
        # of every token, special tokens included
        "pct_tokens_unread": round(100.0 * unread / max(int(arr.sum()), 1), 2),
    }
    if truncation == CHUNKS and windows is not None:
        counts = np.asarray(windows)
        stats.update(windows=int(counts.sum()), windows_mean=round(float(counts.mean()), 2),
                     windows_max=int(counts.max()), pct_multi_window=longer)
    return stats


def length_histogram(lengths: np.ndarray | list[int], bins: int = 20) -> list[dict]:
    """Documents per token-length bin (untruncated lengths), for a DVC bar plot. Equal bins from
    the shortest to the longest document; where the longest is past twice the 99th percentile
    (one 20 000-token document among 100-token ones), equal bins up to that percentile and one
    last bin for the longer rest, so the outlier does not squeeze every other document into
    the first bin."""
    arr = np.asarray(lengths)
    top = int(np.ceil(np.percentile(arr, 99))) if arr.size else 0
    edges: int | np.ndarray = bins
    if arr.size and arr.max() > 2 * top > 2 * arr.min():
        edges = np.append(np.linspace(arr.min(), top, bins), arr.max())
    counts, edges = np.histogram(arr, bins=edges)
    return [{"tokens_from": int(lo), "tokens_to": int(hi), "documents": int(n)}
            for lo, hi, n in zip(edges[:-1], edges[1:], counts)]


@dataclass(frozen=True)
class TokenizePaths:
    """What the tokenize stage reads and writes, as its command line names them."""
    params: str
    corpus: str
    tokens: str  # written: the token store (parquet)
    stats: str  # written: token-length stats (JSON)
    histogram: str  # written: documents per length bin (CSV)


def run_tokenize(paths: TokenizePaths) -> None:
    """The tokenize stage: the corpus's token ids, their length stats and histogram."""
    import pandas as pd  # here: a served model imports this module, and needs no stage

    params = load_params(paths.params)
    tokenizer = load_ids_tokenizer(params.model.name)
    lengths, windows = write_tokens(tokenizer, paths.corpus, params.tokenize, paths.tokens)
    stats = length_stats(lengths, params.tokenize.max_length, params.tokenize.truncation, windows)
    write_json(paths.stats, stats)
    write_csv(pd.DataFrame(length_histogram(lengths)), paths.histogram)
    logging.getLogger("tokenize").info("tokenized %d documents: %s", len(lengths), stats)
