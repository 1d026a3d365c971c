"""What a trial must beat to have learned anything from the texts: the validation objective of
the best predictor that never reads them, from the trial's validation class counts."""
from __future__ import annotations

import math

SPLIT_COUNTS = "data/processed/split_counts.json"  # the split stage's --counts (dvc.yaml)


def _shares(counts: dict) -> tuple[list[float], bool] | None:
    """split_counts.json -> (each class's (label's) share of the validation documents, multi-label)."""
    val = {k: v for k, v in (counts.get("validation") or {}).items() if v > 0}
    multilabel = counts.get("task") == "multilabel"
    total = (counts.get("documents") or {}).get("validation") if multilabel else sum(val.values())
    if not val or not total:
        return None
    return [v / total for v in val.values()], multilabel


def chance(objective: str, counts: dict, class_weights: str = "none") -> dict | None:
    """The trivial predictors' best validation `objective` -> {"value", "what"}, or None when
    unknown (no counts; a class-weighted loss, whose constant predictor is another one).
    macro-F1, one label: guessing in proportion to the classes scores 1/K, more than always
    the majority class (2p/(1+p)/K); several labels: every label for every document (2p/(1+p)
    per label) beats guessing each at its rate (p). Loss: always predicting the shares."""
    found = _shares(counts)
    if found is None:
        return None
    shares, multilabel = found
    k = len(shares)
    if objective == "val_macro_f1":
        if multilabel:
            return {"value": sum(2 * p / (1 + p) for p in shares) / k,
                    "what": f"every one of the {k} labels for every document"}
        majority = 2 * max(shares) / (1 + max(shares)) / k
        return {"value": 1 / k, "what": f"guessing in proportion to the {k} classes; "
                                        f"always the majority class scores {majority:.4f}"}
    if class_weights != "none":
        return None
    if multilabel:
        value = sum(-p * math.log(p) - (1 - p) * math.log(1 - p) if p < 1 else 0.0 for p in shares) / k
    else:
        value = -sum(p * math.log(p) for p in shares)
    return {"value": value, "what": f"always predicting the validation shares of the {k} "
                                    f"{'labels' if multilabel else 'classes'}"}


def beats(value: float, bar: dict | None, direction: str) -> bool | None:
    """Whether a trial's value beats the chance bar (None: the bar is unknown)."""
    if bar is None:
        return None
    return value > bar["value"] if direction == "maximize" else value < bar["value"]
