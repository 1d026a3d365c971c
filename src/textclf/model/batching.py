"""Dynamic padding and length-grouped batches.

Documents are stored unpadded; each batch is padded only to its own longest
member. Grouping similar lengths into a batch keeps that padding small.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset, Sampler

from textclf.data.tokens import TokenIds
from textclf.io import UserError

# Batches are formed inside windows of this many batches, sorted by length there:
# enough to group lengths well, small enough to keep the epoch order random.
MEGABATCH = 50
PAD_LABEL = -100  # the label of a padding entry: cross-entropy's ignore_index, so its weight is 0


@dataclass
class Split:
    input_ids: TokenIds | list[list[int]]  # TokenIds from the token store; lists where a test builds one
    labels: list[int]
    doc_ids: list[str] | None = None  # None where a test builds a Split by hand


def read_token_splits(tokens_path: str, splits_path: str,
                      labels: list[str] | None = None) -> tuple[dict[str, Split], list[str]]:
    """Join token ids with the split assignment -> ({split name: Split}, label names).
    `labels` fixes the label order (a trained model's); by default it is sorted."""
    table = pq.read_table(tokens_path, columns=["doc_id", "label", "input_ids"], memory_map=True)
    ids = TokenIds.from_arrow(table.column("input_ids"))  # int32 arrays, no Python int per id
    frame = table.select(["doc_id", "label"]).to_pandas()
    frame["row"] = np.arange(len(frame))
    frame = frame.merge(pd.read_parquet(splits_path, columns=["doc_id", "split"]), on="doc_id",
                        validate="one_to_one")
    found = sorted(frame["label"].unique())
    labels = found if labels is None else labels
    unknown = sorted(set(found) - set(labels))
    if unknown:
        raise UserError(f"labels {unknown} in {tokens_path} are not among the model's labels "
                         f"{labels}; the model folder is stale: run `dvc repro train`.")
    index = {label: i for i, label in enumerate(labels)}
    splits = {name: Split(ids.take(part["row"].to_numpy()), [index[l] for l in part["label"]],
                          part["doc_id"].tolist())
              for name, part in frame.groupby("split")}
    return splits, labels


class TokenDataset(Dataset):
    def __init__(self, input_ids: list[list[int]], labels: list[int] | None = None):
        self.input_ids = input_ids
        self.labels = labels

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int):
        if isinstance(i, Padding):
            return self.input_ids[i], PAD_LABEL
        return self.input_ids[i], (-1 if self.labels is None else self.labels[i])


class Padding(int):
    """An index a sampler yields as padding: that document, trained on with weight 0."""


class LengthGroupedBatchSampler(Sampler):
    """Seeded, per-epoch shuffled batches of indices with similar lengths."""

    def __init__(self, lengths: list[int], batch_size: int, seed: int):
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


def sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Longest first, for inference: least padding, and any out-of-memory shows up at once."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size].tolist() for i in range(0, len(order), batch_size)]


class Collator:
    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items) -> dict[str, torch.Tensor]:
        seqs, labels = zip(*items)
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (B, T)
        for row, seq in enumerate(seqs):
            input_ids[row, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            attention_mask[row, :len(seq)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "labels": torch.as_tensor(labels, dtype=torch.long)}
