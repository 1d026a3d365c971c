"""Model vs baseline on the same test documents: is the difference more than noise?

A test split of ~300 documents moves accuracy by about a point from seed to seed, so a gap
of a few documents proves nothing. Two paired views of the same per-document outcomes:
- the exact McNemar test: of the documents only one system gets right, is the split
  between the two further from 50/50 than chance allows?
- a bootstrap 95 % interval of the accuracy difference (documents resampled with
  replacement, seeded).
The verdict says "better" or "worse" only when both agree: McNemar p < alpha and the
interval excludes 0.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from textclf.errors import UserError

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no significant difference"


def mcnemar_exact(model_only: int, baseline_only: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs b (model right, baseline wrong)
    and c (the reverse) under H0 are Binomial(b + c, 1/2); p = min(1, 2 P(X <= min(b, c)))."""
    n, k = model_only + baseline_only, min(model_only, baseline_only)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap_interval(model_correct: np.ndarray, baseline_correct: np.ndarray, resamples: int,
                       seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of accuracy(model) - accuracy(baseline) over `resamples` paired
    resamples of the test documents."""
    diff = model_correct.astype(np.int8) - baseline_correct.astype(np.int8)  # (N,) in {-1, 0, 1}
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, 1000):  # chunks: (1000, N) indices at a time
        count = min(1000, resamples - start)
        means[start:start + count] = diff[rng.integers(0, len(diff), (count, len(diff)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def verdict(p_value: float, low: float, high: float, alpha: float) -> str:
    if p_value < alpha and low > 0:
        return BETTER
    if p_value < alpha and high < 0:
        return WORSE
    return NO_DIFFERENCE


def compare(model_correct, baseline_correct, resamples: int, seed: int, alpha: float) -> dict:
    """Paired comparison of two systems' per-document correctness (bool arrays, same order)."""
    model_correct, baseline_correct = np.asarray(model_correct, bool), np.asarray(baseline_correct, bool)
    if model_correct.shape != baseline_correct.shape or model_correct.size == 0:
        raise UserError(f"model and baseline must be scored on the same test documents: "
                         f"{model_correct.size} vs {baseline_correct.size} outcomes.")
    model_only = int((model_correct & ~baseline_correct).sum())
    baseline_only = int((~model_correct & baseline_correct).sum())
    p_value = mcnemar_exact(model_only, baseline_only)
    low, high = bootstrap_interval(model_correct, baseline_correct, resamples, seed)
    return {"model_only": model_only, "baseline_only": baseline_only,
            "both_right": int((model_correct & baseline_correct).sum()),
            "both_wrong": int((~model_correct & ~baseline_correct).sum()),
            "difference": float(model_correct.mean() - baseline_correct.mean()),
            "mcnemar_p": p_value, "ci_low": low, "ci_high": high, "resamples": resamples,
            "alpha": alpha, "verdict": verdict(p_value, low, high, alpha)}


def headline(cmp: dict) -> str:
    """One line for the report: the verdict and the evidence behind it."""
    gap = (f"{cmp['difference'] * 100:+.2f} points (95 % interval {cmp['ci_low'] * 100:+.2f} to "
           f"{cmp['ci_high'] * 100:+.2f}; McNemar p = {cmp['mcnemar_p']:.3g}, "
           f"{cmp['model_only']} documents only the model gets right, {cmp['baseline_only']} only "
           f"the baseline)")
    if cmp["verdict"] == BETTER:
        return f"**Better than the baseline**: {gap}."
    if cmp["verdict"] == WORSE:
        return f"**Worse than the baseline**: {gap}."
    return f"**No significant difference from the baseline**: {gap}."


def per_class_accuracy(labels: list[str], y_true: Sequence[str], model_pred: Sequence[str],
                       baseline_pred: Sequence[str]) -> dict[str, dict]:
    """{class: {support, model, baseline}}: the share of each class's documents each gets right."""
    truth, model, baseline = (np.asarray(v) for v in (y_true, model_pred, baseline_pred))
    out = {}
    for label in labels:
        mask = truth == label
        n = int(mask.sum())
        out[label] = {"support": n,
                      "model": float((model[mask] == label).mean()) if n else 0.0,
                      "baseline": float((baseline[mask] == label).mean()) if n else 0.0}
    return out
