"""TF-IDF baseline on BBC over split seeds (issue 12's before/after measure).

    .venv/bin/python benchmarks/baseline_seeds.py [--seeds 0 1 2 3 4 5 6] [--code DIR]

Runs the ingest, split and baseline stages (`python -m stages.<name>`, as dvc.yaml does) on
../shared/data/bbc in a temporary folder, with split.seed = baseline.seed = each seed and
every other param at its default. `--code` runs another checkout's stages instead, e.g. the
code before near-duplicate grouping:

    git archive main | tar -x -C /tmp/main-code
    .venv/bin/python benchmarks/baseline_seeds.py --code /tmp/main-code

`--hashing` also runs the baseline forced onto its large-corpus path (baseline.hashing_from
0: hashed n-grams + SGD) on each split; the goal is a mean accuracy within 0.5 point of the
TF-IDF + logistic regression's:

    .venv/bin/python benchmarks/baseline_seeds.py --seeds 0 1 2 3 4 --hashing

Each row also counts the near-duplicate groups (this checkout's detection, default params)
that the evaluated split puts in two splits, and those of them touching the test split.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from textclf.data.corpus import build_corpus
from throughput_helpers import table

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(REPO.parent / "shared" / "data" / "bbc"))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(7)))
    p.add_argument("--code", default=str(REPO), help="checkout whose stages run (default: this one)")
    p.add_argument("--hashing", action="store_true", help="also score the hashed + SGD baseline")
    return p.parse_args(argv)


def stage(code: Path, name: str, params: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(code / "src")}
    proc = subprocess.run([sys.executable, "-m", f"stages.{name}", "--params", str(params), *args],
                          cwd=code, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"stage {name} failed: {proc.stderr[-2000:]}")


def straddling(splits: pd.DataFrame, groups: pd.Series) -> tuple[int, int]:
    """-> (near-duplicate groups in two or more splits, those with a document in test)."""
    frame = splits.set_index("doc_id")[["split"]].join(groups.rename("nd_group"), how="inner")
    per_group = frame.groupby("nd_group")["split"].agg(set)
    spread = per_group[per_group.map(len) > 1]
    return len(spread), int(spread.map(lambda s: "test" in s).sum())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    code, bbc = Path(args.code).resolve(), Path(args.bbc).resolve()
    corpus, _ = build_corpus(bbc, 1_000_000, 5)
    groups = corpus.set_index("doc_id")["group"]
    groups = groups[groups.duplicated(keep=False)]  # only documents that have a near-duplicate
    rows = []
    with tempfile.TemporaryDirectory(prefix="baseline_seeds_") as tmp:
        work = Path(tmp)
        for seed in args.seeds:
            params = work / "params.yaml"
            params.write_text(yaml.safe_dump({"ingest": {"source": str(bbc)}, "split": {"seed": seed},
                                              "baseline": {"seed": seed}}))
            if not rows:  # ingest does not read the seeds
                stage(code, "ingest", params, "--corpus", str(work / "c.parquet"),
                      "--report", str(work / "r.json"))
            stage(code, "split", params, "--corpus", str(work / "c.parquet"),
                  "--splits", str(work / "s.parquet"), "--counts", str(work / "n.json"))
            # the baseline stage writes per-document predictions since issue 13; older --code does not
            predictions = (["--predictions", str(work / "bp.parquet")]
                           if "--predictions" in (Path(code) / "stages" / "baseline.py").read_text() else [])
            stage(code, "baseline", params, "--corpus", str(work / "c.parquet"),
                  "--splits", str(work / "s.parquet"), "--out", str(work / "b.json"), *predictions)
            scores = json.loads((work / "b.json").read_text())
            splits = pd.read_parquet(work / "s.parquet")
            spread, in_test = straddling(splits, groups)
            rows.append({"seed": seed, "test docs": int((splits["split"] == "test").sum()),
                         "accuracy": scores["accuracy"], "macro-F1": scores["macro_f1"],
                         "groups in 2 splits": spread, "of them touching test": in_test})
            if args.hashing:
                hashed = work / "hashed.yaml"
                hashed.write_text(yaml.safe_dump({**yaml.safe_load(params.read_text()),
                                                  "baseline": {"seed": seed, "hashing_from": 0}}))
                stage(code, "baseline", hashed, "--corpus", str(work / "c.parquet"), "--splits",
                      str(work / "s.parquet"), "--out", str(work / "h.json"), *predictions)
                rows[-1]["hashed accuracy"] = json.loads((work / "h.json").read_text())["accuracy"]
            print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    shown = [{**r, **{k: f"{r[k]:.4f}" for k in ("accuracy", "macro-F1", "hashed accuracy") if k in r}}
             for r in rows]
    print(f"\ncode: {code}\n\n" + table(shown, list(rows[0])))
    if len(frame) > 1:
        for metric in ("accuracy", "macro-F1"):
            print(f"{metric}: mean {frame[metric].mean():.4f} ± sd {frame[metric].std():.4f} "
                  f"over {len(frame)} seeds")
    if args.hashing:
        gap = frame["hashed accuracy"].mean() - frame["accuracy"].mean()
        print(f"hashed + SGD minus TF-IDF + LR, mean accuracy: {gap * 100:+.2f} points; goal within "
              f"0.5: {'pass' if abs(gap) <= 0.005 else 'FAIL'}")


if __name__ == "__main__":
    main()
