"""A report's inputs for a corpus of many imbalanced classes, written as the stages write them
(evaluate's own functions score made-up predictions), so that the report can be read and drawn
at 2 to 100 classes without a training. The model gets nothing right in its third smallest
classes (F1 0), and its prediction sets never hold their labels."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from textclf.data.tokens import length_histogram
from textclf.evaluate.comparison import compare, per_class_accuracy
from textclf.evaluate.conformal_report import review_metrics, set_metrics
from textclf.evaluate.metrics import test_metrics
from textclf.evaluate.metrics_file import class_counts, split_per_class
from textclf.inference.frames import judged_frame
from textclf.model.calibration import Review
from textclf.report.run import ReportPaths

WORDS = ("admin", "libs", "python", "localization-and-translation", "x11", "games", "science-and-math",
         "devel", "doc", "kernel", "net", "sound", "video", "web", "utils")


def class_names(n: int) -> list[str]:
    """n distinct class names of mixed length, sorted (as ingest sorts them)."""
    return sorted(f"{WORDS[i % len(WORDS)]}-{i:02d}" if i >= len(WORDS) else WORDS[i] for i in range(n))


def predictions(labels: list[str], seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Test documents, imbalanced (the first class largest), the model's probabilities: right on
    two thirds of the documents of its larger classes, never on the smallest third, whose
    documents it gives the largest class -> (judged frame, y_true, baseline's predicted class)."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    support = [max(1, int(60 / (r + 1) ** 0.8)) for r in range(n)]
    y = np.repeat(np.arange(n), support)
    silent = np.arange(n) >= n - n // 3
    right = ~silent[y] & (rng.random(len(y)) < 0.67)
    pred = np.where(right, y, np.where(silent[y], 0, (y + 1) % n))
    probs = rng.dirichlet(np.ones(n) * 0.3, size=len(y)) * 0.4  # (N, C)
    probs[np.arange(len(y)), pred] += 0.6
    base = np.where(rng.random(len(y)) < 0.7, y, pred)
    review = Review(coverage=0.9, review_below=0.5, cut=0.35)
    return judged_frame([f"d{i}" for i in range(len(y))], y, probs, labels, None, review), y, base


def metrics_for(labels: list[str], frame: pd.DataFrame, y: np.ndarray, base: np.ndarray) -> dict:
    """evaluate's metrics of the frame, as evaluate.run assembles them."""
    pred = frame["predicted"].map(labels.index).to_numpy()
    metrics = test_metrics(y, pred, labels)
    metrics.update(ece=0.05, sets=set_metrics(frame, labels, 0.9), review=review_metrics(frame, 0.5))
    silent = [c for c, s in metrics["per_class"].items() if s["recall"] == 0][:max(1, len(labels) // 4)]
    metrics["guards"] = {"load_audit": "pass", "collapse": "pass", "silent_class": "warn" if silent else "pass"}
    metrics["silent_classes"] = [{"class": c, "support": 3, "predicted": 0} for c in silent]
    metrics["baseline"] = {"accuracy": float((base == y).mean()), "macro_f1": 0.5, "class_weights": "none"}
    metrics["gap"] = {k: metrics[k] - metrics["baseline"][k] for k in ("accuracy", "macro_f1")}
    metrics["comparison"] = compare(pred == y, base == y, 1000, 0, 0.05)
    names = np.asarray(labels)
    metrics["per_class_accuracy"] = per_class_accuracy(labels, names[y], names[pred], names[base])
    metrics["kept_epoch"] = 1
    metrics["classes"] = class_counts(metrics)
    metrics["registry"] = {"model": "textclf", "version": 1, "promoted": True, "champion": 1, "history": [],
                           "reason": "test macro-F1 0.3000: the best of the eligible versions on this test split",
                           "champion_comparison": None}
    return metrics


def write_inputs(folder: Path, n: int) -> ReportPaths:
    """Every file the report stage reads, for a corpus of n classes -> its paths (no label issues)."""
    labels = class_names(n)
    frame, y, base = predictions(labels)
    summary, per_class = split_per_class(metrics_for(labels, frame, y, base))
    w = lambda name: str(folder / name)  # noqa: E731
    for name, data in (("metrics.json", summary), ("pc.json", per_class), ("diff.json", {"against_version": None})):
        Path(w(name)).write_text(json.dumps(data))
    frame.to_parquet(w("pred.parquet"))
    sizes = {c: 10 * int(frame["label"].eq(c).sum()) for c in labels}
    counts = {s: {c: max(1, int(k * sizes[c])) for c in labels} for s, k in (("train", .7), ("validation", .15))}
    counts["test"] = {c: int(frame["label"].eq(c).sum()) for c in labels}
    Path(w("n.json")).write_text(json.dumps({**counts, "method": "stable", "repairs": []}))
    lengths = np.r_[np.random.default_rng(0).integers(20, 200, sum(sizes.values()) - 1), 20_000]  # one outlier
    pd.DataFrame(length_histogram(lengths)).to_csv(w("h.csv"), index=False)
    Path(w("s.json")).write_text(json.dumps({"mean": 110.0, "p50": 109.0, "p90": 180.0, "max": 20_000,
                                             "max_length": 128, "pct_truncated": 20.0, "truncation": "head+tail"}))
    Path(w("r.json")).write_text(json.dumps({
        "source": "data/many.csv", "rows_seen": sum(sizes.values()), "kept": sum(sizes.values()), "skipped": {},
        "encodings": {"utf-8": 1}, "duplicates_not_byte_identical": 0, "per_class": sizes,
        "near_duplicates": {"enabled": False}}))
    pd.DataFrame({"epoch": [1], "train_loss": [3.9], "val_loss": [3.5], "val_accuracy": [0.4],
                  "val_macro_f1": [0.2], "top_share": [0.3], "pred_entropy": [2.0], "collapsed": [0]}).to_csv(
        w("curve.csv"), index=False)
    pd.DataFrame({"doc_id": frame["doc_id"], "text": "a short software description", "source_path": frame["doc_id"]}
                 ).to_parquet(w("c.parquet"))
    (folder / "model").mkdir(exist_ok=True)
    (folder / "model" / "params.json").write_text(json.dumps({"train": {"epochs": 1}}))
    return ReportPaths(ingest_report=w("r.json"), token_stats=w("s.json"), split_counts=w("n.json"),
                       histogram=w("h.csv"), curve=w("curve.csv"), metrics=w("metrics.json"),
                       per_class_json=w("pc.json"), data_diff=w("diff.json"), predictions=w("pred.parquet"),
                       corpus=w("c.parquet"), model_dir=w("model"), run_file=w("run.json"), out_md=w("report.md"),
                       out_html=w("report.html"), confusion_png=w("confusion.png"), lock=w("dvc.lock"))


RUN = {"run_id": "0" * 32, "model_uri": "models:/m-0"}  # what the lineage table names
