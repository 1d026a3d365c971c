"""Rare classes on real text: BBC with `tech` and `entertainment` cut to 20 documents each,
trained with and without train.class_weights: balanced over split seeds, the TF-IDF baseline
(weighted alike) beside; and whether the silent_class guard fires where a class is never
recalled, and never on balanced BBC.

    .venv/bin/python benchmarks/labels/imbalance.py                       # seeds 0 1 2 + balanced BBC
    .venv/bin/python benchmarks/labels/imbalance.py --seeds 0 -S tokenize.max_length=256
    .venv/bin/python benchmarks/labels/imbalance.py --work DIR --summarize  # the tables of DIR's finished runs

Every run is the real stages (ingest, tokenize, split, baseline, train, export, evaluate) in a
work folder, with benchmarks/bbc_headtail.preset's recipe at 128 tokens unless -S says otherwise. The
cut keeps each class's first documents in file-name order (no sampling: the same corpus on
every machine). Prints two tables: per-class test recall and macro-F1, and the guard's
verdicts against the test recall of the kept model.
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

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, with_overrides  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC, RARE, bbc_rare  # noqa: E402
from textclf.evaluate.metrics_file import read_metrics  # noqa: E402
from textclf.multiseed import read_preset  # noqa: E402

log = logging.getLogger("imbalance-benchmark")


def params_file(path: Path, overrides: list[str]) -> list[str]:
    params = with_overrides(yaml.safe_load((ROOT / "params.yaml").read_text()), overrides)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return ["--params", str(path)]


def prepare(work: Path, source: Path, overrides: list[str]) -> None:
    """Ingest and tokenize once per corpus: neither depends on the seed or the weights."""
    from stages import ingest, tokenize  # here: --help needs no torch

    w = lambda name: str(work / name)  # noqa: E731
    p = params_file(work / "params.yaml", overrides + [f"ingest.source={source}"])
    ingest.main(p + ["--corpus", w("c.parquet"), "--report", w("r.json")])
    tokenize.main(p + ["--corpus", w("c.parquet"), "--tokens", w("t.parquet"), "--stats", w("s.json"),
                       "--histogram", w("h.csv")])


def run(work: Path, run_dir: Path, overrides: list[str]) -> dict:
    """Split, baseline, train, export and evaluate in run_dir -> metrics.json plus the baseline's
    per-class test recall and the guard's record."""
    from stages import baseline, evaluate, export, split, train  # here: --help needs no torch

    run_dir.mkdir(parents=True)
    w = lambda name: str(run_dir / name)  # noqa: E731
    c, t = str(work / "c.parquet"), str(work / "t.parquet")
    p = params_file(run_dir / "params.yaml", overrides)
    split.main(p + ["--corpus", c, "--splits", w("sp.parquet"), "--counts", w("n.json")])
    baseline.main(p + ["--corpus", c, "--splits", w("sp.parquet"), "--out", w("b.json"),
                       "--predictions", w("bp.parquet")])
    train.main(p + ["--tokens", t, "--splits", w("sp.parquet"), "--model-dir", w("model"), "--curve", w("curve.csv"),
                    "--guards", w("guards.json"), "--movement", w("move.csv"), "--run-file", w("run.json"),
                    "--checkpoint-dir", w("ckpt")])
    export.main(p + ["--tokens", t, "--splits", w("sp.parquet"), "--model-dir", w("model"), "--out", w("export")])
    evaluate.main(p + ["--tokens", t, "--splits", w("sp.parquet"), "--model-dir", w("model"),
                       "--run-file", w("run.json"), "--guards", w("guards.json"), "--baseline", w("b.json"),
                       "--baseline-predictions", w("bp.parquet"), "--corpus", c, "--export", w("export"),
                       "--data-diff", w("diff.json"), "--metrics", w("metrics.json"), "--confusion", w("conf.csv"),
                       "--per-class", w("pc.csv"), "--per-class-json", w("pc.json"), "--predictions", w("pred.parquet")])
    return collect(run_dir)


def collect(run_dir: Path) -> dict:
    """A finished run's metrics (metrics.json and its per-class pc.json), the baseline's per-class
    test recall and the guard's record."""
    metrics = read_metrics(run_dir / "metrics.json", run_dir / "pc.json")
    base = pd.read_parquet(run_dir / "bp.parquet")
    metrics["baseline_recall"] = {c: float((base.loc[base["label"] == c, "predicted"] == c).mean())
                                  for c in sorted(base["label"].unique())}
    metrics["silent_class"] = json.loads((run_dir / "guards.json").read_text())["silent_class"]
    return metrics


def recall_table(rows: list[dict]) -> str:
    head = " | ".join(f"{c} recall" for c in RARE)
    lines = [f"| corpus | split seed | class_weights | model {head} | model macro-F1 | model acc "
             f"| baseline {head} | baseline macro-F1 | silent_class |", "|---" * (7 + 2 * len(RARE)) + "|"]
    for r in rows:
        m = r["metrics"]
        rec = " | ".join(f"{m['per_class'][c]['recall'] * 100:.0f}" for c in RARE)
        brec = " | ".join(f"{m['baseline_recall'][c] * 100:.0f}" for c in RARE)
        lines.append(f"| {r['corpus']} | {r['seed']} | {r['weights']} | {rec} | {m['macro_f1'] * 100:.2f} "
                     f"| {m['accuracy'] * 100:.2f} | {brec} | {m['baseline']['macro_f1'] * 100:.2f} "
                     f"| {m['silent_class']['status']} |")
    return "\n".join(lines + pooled(rows))


def pooled(rows: list[dict]) -> list[str]:
    """Per corpus and weighting, each rare class's test recall over all seeds' documents together
    (a 20-document class has 1-3 test documents a seed), and the mean macro-F1."""
    lines = []
    for corpus_name, weights in dict.fromkeys((r["corpus"], r["weights"]) for r in rows):
        group = [r["metrics"] for r in rows if (r["corpus"], r["weights"]) == (corpus_name, weights)]
        cells = []
        for c in RARE:
            support = sum(m["per_class"][c]["support"] for m in group)
            hits = sum(m["per_class"][c]["recall"] * m["per_class"][c]["support"] for m in group)
            base = sum(m["baseline_recall"][c] * m["per_class"][c]["support"] for m in group)
            cells.append((f"{hits:.0f}/{support}", f"{base:.0f}/{support}"))
        f1 = sum(m["macro_f1"] for m in group) / len(group) * 100
        base_f1 = sum(m["baseline"]["macro_f1"] for m in group) / len(group) * 100
        acc = sum(m["accuracy"] for m in group) / len(group) * 100
        lines.append(f"| {corpus_name}, {len(group)} seeds | all | {weights} | "
                     + " | ".join(c[0] for c in cells) + f" | {f1:.2f} (mean) | {acc:.2f} | "
                     + " | ".join(c[1] for c in cells) + f" | {base_f1:.2f} (mean) | |")
    return lines


def guard_table(rows: list[dict]) -> str:
    """The guard (judged on validation) beside the classes the kept model never recalls on test."""
    lines = ["| corpus | split seed | class_weights | silent on validation (guard) | test recall 0 |",
             "|---|---|---|---|---|"]
    for r in rows:
        m = r["metrics"]
        silent = ", ".join(f"{c['class']} ({c['support']})" for c in m["silent_class"]["classes"]) or "none"
        zero = ", ".join(f"{c} ({s['support']})" for c, s in m["per_class"].items() if s["recall"] == 0) or "none"
        lines.append(f"| {r['corpus']} | {r['seed']} | {r['weights']} | {silent} | {zero} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="split seeds (also train/baseline seeds)")
    parser.add_argument("--keep", type=int, default=20, help="documents kept of each of " + ", ".join(RARE))
    parser.add_argument("--no-balanced-bbc", action="store_true", help="skip the run on balanced BBC (seed 0)")
    parser.add_argument("-S", dest="overrides", action="append", default=[], help="key=value (repeatable)")
    parser.add_argument("--work", help="folder for the runs (default: a temp folder, removed)")
    parser.add_argument("--summarize", action="store_true", help="only the tables of the finished runs in --work")
    args = parser.parse_args(argv)
    if args.summarize and not args.work:
        raise SystemExit("--summarize reads the runs of --work: name the folder.")
    if not BBC.is_dir():
        raise SystemExit(f"BBC corpus not found at {BBC}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="imbalance-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{work.resolve() / 'mlflow.db'}")
    base = read_preset(str(ROOT / "benchmarks" / "bbc_headtail.preset")) + [
        "tokenize.max_length=128", "evaluate.register=false", "serve.format=torch"] + args.overrides
    plan = [("imbalanced", seed, weights) for seed in args.seeds for weights in ("none", "balanced")]
    if not args.no_balanced_bbc:
        plan.append(("balanced BBC", 0, "none"))
    rows = []
    for name in dict.fromkeys(corpus_name for corpus_name, _, _ in plan):
        folder = work / name.replace(" ", "-")
        if not args.summarize:
            prepare(folder, bbc_rare(folder / "corpus", args.keep if name == "imbalanced" else None), base)
        for corpus_name, seed, weights in (item for item in plan if item[0] == name):
            run_dir = folder / f"s{seed}-{weights}"
            if args.summarize and not (run_dir / "metrics.json").is_file():
                continue
            seeds = [f"{k}={seed}" for k in ("split.seed", "train.seed", "baseline.seed")]
            metrics = collect(run_dir) if args.summarize else run(
                folder, run_dir, base + seeds + [f"train.class_weights={weights}"])
            rows.append({"corpus": name, "seed": seed, "weights": weights, "metrics": metrics})
            log.info("%s seed %d %s: macro-F1 %.4f", name, seed, weights, metrics["macro_f1"])
    log.info("per-class test recall (%%), %s cut to %d documents:\n%s\n\nsilent_class guard:\n%s",
             " and ".join(RARE), args.keep, recall_table(rows), guard_table(rows))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    main()
