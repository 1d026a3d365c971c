"""What the champion gate decides when BBC grows: a random 90 % of the articles, then all of
them, each through a real `dvc repro` with the recipe in benchmarks/bbc_headtail.preset.

    .venv/bin/python benchmarks/data/bbc_gate.py [--fraction 0.9] [--seed 42] [-S key=value ...]

Works in a temporary copy of the committed project (`git archive HEAD`) with its own MLflow
store: version 1 trains on the subset and becomes champion; version 2 trains on the whole
corpus, and evaluate scores both on version 2's test documents that version 1 never saw.
Prints both runs' test scores, the gate's comparison and the data diff.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, with_overrides  # noqa: E402
from corpora import BBC  # noqa: E402


def preset() -> dict[str, str]:
    lines = (ROOT / "benchmarks" / "bbc_headtail.preset").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def set_params(params: Path, values: dict[str, str]) -> None:
    data = with_overrides(yaml.safe_load(params.read_text()), [f"{k}={v}" for k, v in values.items()])
    params.write_text(yaml.safe_dump(data, sort_keys=False))


def repro(repo: Path, env: dict) -> dict:
    started = time.monotonic()
    proc = subprocess.run(["dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stdout[-3000:] + proc.stderr[-3000:])
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())
    return {**metrics, "minutes": (time.monotonic() - started) / 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42, help="which articles the subset keeps")
    parser.add_argument("-S", action="append", default=[], help="extra param key=value")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bbc-gate-") as tmp:
        tmp = Path(tmp)
        repo = tmp / "repo"
        repo.mkdir()
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)
        files = sorted(p.relative_to(BBC) for p in BBC.rglob("*.txt"))
        subset = tmp / "bbc-subset"
        for rel in random.Random(args.seed).sample(files, round(args.fraction * len(files))):
            (subset / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(BBC / rel, subset / rel)
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "copy"]):
            subprocess.run(cmd, cwd=repo, check=True)
        overrides = {**preset(), **dict(s.split("=", 1) for s in args.S)}
        set_params(repo / "params.yaml", {**overrides, "ingest.source": str(subset)})
        first = repro(repo, env)
        set_params(repo / "params.yaml", {"ingest.source": str(BBC)})
        second = repro(repo, env)
    for name, m in (("v1 (subset)", first), ("v2 (all)", second)):
        print(f"{name}: {m['n_test']} test documents, accuracy {m['accuracy']:.4f}, macro-F1 "
              f"{m['macro_f1']:.4f}, {m['minutes']:.1f} min; registry: {m['registry']['reason']}")
    cmp = second["registry"].get("champion_comparison")
    print(json.dumps({"comparison": cmp and {k: cmp[k] for k in ("n", "left_out", "challenger", "champion",
                                                                  "promote", "reason")},
                      "data_diff": second["data_diff"]}, indent=2))


if __name__ == "__main__":
    main()
