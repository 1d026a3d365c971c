"""Corpora as users bring them (issue 50): per corpus, what the pipeline costs and whether its
fine-tune silences small classes that the TF-IDF baseline finds.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/recipes/many_class.py                  # bbc fortunes stdlib
    .venv/bin/python benchmarks/recipes/many_class.py --corpora stdlib --set train.class_weights=none

Corpora (benchmarks/corpora.py builds them): bbc (../shared/data/bbc: 5 balanced classes),
fortunes (Debian's fortune files: 42 classes, 10 to 1 250 each), stdlib (the standard library's
docstrings by module: 116 classes, 15 to 742 each, near-duplicate siblings with different
labels) and packages (the venv's third-party packages' docstrings: ~180 classes, 15 to 150 each).
--fraction F keeps each class's first ceil(F n) documents (at least corpora.MIN_KEEP): the
imbalance stays, the cost falls (fortunes defaults to 0.3).
Each stage runs as `python -m stages.<name>` in a fresh process in --work/<corpus>, with this
checkout's src first on the path and params.yaml's defaults plus the short recipe (RECIPE, then
each --set): ingest, tokenize, split, baseline (wall time, peak RSS of the stage process),
labels (its default folds, the baseline's test predictions standing in for the model's, as
benchmarks/scale/labels_scale.py does; stopped after --labels-timeout s) and train; the trained
model folder's Predictor scores the test split. Prints a Markdown table and one JSON line:
documents kept by ingest, class_weights as resolved, accuracy and macro-F1 of both, and the
silent classes: with >= MIN_TEST test documents, F1 0 for the fine-tune where the baseline's is
above 0 (issue 50's goal: none, and the fine-tune's macro-F1 not below the baseline's).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import params_for, stage, table, write_if_changed  # noqa: E402  (first: this checkout's textclf)
from corpora import source  # noqa: E402

log = logging.getLogger("many-class")
RECIPE = ["tokenize.max_length=128", "train.epochs=2", "train.batch_size=16"]  # fits 2 cores; 1 epoch was too few
FRACTION = {"bbc": 1.0, "fortunes": 0.3, "stdlib": 1.0, "packages": 1.0}
MIN_TEST = 5  # issue 50: a silent class has at least this many test documents


def params(work: Path, src: Path, overrides: list[str]) -> None:
    """params.yaml's defaults reading `src`, with each key=value override -> work/params.yaml."""
    write_if_changed(work / "params.yaml", params_for(src, overrides))


def per_class_f1(truth: list[str], predicted: list[str], classes: list[str]) -> np.ndarray:
    from sklearn.metrics import f1_score
    return f1_score(truth, predicted, labels=classes, average=None, zero_division=0)


def measure(corpus: str, root: Path, fraction: float, overrides: list[str], labels_timeout: float) -> dict:
    from textclf.data.weights import imbalance, resolve
    from textclf.inference.predictor import Predictor
    work = root / corpus
    work.mkdir(parents=True, exist_ok=True)
    src = source(corpus, work, fraction)
    params(work, src, RECIPE + overrides)
    stage("ingest", work, "--corpus", "c.parquet", "--report", "r.json")
    stage("tokenize", work, "--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
          "--histogram", "h.csv")
    stage("split", work, "--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json")
    base_s, base_gib = stage("baseline", work, "--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                             "--predictions", "bp.parquet")
    labels_s, _ = stage("labels", work, "--corpus", "c.parquet", "--splits", "sp.parquet", "--predictions",
                        "bp.parquet", "--table", "li.parquet", "--summary", "li.json", timeout=labels_timeout)
    train_s, _ = stage("train", work, "--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--curve", "curve.csv", "--guards", "guards.json", "--movement", "mv.csv",
                       "--run-file", "run.json", "--checkpoint-dir", "ckpt", "--val-predictions", "vp.parquet")
    corpus_df = pd.read_parquet(work / "c.parquet", columns=["doc_id", "text", "label"])
    splits = pd.read_parquet(work / "sp.parquet", columns=["doc_id", "split"])
    docs = corpus_df.merge(splits, on="doc_id")
    train_labels = docs.loc[docs["split"] == "train", "label"].to_numpy()
    test = docs[docs["split"] == "test"].sort_values("doc_id")
    base = pd.read_parquet(work / "bp.parquet").set_index("doc_id").loc[test["doc_id"]]
    predictor = Predictor(work / "model")
    model_pred = list(np.asarray(predictor.labels)[predictor.predict_proba(test["text"].tolist()).argmax(axis=1)])
    truth, classes = test["label"].tolist(), sorted(set(train_labels))
    f1_model, f1_base = per_class_f1(truth, model_pred, classes), per_class_f1(truth, base["predicted"].tolist(), classes)
    support = test["label"].value_counts().reindex(classes, fill_value=0).to_numpy()
    silent = [c for c, m, b, n in zip(classes, f1_model, f1_base, support) if n >= MIN_TEST and m == 0 and b > 0]
    ingest = json.loads((work / "r.json").read_text())
    mode = yaml.safe_load((work / "params.yaml").read_text())["train"]["class_weights"]
    return {"corpus": corpus, "fraction": fraction, "documents": ingest["files_seen"], "kept": ingest["kept"],
            "classes": len(classes), "train ratio": imbalance(train_labels),
            "class_weights": f"{mode} → {resolve(mode, train_labels)}",
            "baseline s": base_s, "baseline GiB": base_gib, "labels s": labels_s if labels_s else f"> {labels_timeout:.0f}",
            "baseline acc": 100 * float(np.mean(base["predicted"].to_numpy() == test["label"].to_numpy())),
            "baseline macro-F1": 100 * float(np.mean(f1_base)), "train s": train_s,
            "fine-tune acc": 100 * float(np.mean(np.asarray(model_pred) == test["label"].to_numpy())),
            "fine-tune macro-F1": 100 * float(np.mean(f1_model)),
            "F1 0 (fine-tune / baseline)": f"{int((f1_model == 0).sum())} / {int((f1_base == 0).sum())}",
            "silent": ", ".join(silent) or "none",
            "silent_class guard": json.loads((work / "guards.json").read_text())["silent_class"]["status"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["bbc", "fortunes", "stdlib"], choices=list(FRACTION))
    parser.add_argument("--fraction", type=float, default=None, help="of each class (default: FRACTION's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a param over the recipe")
    parser.add_argument("--labels-timeout", type=float, default=600)
    parser.add_argument("--work", default="/tmp/many-class-bench")
    args = parser.parse_args()
    root = Path(args.work).resolve()
    rows = [measure(c, root, args.fraction or FRACTION[c], args.set, args.labels_timeout) for c in args.corpora]
    print(f"\nmany_class: {' '.join(RECIPE + args.set)}, {os.environ.get('OMP_NUM_THREADS', 'all')} threads\n")
    print(table(rows, list(rows[0])) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
