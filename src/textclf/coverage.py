"""How many validation documents a serve.coverage needs (split-conformal: ceil((n + 1) * coverage)
<= n), and the one line said where there are fewer: by the split stage before training, and by
every predictor of a model calibrated on too few (textclf.model.calibration). Arithmetic only,
below data and model, so the split stage can say it."""
from __future__ import annotations

import math

MAX_VALIDATION = 0.9  # the largest split.fractions.validation the advice suggests


def needed_documents(coverage: float) -> int:
    """The fewest calibration documents for which a coverage has a finite threshold:
    ceil((n + 1) * coverage) <= n."""
    return math.ceil(coverage / (1 - coverage) - 1e-9)


def largest_coverage(n: int) -> float:
    """The largest serve.coverage (two decimals, rounded down) n calibration documents give a
    finite threshold: n / (n + 1)."""
    return math.floor(100 * n / (n + 1) + 1e-9) / 100


def too_few(n: int, coverage: float, where: str = "the model") -> str | None:
    """The served model's line for n validation documents too few for `coverage` (None:
    enough): what its sets are, and what works instead."""
    needed = needed_documents(coverage)
    if n >= needed:
        return None
    return (f"serve.coverage={coverage} needs at least {needed} validation documents for prediction sets it can "
            f"guarantee, and {where} was calibrated on {n}: every class is in every set and every answer "
            f"needs_review; serve.coverage {largest_coverage(n)} or lower works on {n}, or give validation "
            f"{needed} documents (split.fractions.validation)")


def too_few_at_split(n: int, documents: int, coverage: float, validation: float) -> str | None:
    """The split stage's line, before training: the validation split's n of `documents`
    against serve.coverage, with the coverage and the split.fractions.validation that work."""
    needed = needed_documents(coverage)
    if n >= needed:
        return None
    share = max(validation, math.ceil(100 * needed / documents) / 100 + 0.01)  # the hash split is approximate
    # a validation share past MAX_VALIDATION leaves train too little: the advice was "0.90 ... about
    # 99 of 40 documents", so then only more documents give that coverage
    other = (f"split.fractions.validation: {share:.2f} (now {validation}; about {needed} of {documents} documents, "
             "taken from train)" if share <= MAX_VALIDATION else
             f"add documents ({documents} cannot hold {needed} validation documents beside a training split)")
    return (f"validation holds {n} documents and serve.coverage={coverage} needs at least {needed} for prediction "
            f"sets it can guarantee: the run will finish, with every class in every set and every answer "
            f"needs_review; set serve.coverage: {largest_coverage(n)} (or lower), or {other}")
