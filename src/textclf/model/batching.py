"""Dynamic padding and length-grouped batches.

Documents are stored unpadded; each batch is padded only to its own longest
member. Grouping similar lengths into a batch keeps that padding small.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.utils.data import Dataset, Sampler

from textclf.data.labelsets import is_multilabel, labels_of
from textclf.data.tokens import TokenIds
from textclf.errors import UserError
from textclf.files import open_parquet

# Batches are formed inside windows of this many batches, sorted by length there:
# enough to group lengths well, small enough to keep the epoch order random.
MEGABATCH = 50
READ_ROWS = 10_000  # token-store rows read at a time
SPLITS = ("train", "validation", "test")
PAD_LABEL = -100  # the label of a padding entry: cross-entropy's ignore_index, so its weight is 0


@dataclass
class Split:
    """A split's documents: one row of ids each, or with tokenize.truncation chunks one per
    window (a document's windows consecutive); labels and doc_ids are per document.
    Multi-label (ingest.task: multilabel): a label is the document's multi-hot row, C floats."""
    input_ids: TokenIds | list[list[int]]  # TokenIds from the token store; lists where a test builds one
    labels: list  # per document: a class index, or (multilabel) a multi-hot list of C 0.0 / 1.0
    doc_ids: list[str] | None = None  # None where a test builds a Split by hand
    owner: np.ndarray | None = None  # per row of input_ids, its document's index; None: row i is document i
    multilabel: bool = False

    def row_labels(self) -> list:
        """Per row of input_ids, its document's label."""
        return self.labels if self.owner is None else [self.labels[d] for d in self.owner.tolist()]

    def row_weights(self) -> np.ndarray | None:
        """Per window, 1 / its document's windows, scaled by windows / documents so that the
        mean weight is 1: every document weighs the same in an epoch and the loss keeps its
        scale (and the learning rate its meaning). None without chunks: no weights at all."""
        if self.owner is None:
            return None
        counts = np.bincount(self.owner, minlength=len(self.labels))
        return (len(self.owner) / len(self.labels) / counts[self.owner]).astype(np.float32)


def read_token_splits(tokens_path: str, splits_path: str, labels: list[str] | None = None,
                      names: tuple[str, ...] = SPLITS) -> tuple[dict[str, Split], list[str]]:
    """Join token ids with the split assignment -> ({split name: Split} for `names`, label
    names). `labels` fixes the label order (a trained model's); by default it is every label
    of the assigned documents, sorted. The store is read a record batch at a time and only
    the named splits' ids are kept (train holds no test ids), each split in store order. A
    store with a `window` column (tokenize.truncation chunks) gives Splits of windows, with
    `owner`, per document labels and doc_ids. A store of a multi-label corpus (its metadata
    says so) gives multi-hot labels over the label names, each label set's labels."""
    assignment = pd.read_parquet(splits_path, columns=["doc_id", "split"])
    if not assignment["doc_id"].is_unique:
        raise UserError(f"{splits_path} assigns a document twice; rerun `dvc repro split`.")
    split_of = pd.Series(assignment["split"].to_numpy(), index=assignment["doc_id"].to_numpy())
    parts: dict[str, list] = {name: [] for name in names}
    found: set[str] = set()
    store = open_parquet(tokens_path)
    chunked = "window" in store.schema_arrow.names  # tokenize.truncation chunks: a row per window
    multilabel = is_multilabel(store.schema_arrow.metadata)
    columns = ["doc_id", "label", "input_ids"] + (["window"] if chunked else [])
    for batch in store.iter_batches(batch_size=READ_ROWS, columns=columns):
        doc_ids = batch.column("doc_id").to_numpy(zero_copy_only=False)
        label = batch.column("label").to_numpy(zero_copy_only=False)
        window = batch.column("window").to_numpy() if chunked else np.zeros(len(doc_ids), np.int32)
        where = split_of.reindex(doc_ids).to_numpy()  # NaN: a document the split does not assign
        found.update(label[pd.notna(where)].tolist())
        ids = TokenIds.from_arrow(batch.column("input_ids"))
        for name in names:
            rows = np.flatnonzero(where == name)
            parts[name].append((ids.take(rows).compact(), label[rows], doc_ids[rows], window[rows]))
    if multilabel:
        found = {label for label_set in found for label in labels_of(label_set)}
    labels = sorted(found) if labels is None else labels
    unknown = sorted(found - set(labels))
    if unknown:
        raise UserError(f"labels {unknown} in {tokens_path} are not among the model's labels "
                         f"{labels}; the model folder is stale: run `dvc repro train`.")
    index = {label: i for i, label in enumerate(labels)}
    target = multi_hot(index) if multilabel else index.__getitem__
    return {name: joined(got, target, chunked, multilabel) for name, got in parts.items()}, labels


def multi_hot(index: dict[str, int]):
    """label -> its place, as a function of a label set's canonical JSON -> its (C,) multi-hot
    row; label sets repeat, so each is built once."""
    rows: dict[str, list[float]] = {}

    def row(label_set: str) -> list[float]:
        if label_set not in rows:
            hot = [0.0] * len(index)
            for label in labels_of(label_set):
                hot[index[label]] = 1.0
            rows[label_set] = hot
        return rows[label_set]
    return row


def joined(parts: list, target, chunked: bool, multilabel: bool = False) -> Split:
    """A split's (ids, labels, doc_ids, window) parts, in store order -> its Split, each label
    as `target` maps it; with chunks, labels and doc_ids of each document's first window (its
    windows are consecutive rows, in one split), and each row's document."""
    ids = TokenIds.concat([p[0] for p in parts])
    labels = [target(l) for p in parts for l in p[1].tolist()]
    doc_ids = [d for p in parts for d in p[2].tolist()]
    if not chunked:
        return Split(ids, labels, doc_ids, multilabel=multilabel)
    first = np.concatenate([p[3] for p in parts] or [np.zeros(0, np.int32)]) == 0
    owner = np.cumsum(first) - 1
    return Split(ids, [l for l, f in zip(labels, first) if f], [d for d, f in zip(doc_ids, first) if f], owner,
                 multilabel=multilabel)


class TokenDataset(Dataset):
    """Rows of ids with their labels and, with chunks, their loss weights (Split.row_weights)."""

    def __init__(self, input_ids: TokenIds | list[list[int]], labels: list[int] | None = None,
                 weights: np.ndarray | None = None):
        self.input_ids = input_ids
        self.labels = labels
        self.weights = weights

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int):
        label = -1 if self.labels is None else self.labels[i]
        if isinstance(i, Padding):  # a multi-hot row pads as a row of PAD_LABEL: masked out
            label = [PAD_LABEL] * len(label) if isinstance(label, list) else PAD_LABEL
        item = (self.input_ids[i], label)
        return item if self.weights is None else (*item, float(self.weights[i]))


class Padding(int):
    """An index a sampler yields as padding: that document, trained on with weight 0."""


class LengthGroupedBatchSampler(Sampler):
    """Seeded, per-epoch shuffled batches of indices with similar lengths."""

    def __init__(self, lengths: list[int] | np.ndarray, batch_size: int, seed: int):
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths))
        window = self.batch_size * MEGABATCH
        batches = []
        for start in range(0, len(order), window):
            chunk = order[start:start + window]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        for b in rng.permutation(len(batches)):  # the short batch too: RankShard splits it anywhere
            yield batches[b]


class RankShard(Sampler):
    """Process `rank` of `world`: its share of every global batch `batches` yields, a near-equal
    contiguous slice, so that every document trains once per epoch on one of the processes,
    in the step where one process would train it. The loss is weighted by the share (see
    training.train_steps). A slice that comes out empty (a last batch smaller than `world`) is
    one padding entry of weight 0: every process must take part in every step."""

    def __init__(self, batches: LengthGroupedBatchSampler, rank: int, world: int):
        self.batches, self.rank, self.world = batches, rank, world

    def set_epoch(self, epoch: int) -> None:
        self.batches.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for batch in self.batches:
            n = len(batch)
            yield batch[n * self.rank // self.world:n * (self.rank + 1) // self.world] or [Padding(batch[0])]


class Collator:
    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items) -> dict[str, torch.Tensor]:
        """(ids, label) items, or (ids, label, weight) ones -> a padded batch, with `weights`
        (B,) float32 only for the latter; `labels` (B,) int64, or (B, C) float32 multi-hot rows."""
        seqs, labels = [item[0] for item in items], [item[1] for item in items]
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, T)
        for row, seq in enumerate(seqs):
            input_ids[row, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            attention_mask[row, :len(seq)] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "labels": torch.as_tensor(labels, dtype=torch.float32 if isinstance(labels[0], list)
                                           else torch.long)}
        if len(items[0]) == 3:
            batch["weights"] = torch.as_tensor([item[2] for item in items], dtype=torch.float32)
        return batch
