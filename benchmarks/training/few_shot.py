"""Issue 42's few-shot figures: BBC with K training documents per class, few-shot (train.method
setfit) against plain fine-tuning (params.yaml's recipe) and the TF-IDF baseline.

    .venv/bin/python benchmarks/training/few_shot.py --sizes 16 --seeds 0 1 2 3 4 --work /tmp/fewshot
    .venv/bin/python benchmarks/training/few_shot.py --sizes 8 16 32 64 --seeds 0 1 2 3 4 --work /tmp/fewshot

The real stages (`python -m stages.<name>`, each a fresh process) in --work: ingest, tokenize
(max_length 128 unless --set says otherwise) and split (split.seed 42) once, so validation and
test are the usual ones. Per size K and subsample seed S, the training split is cut to K
documents per class (drawn with seed S; the others left out of K<K>-s<S>/sp.parquet, which no
stage then reads), and each contender trains on it: few-shot (setfit), fine-tuning (params.yaml's
recipe), the same logistic head on the pretrained embeddings (frozen: what the pairs add), each
through the train stage and scored by its model folder's Predictor on the test texts, and the
baseline stage (TF-IDF, its test predictions). A (K, S, contender) already trained with the same
params is not trained again. Per K: mean ± sd of test accuracy and macro-F1 over the seeds,
training seconds, and the paired test of few-shot against each peer pooled over the seeds
(textclf.evaluate.pooled: the test documents are the same in every seed, so its documents-once
sign test is the one to read). Goal: at 16 per class, few-shot 5 points above fine-tuning and
TF-IDF. Run two at once with OMP_NUM_THREADS=1 each: two 2-thread trainings on 2 cores run
several times slower than one after the other.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import params_for, stage, table, write_if_changed  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402

log = logging.getLogger("few-shot-bench")
CONTENDERS = {  # name -> its params over the base, per section
    "setfit": {"model": {"head": "pooled", "pooling": "mean"},
               "train": {"method": "setfit", "epochs": 1, "batch_size": 16, "lr_encoder": 2e-5}},
    "finetune": {},
    # the same head on the pretrained embeddings, no pairs: what the contrastive phase adds
    "frozen": {"model": {"head": "pooled", "pooling": "mean"}, "train": {"method": "setfit", "encoder": "freeze"}},
}
GOAL_SIZE, GOAL_POINTS = 16, 0.05


def subsample(work: Path, k: int, seed: int) -> Path:
    """K<k>-s<seed>/sp.parquet: the split with k training documents per class (seed-drawn)."""
    folder = work / f"K{k}-s{seed}"
    folder.mkdir(exist_ok=True)
    splits = pd.read_parquet(work / "sp.parquet")  # doc_id, label, split, ...
    train = splits[splits["split"] == "train"].sort_values("doc_id")
    rng = np.random.default_rng(seed)
    kept = train.groupby("label", group_keys=False).apply(
        lambda g: g.iloc[np.sort(rng.choice(len(g), size=min(k, len(g)), replace=False))])
    cut = pd.concat([splits[splits["split"] != "train"], splits[splits["doc_id"].isin(kept["doc_id"])]])
    cut.to_parquet(folder / "sp.parquet", index=False)
    return folder


def test_texts(work: Path) -> pd.DataFrame:
    corpus = pd.read_parquet(work / "c.parquet", columns=["doc_id", "text", "label"])
    splits = pd.read_parquet(work / "sp.parquet", columns=["doc_id", "split"])
    return corpus.merge(splits[splits["split"] == "test"], on="doc_id").sort_values("doc_id")


def train_contender(work: Path, folder: Path, name: str, params: dict) -> float | None:
    """The train stage for one contender -> seconds (None: trained already, same params)."""
    d = folder / name
    merged = {s: {**params[s], **CONTENDERS[name].get(s, {})} for s in params}
    if not write_if_changed(d / "params.yaml", merged) and (d / "model" / "params.json").is_file():
        return None
    return stage("train", work, "--tokens", "t.parquet", "--splits", str(folder / "sp.parquet"),
                 "--model-dir", str(d / "model"), "--curve", str(d / "curve.csv"), "--guards", str(d / "guards.json"),
                 "--movement", str(d / "mv.csv"), "--run-file", str(d / "run.json"), "--checkpoint-dir",
                 str(d / "ckpt"), params=d / "params.yaml")[0]


def measure(work: Path, k: int, seed: int, params: dict, test: pd.DataFrame) -> dict:
    """One (K, seed): every contender trained (or found) and scored on the test split."""
    from sklearn.metrics import f1_score

    from textclf.inference.predictor import Predictor
    folder = subsample(work, k, seed)
    out = {}
    start = time.perf_counter()
    stage("baseline", work, "--corpus", "c.parquet", "--splits", str(folder / "sp.parquet"),
          "--out", str(folder / "b.json"), "--predictions", str(folder / "bp.parquet"))
    base = pd.read_parquet(folder / "bp.parquet").set_index("doc_id").loc[test["doc_id"]]
    out["tfidf"] = {"predicted": base["predicted"].tolist(), "seconds": time.perf_counter() - start}
    timings = json.loads((folder / "seconds.json").read_text()) if (folder / "seconds.json").is_file() else {}
    for name in CONTENDERS:
        seconds = train_contender(work, folder, name, params)
        timings[name] = seconds if seconds is not None else timings.get(name)
        predictor = Predictor(folder / name / "model")
        probs = predictor.predict_proba(test["text"].tolist())  # (N, C)
        out[name] = {"predicted": [predictor.labels[i] for i in probs.argmax(axis=1)], "seconds": timings[name]}
    (folder / "seconds.json").write_text(json.dumps(timings))
    truth = test["label"].tolist()
    for row in out.values():
        row["accuracy"] = float(np.mean(np.asarray(row["predicted"]) == np.asarray(truth)))
        row["macro_f1"] = float(f1_score(truth, row["predicted"], average="macro"))
    return out


def summary(k: int, per_seed: list[dict], test: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Per contender mean ± sd, and few-shot against each peer pooled over the seeds."""
    from textclf.evaluate.pooled import outcomes_frame, pooled_comparison
    names = [*CONTENDERS, "tfidf"]
    rows = []
    for name in names:
        acc = [s[name]["accuracy"] for s in per_seed]
        f1 = [s[name]["macro_f1"] for s in per_seed]
        secs = [s[name]["seconds"] for s in per_seed if s[name]["seconds"] is not None]
        sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)
        rows.append({"K": k, "contender": name, "seeds": len(acc),
                     "accuracy": f"{np.mean(acc) * 100:.2f} ± {sd(acc) * 100:.2f}",
                     "macro_f1": f"{np.mean(f1) * 100:.2f} ± {sd(f1) * 100:.2f}",
                     "train_s": float(np.mean(secs)) if secs else "", "mean_acc": float(np.mean(acc))})
    truth = np.asarray(test["label"])
    tests = []
    for peer in ("finetune", "tfidf", "frozen"):
        seeds = [outcomes_frame(test["doc_id"], np.asarray(s["setfit"]["predicted"]) == truth,
                                np.asarray(s[peer]["predicted"]) == truth) for s in per_seed]
        got = pooled_comparison(seeds)
        tests.append({"K": k, "setfit vs": peer, "difference": got["difference"] * 100,
                      "pairs b/c": f"{got['model_only']}/{got['baseline_only']}", "McNemar p": got["mcnemar_p"],
                      "documents ahead/behind": f"{got['documents_model_ahead']}/{got['documents_baseline_ahead']}",
                      "sign p": got["sign_p"], "verdict (documents once)": got["verdict"]})
    return rows, tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64], help="training documents per class")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="subsample seeds")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a param for every contender, e.g. tokenize.max_length=256")
    parser.add_argument("--work", default="/tmp/fewshot-bench")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
    params = params_for(BBC, ["tokenize.max_length=128", *args.set])
    if write_if_changed(work / "params.yaml", params) or not (work / "sp.parquet").is_file():
        stage("ingest", work, "--corpus", "c.parquet", "--report", "r.json")
        stage("tokenize", work, "--corpus", "c.parquet", "--tokens", "t.parquet",
              "--stats", "s.json", "--histogram", "h.csv")
        stage("split", work, "--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json")
    test = test_texts(work)
    result, means, tests = {}, [], []
    for k in args.sizes:
        per_seed = [measure(work, k, s, params, test) for s in args.seeds]
        rows, pooled = summary(k, per_seed, test)
        means += rows
        tests += pooled
        result[k] = {"per_seed": [{n: {x: v[x] for x in ("accuracy", "macro_f1", "seconds")} for n, v in s.items()}
                                  for s in per_seed], "pooled": pooled}
    print(f"\nBBC few-shot: {len(test)} test documents, subsample seeds {args.seeds}, {args.set or 'defaults'}\n")
    print(table(means, ["K", "contender", "seeds", "accuracy", "macro_f1", "train_s"]) + "\n")
    print(table(tests, list(tests[0])) + "\n")
    if GOAL_SIZE in args.sizes:
        got = {r["contender"]: r["mean_acc"] for r in means if r["K"] == GOAL_SIZE}
        margin = got["setfit"] - max(got["finetune"], got["tfidf"])
        print(f"goal: at {GOAL_SIZE} per class few-shot >= {GOAL_POINTS * 100:.0f} points above both: "
              f"{margin * 100:+.2f} points: {'PASS' if margin >= GOAL_POINTS else 'FAIL'}\n")
    print(json.dumps(result))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
