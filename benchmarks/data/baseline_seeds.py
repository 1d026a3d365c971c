"""TF-IDF baseline on BBC over split seeds (issue 12's before/after measure).

    .venv/bin/python benchmarks/data/baseline_seeds.py [--seeds 0 1 2 3 4 5 6] [--code DIR]

Runs the ingest, split and baseline stages (`python -m stages.<name>`, as dvc.yaml does) on
../shared/data/bbc in a temporary folder, with split.seed = baseline.seed = each seed and
every other param at its default. `--code` runs another checkout's stages instead, e.g. the
code before near-duplicate grouping:

    git archive main | tar -x -C /tmp/main-code
    .venv/bin/python benchmarks/data/baseline_seeds.py --code /tmp/main-code

`--hashing` also runs the baseline forced onto its large-corpus path (baseline.hashing_from
0: hashed n-grams + SGD) on each split; the goal is a mean accuracy within 0.5 point of the
TF-IDF + logistic regression's:

    .venv/bin/python benchmarks/data/baseline_seeds.py --seeds 0 1 2 3 4 --hashing

Each row also counts the near-duplicate groups (this checkout's detection, default params)
that the evaluated split puts in two splits, and those of them touching the test split.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, stage, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(7)))
    p.add_argument("--code", default=str(ROOT), help="checkout whose stages run (default: this one)")
    p.add_argument("--hashing", action="store_true", help="also score the hashed + SGD baseline")
    return p.parse_args(argv)


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
                stage("ingest", work, "--corpus", str(work / "c.parquet"), "--report", str(work / "r.json"),
                      params=params, code=code)
            stage("split", work, "--corpus", str(work / "c.parquet"), "--splits", str(work / "s.parquet"),
                  "--counts", str(work / "n.json"), params=params, code=code)
            # the baseline stage writes per-document predictions since issue 13; older --code does not
            predictions = (["--predictions", str(work / "bp.parquet")]
                           if "--predictions" in (Path(code) / "stages" / "baseline.py").read_text() else [])
            stage("baseline", work, "--corpus", str(work / "c.parquet"), "--splits", str(work / "s.parquet"),
                  "--out", str(work / "b.json"), *predictions, params=params, code=code)
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
                stage("baseline", work, "--corpus", str(work / "c.parquet"), "--splits", str(work / "s.parquet"),
                      "--out", str(work / "h.json"), *predictions, params=hashed, code=code)
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
