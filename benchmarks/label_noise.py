"""Planted wrong labels on BBC, found by the labels stage's cross-fitted baseline (issue 40).

    .venv/bin/python benchmarks/label_noise.py [--rate 0.1] [--folds 10] [--seed 0]

Copies ../shared/data/bbc's class folders into a temporary folder with `--rate` of the files
moved to a random other class folder (seeded, renamed so none collide), runs the ingest, split
and baseline stages (`python -m stages.<name>`, as dvc.yaml does), then the labels stage with the
baseline's test predictions standing in for the model's, and prints the precision and recall of
the flagged documents against the planted ones that ingest kept, per split, and the stage's time.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
BBC = REPO.parent / "shared" / "data" / "bbc"


def plant(dst: Path, rate: float, seed: int) -> set[str]:
    """BBC's class folders in dst, `rate` of the files moved to another class -> their new paths."""
    shutil.copytree(BBC, dst)
    rng = np.random.default_rng(seed)
    classes = sorted(p.name for p in dst.iterdir() if p.is_dir())
    files = sorted(f for c in classes for f in (dst / c).glob("*.txt"))
    moved = set()
    for i in rng.choice(len(files), round(rate * len(files)), replace=False):
        src = files[i]
        to = rng.choice([c for c in classes if c != src.parent.name])
        src.rename(dst / to / f"planted-{src.parent.name}-{src.name}")
        moved.add(f"{to}/planted-{src.parent.name}-{src.name}")
    return moved


def stage(name: str, cwd: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", f"stages.{name}", "--params", "params.yaml", *args], cwd=cwd,
                   check=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        moved = plant(tmp / "bbc", args.rate, args.seed)
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        params["ingest"]["source"] = str(tmp / "bbc")
        params["labels"]["folds"] = args.folds
        (tmp / "params.yaml").write_text(yaml.safe_dump(params))
        stage("ingest", tmp, "--corpus", "c.parquet", "--report", "r.json")
        stage("split", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json")
        stage("baseline", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
              "--predictions", "bp.parquet")
        seconds = stage("labels", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--predictions",
                        "bp.parquet", "--table", "li.parquet", "--summary", "li.json")
        table = pd.read_parquet(tmp / "li.parquet")
        table["planted"] = table["source_path"].isin(moved)
        rows = {}
        for split, part in [("all", table)] + list(table.groupby("split")):
            hit = int((part["flagged"] & part["planted"]).sum())
            rows[split] = {"planted": int(part["planted"].sum()), "flagged": int(part["flagged"].sum()),
                           "precision": round(hit / max(part["flagged"].sum(), 1), 3),
                           "recall": round(hit / max(part["planted"].sum(), 1), 3)}
        summary = json.loads((tmp / "li.json").read_text())
        print(json.dumps({"rate": args.rate, "folds": args.folds, "seed": args.seed, "documents": len(table),
                          "planted_moved": len(moved), "estimated_noise": summary["estimated_noise"],
                          "labels_stage_s": round(seconds, 1), "by_split": rows}, indent=1))


if __name__ == "__main__":
    main()
