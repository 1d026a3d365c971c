"""A user's own tabular corpus at scale (issue 22): ingest -> tokenize -> split -> baseline
on 100 000 and 1 000 000 synthetic documents, as Parquet and as JSON Lines, and the train
stage's data path on the largest.

    .venv/bin/python benchmarks/corpus_scale.py [--bbc ../shared/data/bbc]
        [--sizes 100000 1000000] [--formats parquet jsonl] [--train-size 1000000] [--work DIR]

Documents recombine BBC sentences within a class: each takes as many sentences as a BBC
article of its class drawn at random has, each sentence drawn from the class's pool, so
lengths and vocabulary are BBC's and near-duplicate groups stay rare. Every stage runs as
`python -m stages.<name>` in a fresh process with the project's params (tokenize.max_length
256); per stage: wall time, peak RSS (VmHWM of the stage's own process) and documents/s.
Beside tokenize, the raw `tokenizers` encode_batch of the same texts in one process.
Train runs with train.max_steps on the largest corpus and on a 2 000-document one; the
difference of their resident memory before the first step is what the data path holds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from textclf.config import NearDuplicateParams
from textclf.data.corpus import build_corpus
from throughput_helpers import table

REPO = Path(__file__).resolve().parents[1]
SEED = 2026
GEN_BATCH = 50_000
SENTENCE = re.compile(r"(?<=[.!?\"])\s+(?=[A-Z\"])")
GOAL_RSS_GIB, GOAL_TRAIN_GIB, GOAL_TOKENIZE = 4.0, 1.0, 0.80
DATA_STAGES = ("ingest", "tokenize", "split", "baseline")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(REPO.parent / "shared" / "data" / "bbc"))
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--formats", nargs="+", default=["parquet", "jsonl"], choices=["parquet", "jsonl"])
    p.add_argument("--train-size", type=int, default=None,
                   help="corpus size whose train data path is measured (default: the largest)")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--work", default=None, help="keep the corpora and outputs here (default: a temp dir)")
    return p.parse_args(argv)


def sentence_pools(bbc: Path) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per class: (every sentence of its articles, each article's sentence count)."""
    articles, _ = build_corpus(bbc, 1_000_000, 5, NearDuplicateParams(enabled=False))
    pools = {}
    for label, texts in articles.groupby("label")["text"]:
        split = [[s for s in SENTENCE.split(" ".join(t.split())) if s] for t in texts]
        pools[label] = ([s for doc in split for s in doc], np.array([len(d) for d in split]))
    return pools


def synthetic_batches(pools: dict, n: int, seed: int):
    """Record batches of (text, label), GEN_BATCH rows each, classes in BBC's proportions."""
    rng = np.random.default_rng(seed)
    labels = sorted(pools)
    weights = np.array([len(pools[c][1]) for c in labels], dtype=float)
    for start in range(0, n, GEN_BATCH):
        size = min(GEN_BATCH, n - start)
        which = rng.choice(len(labels), size=size, p=weights / weights.sum())
        texts = []
        for c in which:
            sentences, counts = pools[labels[c]]
            picks = rng.integers(0, len(sentences), size=int(rng.choice(counts)))
            texts.append(" ".join(sentences[i] for i in picks))
        yield pa.record_batch([pa.array(texts), pa.array([labels[c] for c in which])],
                              names=["text", "label"])


def write_corpus(pools: dict, n: int, fmt: str, path: Path) -> None:
    if fmt == "parquet":
        with pq.ParquetWriter(path, pa.schema([("text", pa.string()), ("label", pa.string())])) as w:
            for batch in synthetic_batches(pools, n, SEED):
                w.write_batch(batch)
        return
    with open(path, "w", encoding="utf-8") as fh:
        for batch in synthetic_batches(pools, n, SEED):
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in batch.to_pylist())


# A stage in a fresh process, then its own peak RSS from /proc (wait4's ru_maxrss would
# also count this benchmark's memory, which the child inherits at fork, before its exec).
CHILD = """import runpy, sys
module = sys.argv.pop(1)
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    print("peak_kib", peak, file=sys.stderr)
"""


def run_stage(stage: str, args: list[str], work: Path) -> tuple[float, float, str]:
    """-> (wall seconds, peak RSS GiB, its log)."""
    cmd = [sys.executable, "-c", CHILD, f"stages.{stage}", "--params", str(work / "params.yaml"), *args]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{stage} failed in {work}:\n{proc.stderr[-3000:]}")
    return seconds, int(proc.stderr.rsplit("peak_kib", 1)[1]) / 2**20, proc.stderr
