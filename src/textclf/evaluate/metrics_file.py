"""What evaluate writes of its metrics, and how readers get them whole: metrics.json, which
`dvc metrics show` prints and experiments are compared by, keeps a bounded set of numbers at any
number of classes (57 classes once made it one line of 103 738 characters); what grows with the
classes goes to per_class.json beside it (evaluate --per-class-json)."""
from __future__ import annotations

from textclf.files import read_json

PER_CLASS = ("per_class", "confusion", "per_class_accuracy", "thresholds", "baseline_per_class")
PER_CLASS_SETS = ("per_class_coverage", "sizes")  # of metrics["sets"]


def split_per_class(metrics: dict) -> tuple[dict, dict]:
    """-> (metrics without its per-class and per-pair entries, those entries); with_per_class
    joins them again."""
    summary = {k: v for k, v in metrics.items() if k not in PER_CLASS}
    details = {k: metrics[k] for k in PER_CLASS if k in metrics}
    if metrics.get("sets"):
        summary["sets"] = {k: v for k, v in metrics["sets"].items() if k not in PER_CLASS_SETS}
        details["sets"] = {k: metrics["sets"][k] for k in PER_CLASS_SETS if k in metrics["sets"]}
    return summary, details


def with_per_class(summary: dict, details: dict) -> dict:
    """split_per_class undone: the whole of evaluate's metrics."""
    joined = {**summary, **{k: v for k, v in details.items() if k != "sets"}}
    if "sets" in details:
        joined["sets"] = {**(summary.get("sets") or {}), **details["sets"]}
    return joined


def read_metrics(metrics: str, per_class: str) -> dict:
    """Evaluate's metrics JSON and its per-class JSON, as one dict."""
    return with_per_class(read_json(metrics), read_json(per_class))


def class_counts(metrics: dict) -> dict[str, int]:
    """How many classes, and how many the model leaves unanswered: with test documents and F1 0,
    never recalled on validation (the silent_class guard), never in a prediction set that holds
    their label on test. Counts, so that experiments compare on them."""
    per_class = metrics["per_class"]
    return {"count": len(per_class),
            "f1_zero": sum(1 for s in per_class.values() if s["support"] and s["f1"] == 0),
            "silent": len(metrics.get("silent_classes") or []),
            "never_covered": len((metrics.get("sets") or {}).get("never_covered") or [])}
