"""What ingest keeps of every document while the source streams past, so that a million
rows never sit in memory as Python objects: a few small columns (path, label, content
digest, encoding), the texts spilled in record batches to an Arrow IPC file beside the
output, and with near-duplicate detection each text's MinHash row (4 x num_perm bytes).
After the pass: exact duplicates and conflicts from the digests (numpy), then the corpus
written from the spill, record batch by record batch."""
from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from textclf.data.ingest_report import IngestReport, SkipReason
from textclf.data.labelsets import TASK_KEY

SPILL_ROWS = 10_000  # texts per spilled record batch, and rows per written corpus batch
SCHEMA = pa.schema([(c, pa.string()) for c in
                    ("doc_id", "label", "text", "source_path", "content_hash", "encoding", "group",
                     "split_key")])


def doc_id(path: str) -> str:
    """Stable across runs and machines: derived from the path below the source root only."""
    return hashlib.sha1(path.encode()).hexdigest()[:16]


class Ledger:
    """Documents in the order they were added, index i for the i-th; add, then close."""

    def __init__(self, spill: Path,
                 sketch: Callable[[list[str]], tuple[np.ndarray, np.ndarray]] | None):
        self.paths: list[str] = []
        self.labels: list[str] = []
        self.encodings: list[str] = []
        self._digests: list[bytes] = []  # sha256 of the normalised text (exact duplicates)
        self._raw: list[bytes] = []  # first 8 bytes of the sha256 of the source bytes
        self._names: dict[str, str] = {}  # one str object per distinct label or encoding
        self._texts: list[str] = []
        self._sketch = sketch
        self._sketches: list[np.ndarray] = []  # MinHash rows, a batch of texts at a time
        self._keys: list[np.ndarray] = []  # each text's smallest shingle hash
        self._spill = spill
        self._writer: pa.ipc.RecordBatchFileWriter | None = None

    def add(self, label: str, path: str, text: str, digest: bytes, encoding: str, raw: bytes) -> None:
        self.paths.append(path)
        self.labels.append(self._names.setdefault(label, label))
        self.encodings.append(self._names.setdefault(encoding, encoding))
        self._digests.append(digest)
        self._raw.append(raw[:8])
        self._texts.append(text)
        if len(self._texts) == SPILL_ROWS:
            self._flush()

    @property
    def digests(self) -> list[bytes]:
        """sha256 of each document's normalised text, in ledger order."""
        return self._digests

    def _flush(self) -> None:
        if not self._texts:
            return
        batch = pa.record_batch([pa.array(self._texts, pa.string())], names=["text"])
        self._writer = self._writer or pa.ipc.new_file(str(self._spill), batch.schema)
        self._writer.write_batch(batch)
        if self._sketch:
            rows, keys = self._sketch(self._texts)
            self._sketches.append(rows)
            self._keys.append(keys)
        self._texts = []

    def close(self) -> None:
        self._flush()
        if self._writer:
            self._writer.close()

    def sketches(self, order: np.ndarray) -> np.ndarray:
        """(len(order), num_perm) MinHash rows of the documents at `order`."""
        rows = np.concatenate(self._sketches)
        self._sketches = []
        return rows if np.array_equal(order, np.arange(len(rows))) else rows[order]

    def split_keys(self, order: np.ndarray, group_of: np.ndarray) -> list[str]:
        """The stable split's key of each document at `order` (group_of as for `write`): the
        smallest shingle hash over its near-duplicate group, or without near-duplicate
        detection its content hash (every document its own group)."""
        if not self._sketch:
            return [self._digests[i].hex() for i in order.tolist()]
        keys = np.concatenate(self._keys)[order] if len(order) else np.zeros(0, np.uint64)
        smallest = keys.copy()
        np.minimum.at(smallest, group_of, keys)  # each group's first document gathers the minimum
        return [f"{k:016x}" for k in smallest[group_of].tolist()]

    def dedupe(self, report: IngestReport) -> np.ndarray:
        """Keep the first copy of each text; drop texts that appear under two labels ->
        the kept indices, ascending. Both are counted and listed in `report`."""
        digests = np.array(self._digests, dtype="S32")
        _, first, inverse, counts = np.unique(digests, return_index=True, return_inverse=True,
                                              return_counts=True)
        keep = np.zeros(len(digests), bool)
        keep[first[counts == 1]] = True
        members: dict[int, list[int]] = defaultdict(list)
        for i in np.flatnonzero(counts[inverse] > 1).tolist():
            members[int(inverse[i])].append(i)
        for group in sorted(members.values()):  # in order of first appearance
            labels = sorted({self.labels[i] for i in group})
            if len(labels) > 1:
                report.drop(SkipReason.CONFLICTING_LABEL, len(group))
                report.conflicts.append({"content_hash": self._digests[group[0]].hex(),
                                         "labels": labels, "paths": [self.paths[i] for i in group]})
                continue
            keep[group[0]] = True
            report.drop(SkipReason.DUPLICATE, len(group) - 1)
            report.duplicates_not_byte_identical += len({self._raw[i] for i in group}) - 1
            report.duplicate_groups.append([self.paths[i] for i in group])
        return np.flatnonzero(keep)

    def texts_at(self, indices: np.ndarray) -> Iterator[tuple[int, str]]:
        """(i, text) for ascending `indices`, reading the spill one batch at a time."""
        with pa.OSFile(str(self._spill)) as fh:
            reader = pa.ipc.open_file(fh)
            cuts = np.searchsorted(indices, np.arange(1, reader.num_record_batches + 1) * SPILL_ROWS)
            lo = 0
            for b, hi in enumerate(cuts):
                if hi > lo:
                    picked = indices[lo:hi]
                    texts = reader.get_batch(b).column(0).take(pa.array(picked - b * SPILL_ROWS))
                    yield from zip(picked.tolist(), texts.to_pylist())
                lo = hi

    def _text_batches(self, order: np.ndarray) -> Iterator[pa.Array]:
        """The texts at ascending `order`, SPILL_ROWS at a time, reading the spill one batch
        at a time: the documents were added in corpus order (data.sources sorts a folder's
        entries by path), so no order needs the whole spill in memory."""
        if len(order) > 1 and not (np.diff(order) > 0).all():
            raise ValueError("Ledger.write takes ascending indices")
        texts: list[str] = []
        for _, text in self.texts_at(order):
            texts.append(text)
            if len(texts) == SPILL_ROWS:
                yield pa.array(texts, pa.string())
                texts = []
        if texts:
            yield pa.array(texts, pa.string())

    def write(self, path: Path, order: np.ndarray, group_of: np.ndarray, task: str = "") -> None:
        """The corpus parquet: the documents at `order`; group_of[k] is the position (in
        `order`) of document k's group's first document. `task` (multilabel) goes into the
        file's metadata (data.labelsets); the default writes the schema as it always was."""
        keys = self.split_keys(order, group_of)
        ids = [doc_id(self.paths[i]) for i in order.tolist()]
        schema = SCHEMA.with_metadata({TASK_KEY: task.encode()}) if task else SCHEMA
        with pq.ParquetWriter(str(path), schema) as writer:
            for k, texts in enumerate(self._text_batches(order)):
                at = slice(k * SPILL_ROWS, k * SPILL_ROWS + len(texts))
                rows = order[at].tolist()
                columns = {"doc_id": ids[at], "label": [self.labels[i] for i in rows], "text": texts,
                           "source_path": [self.paths[i] for i in rows],
                           "content_hash": [self._digests[i].hex() for i in rows],
                           "encoding": [self.encodings[i] for i in rows],
                           "group": [ids[g] for g in group_of[at].tolist()], "split_key": keys[at]}
                writer.write_batch(pa.record_batch(
                    [v if isinstance(v, pa.Array) else pa.array(v, pa.string()) for v in columns.values()],
                    schema=schema))
