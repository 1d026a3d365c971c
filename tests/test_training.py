"""Batching, schedules and device selection (pure, fast)."""
import numpy as np
import torch

from textclf.batching import Collator, LengthGroupedBatchSampler, sorted_batches
from textclf.training import lr_factor, make_accelerator


def test_length_grouped_batches_cover_every_index_once_and_are_seeded():
    lengths = np.random.default_rng(0).integers(5, 500, size=1000).tolist()
    sampler = LengthGroupedBatchSampler(lengths, batch_size=16, seed=3)
    sampler.set_epoch(1)
    first = list(sampler)
    assert sorted(i for b in first for i in b) == list(range(1000)) and len(first) == len(sampler)
    assert first == list(sampler)  # same seed and epoch: same batches
    sampler.set_epoch(2)
    assert first != list(sampler)  # a new epoch reshuffles


def padding_fraction(batches, lengths):
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths) / padded


def test_grouping_by_length_cuts_padding():
    lengths = np.random.default_rng(0).integers(5, 500, size=1000).tolist()
    grouped = list(LengthGroupedBatchSampler(lengths, 16, seed=0))
    order = np.random.default_rng(0).permutation(1000)
    random_batches = [order[i:i + 16].tolist() for i in range(0, 1000, 16)]
    assert padding_fraction(grouped, lengths) < 0.1 < padding_fraction(random_batches, lengths)
    assert padding_fraction(sorted_batches(lengths, 16), lengths) < 0.05


def test_collator_pads_to_the_longest_in_the_batch():
    batch = Collator(pad_id=0)([([101, 7, 102], 1), ([101, 102], 0)])
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0]


def test_linear_warmup_then_decay_and_constant():
    linear, constant = lr_factor(100, 0.1, "linear"), lr_factor(100, 0.1, "constant")
    assert linear(0) == 0.1 and linear(9) == 1.0 and linear(55) == 0.5 and linear(100) == 0.0
    assert constant(9) == 1.0 and constant(99) == 1.0
    assert lr_factor(10, 0.0, "constant")(0) == 1.0  # no warmup


def test_device_selection_on_this_machine():
    accelerator = make_accelerator()
    if torch.cuda.is_available():
        expected = "bf16" if torch.cuda.is_bf16_supported() else "no"
        assert accelerator.device.type == "cuda" and accelerator.mixed_precision == expected
    else:
        assert accelerator.device.type in ("cpu", "mps") and accelerator.mixed_precision == "no"
