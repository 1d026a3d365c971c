"""Planted wrong labels on BBC, found by the labels stage's cross-fitted baseline (issue 40).

    .venv/bin/python benchmarks/labels/label_noise.py [--rate 0.1] [--folds 10] [--seed 0]
    .venv/bin/python benchmarks/labels/label_noise.py --rate 0.15 --source business --target tech
    .venv/bin/python benchmarks/labels/label_noise.py --rate 0     # the real BBC: nothing planted

Copies ../shared/data/bbc's class folders into a temporary folder with `--rate` of the files
moved to a random other class folder (seeded, renamed so none collide; with --source/--target,
`--rate` of the source class's files moved to the target class), runs the ingest, split and
baseline stages (`python -m stages.<name>`, as dvc.yaml does), then the labels stage with the
baseline's test predictions standing in for the model's, and prints the precision and recall of
the flagged documents against the planted ones that ingest kept, per split, the stage's time and
peak memory (/usr/bin/time), and the TF-IDF baseline's test accuracy on the true labels when
trained on the planted labels, on the labels corrected by accepting every flagged document's
suggestion, and on the true labels.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, stage, with_overrides  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402


def plant(dst: Path, rate: float, seed: int, source: str = "", target: str = "") -> set[str]:
    """BBC's class folders in dst, `rate` of the files (of class `source` if given) moved to
    another class (`target` if given) -> their new paths."""
    shutil.copytree(BBC, dst)
    rng = np.random.default_rng(seed)
    classes = sorted(p.name for p in dst.iterdir() if p.is_dir())
    files = sorted(f for c in ([source] if source else classes) for f in (dst / c).glob("*.txt"))
    moved = set()
    for i in rng.choice(len(files), round(rate * len(files)), replace=False):
        src = files[i]
        to = target or rng.choice([c for c in classes if c != src.parent.name])
        src.rename(dst / to / f"planted-{src.parent.name}-{src.name}")
        moved.add(f"{to}/planted-{src.parent.name}-{src.name}")
    return moved


def with_model(tmp: Path, params: dict, overrides: list[str]) -> Path:
    """The whole pipeline (`dvc repro labels`) in a clone of this repository, with the recipe in
    benchmarks/bbc_headtail.preset in fp32 (bf16 is emulated, slowly, on CPUs without it) -> the clone,
    its stage outputs linked under the names the baseline-only path writes. overrides: key=value
    (--set), after the preset."""
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    preset = (ROOT / "benchmarks" / "bbc_headtail.preset").read_text().splitlines()
    with_overrides(params, [line for line in [*preset, *overrides]
                            if line.strip() and not line.startswith("#") and "precision" not in line])
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run(["dvc", "repro", "labels"], cwd=repo, check=True, env=env)
    for name, path in (("c.parquet", "data/interim/corpus.parquet"), ("sp.parquet", "data/processed/splits.parquet"),
                       ("bp.parquet", "data/processed/test_predictions.parquet"),
                       ("vp.parquet", "data/processed/val_predictions.parquet")):
        (repo / name).symlink_to(repo / path)
    return repo


def true_label(table: pd.DataFrame) -> pd.Series:
    """The class folder a file came from: planted-<class>-<name> names it, the rest are where they were."""
    planted = table["source_path"].str.extract(r"/planted-([a-z]+)-", expand=False)
    return planted.fillna(table["given"])


def accuracies(tmp: Path, table: pd.DataFrame) -> dict:
    """The TF-IDF baseline (the baseline stage's params) trained on the training split with the
    planted, the corrected (every flagged document given its suggestion) and the true labels,
    scored on the test split's true labels."""
    from textclf.config import load_params
    from textclf.evaluate.baseline import fit_and_predict

    corpus = pd.read_parquet(tmp / "c.parquet", columns=["doc_id", "text"]).set_index("doc_id")
    table = table.assign(text=corpus.loc[table["doc_id"], "text"].to_numpy(), true=true_label(table))
    table["corrected"] = table["given"].where(~table["flagged"], table["suggested"])
    train, test = table[table["split"] == "train"], table[table["split"] == "test"]
    cfg = load_params(tmp / "params.yaml").baseline
    out = {}
    for name in ("given", "corrected", "true"):
        classes, probs = fit_and_predict(train["text"].tolist(), train[name].tolist(), test["text"].tolist(), cfg)
        predicted = np.asarray(classes)[probs.argmax(axis=1)]
        out[f"trained_on_{name}"] = round(float((predicted == test["true"].to_numpy()).mean()), 4)
    out["test_labels_wrong_before"] = int((test["given"] != test["true"]).sum())
    out["test_labels_wrong_after"] = int((test["corrected"] != test["true"]).sum())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", default="", help="class-conditional: move files of this class only")
    parser.add_argument("--target", default="", help="class-conditional: to this class")
    parser.add_argument("--model", action="store_true",
                        help="the fine-tuned model's validation and test probabilities, not the baseline's "
                             "test ones (dvc repro; long)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="with --model: a param over the preset's, e.g. train.epochs=1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        moved = plant(tmp / "bbc", args.rate, args.seed, args.source, args.target)
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["ingest"]["source"] = str(tmp / "bbc")
        params["labels"]["folds"] = args.folds
        if args.model:
            tmp = with_model(tmp, params, args.set)
        else:
            (tmp / "params.yaml").write_text(yaml.safe_dump(params))
            stage("ingest", tmp, "--corpus", "c.parquet", "--report", "r.json")
            stage("split", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json")
            stage("baseline", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                  "--predictions", "bp.parquet")
        model_val = ["--val-predictions", "vp.parquet"] if args.model else []  # the baseline has none
        seconds, peak = stage("labels", tmp, "--corpus", "c.parquet", "--splits", "sp.parquet", "--predictions",
                              "bp.parquet", *model_val, "--table", "li.parquet", "--summary", "li.json")
        table = pd.read_parquet(tmp / "li.parquet")
        table["planted"] = table["source_path"].isin(moved)
        rows = {}
        for split, part in [("all", table)] + list(table.groupby("split")):
            hit = int((part["flagged"] & part["planted"]).sum())
            rows[split] = {"planted": int(part["planted"].sum()), "flagged": int(part["flagged"].sum()),
                           "precision": round(hit / max(part["flagged"].sum(), 1), 3),
                           "recall": round(hit / max(part["planted"].sum(), 1), 3)}
        summary = json.loads((tmp / "li.json").read_text())
        print(json.dumps({"judged_by": sorted(table["judged_by"].unique()), "rate": args.rate, "source": args.source, "target": args.target, "folds": args.folds,
                          "seed": args.seed, "documents": len(table), "planted_moved": len(moved),
                          "estimated_noise": summary["estimated_noise"], "labels_stage_s": round(seconds, 1),
                          "labels_stage_peak_mb": round(peak * 1024), "by_split": rows,
                          "baseline_test_accuracy_on_true_labels": accuracies(tmp, table),
                          "top": table.head(20)[["source_path", "split", "given", "suggested", "quality",
                                                 "flagged"]].to_dict("records")}, indent=1))


if __name__ == "__main__":
    main()
