"""Pure helpers of throughput.py (no torch, no model): document subsets, padding accounting,
token-budget batches, training FLOPs / MFU (best-of runs, goals and the table are
benchmarks/timing.py's). Unit-tested in tests/test_throughput_helpers.py."""
from __future__ import annotations

import numpy as np

H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s of an H100/H200 SXM (no sparsity)


def pick_documents(n_total: int, n: int | None, seed: int) -> list[int]:
    """`n` distinct document indices, seeded, in corpus order (all of them for n=None).
    Every contender then sees exactly the same documents."""
    if n is None or n >= n_total:
        return list(range(n_total))
    return sorted(np.random.default_rng(seed).choice(n_total, size=n, replace=False).tolist())


def padding_of(batches: list[list[int]], lengths: list[int], width: int | None = None) -> dict:
    """Real and padded tokens of `batches` (lists of indices into `lengths`); each batch is
    padded to its longest member, or to `width` (pad-to-max_length) when given."""
    real = sum(lengths[i] for b in batches for i in b)
    padded = sum((width or max(lengths[i] for i in b)) * len(b) for b in batches)
    return {"real_tokens": real, "padded_tokens": padded,
            "padding": 1 - real / padded if padded else 0.0}


def chunks(n: int, size: int) -> list[list[int]]:
    """0..n-1 in input order, `size` at a time: how an unsorted pipeline batches."""
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]


def token_budget_batches(lengths: list[int], budget: int, seed: int, window: int = 800) -> list[list[int]]:
    """Batches capped by padded tokens (rows x longest row <= budget), not by documents.
    Lengths are sorted inside seeded windows (as LengthGroupedBatchSampler does), so short
    documents share a batch with many others; the batch order is shuffled."""
    rng = np.random.default_rng(seed)
    lengths_arr = np.asarray(lengths)
    order = rng.permutation(len(lengths))
    batches: list[list[int]] = []
    for start in range(0, len(order), window):
        chunk = order[start:start + window]
        batch: list[int] = []
        for i in chunk[np.argsort(-lengths_arr[chunk], kind="stable")].tolist():
            # Sorted longest first, so the batch's first row sets its padded width.
            width = lengths[batch[0]] if batch else lengths[i]
            if batch and (len(batch) + 1) * width > budget:
                batches.append(batch)
                batch = []
            batch.append(i)
        if batch:
            batches.append(batch)
    return [batches[b] for b in rng.permutation(len(batches))]


def train_flops(n_params: int, lengths: list[int], layers: int, hidden: int) -> float:
    """Model FLOPs of one forward+backward over documents of `lengths` real tokens.

    6 x parameters x tokens for the weight matmuls (2 forward + 4 backward per multiply-add;
    pass the matmul parameters, i.e. without embedding tables, which are gathered, not
    multiplied) plus attention: per layer and sequence QK^T and AV cost 2 x 2 x T^2 x d
    forward, x3 with backward = 12 x layers x d x T^2 (PaLM, appendix B). Padding is not
    counted: it is work the hardware does but the model does not need."""
    tokens = sum(lengths)
    attention = 12 * layers * hidden * sum(t * t for t in lengths)
    return 6.0 * n_params * tokens + float(attention)


def mfu(flops: float, seconds: float, peak: float = H100_BF16_PEAK) -> float:
    """Model FLOPs utilisation: useful FLOP/s over the accelerator's peak."""
    return flops / seconds / peak
