"""How far above chance the test suite's end-to-end run scores, over seeds: the evidence for
the bar in tests/test_pipeline.py (`LEARNS`).

    .venv/bin/python benchmarks/training/demo_learning.py [--epochs 2] [--split-seeds 0 1 2 3 4] [--train-seeds 42 1]

The `reproduced` fixture's config (the packaged MiniLM on the demo corpus, max_length 64,
--epochs epochs, the rest from params.yaml) through the real stages in a temp folder, once per
(split seed, train seed). Prints a markdown table of validation and test accuracy, and the
minimum of each: chance is 1/5.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf)

log = logging.getLogger("demo-learning")


def params_for(work: Path, split_seed: int, train_seed: int, epochs: int) -> list[str]:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["ingest"]["source"] = str(ROOT / "data" / "sample")
    params["tokenize"]["max_length"] = 64
    params["split"]["seed"] = split_seed
    params["train"].update(epochs=epochs, seed=train_seed)
    path = work / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return ["--params", str(path)]


def one_run(work: Path, split_seed: int, train_seed: int, epochs: int) -> dict:
    from stages import baseline, evaluate, export, ingest, split, tokenize, train  # here: --help needs no torch

    """The pipeline up to evaluate in `work` -> {'val': best validation accuracy, 'test': test accuracy}."""
    p = params_for(work, split_seed, train_seed, epochs)
    os.chdir(work)
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    tokenize.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                       "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    train.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                    "--curve", "curve.csv", "--guards", "guards.json", "--movement", "move.csv",
                    "--run-file", "run.json", "--checkpoint-dir", "ckpt"])
    baseline.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                       "--predictions", "bp.parquet"])
    export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model", "--out", "export"])
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", "export",
                       "--data-diff", "diff.json", "--metrics", "m.json",
                       "--confusion", "conf.csv", "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet"])
    metrics = json.loads((work / "m.json").read_text())
    curve = (work / "curve.csv").read_text().splitlines()
    header = curve[0].split(",")
    val = max(float(row.split(",")[header.index("val_accuracy")]) for row in curve[1:])
    return {"val": val, "test": metrics["accuracy"], "n_test": metrics["n_test"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--split-seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--train-seeds", type=int, nargs="+", default=[42, 1])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ["HF_HUB_OFFLINE"] = "1"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        for s in args.split_seeds:
            for t in args.train_seeds:
                work = Path(tmp) / f"split{s}-train{t}"
                work.mkdir()
                rows.append({"split seed": s, "train seed": t, **one_run(work, s, t, args.epochs)})
                shutil.rmtree(work / "model", ignore_errors=True)
                print(rows[-1], flush=True)
    print(f"\n{args.epochs} epoch(s), max_length 64:\n")
    print("| split seed | train seed | best validation accuracy | test accuracy |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['split seed']} | {r['train seed']} | {r['val']:.3f} | {r['test']:.3f} (n={r['n_test']}) |")
    print(f"\nminimum: validation {min(r['val'] for r in rows):.3f}, test {min(r['test'] for r in rows):.3f} "
          f"over {len(rows)} runs; chance 0.200")


if __name__ == "__main__":
    main()
