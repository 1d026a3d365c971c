"""A user's own tabular corpus at scale (issue 22): ingest -> tokenize -> split -> baseline
on 100 000 and 1 000 000 synthetic documents, as Parquet and as JSON Lines, and the train
stage's data path on the largest.

    .venv/bin/python benchmarks/scale/corpus_scale.py [--bbc ../shared/data/bbc]
        [--sizes 100000 1000000] [--formats parquet jsonl] [--train-size 1000000] [--work DIR]
    .venv/bin/python benchmarks/scale/corpus_scale.py --sizes 100000 --tokenize-rounds 3

Documents recombine BBC sentences within a class: each takes as many sentences as a BBC
article of its class drawn at random has, each sentence drawn from the class's pool, so
lengths and vocabulary are BBC's and near-duplicate groups stay rare. Every stage runs as
`python -m stages.<name>` in a fresh process with the project's params (tokenize.max_length
256); per stage: wall time, peak RSS (VmHWM of the stage's own process) and documents/s.
Beside tokenize, the raw `tokenizers` encode_batch of the same texts in one process (the
first 200 000 at most); `--tokenize-rounds N` instead alternates the two N times on all the
texts of each size and keeps the best of each. The downstream stages read corpus.parquet,
whose shape does not depend on the source format, so they run for the first format only.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, stage, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.config import NearDuplicateParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402

SEED = 2026
GEN_BATCH = 50_000
SENTENCE = re.compile(r"(?<=[.!?\"])\s+(?=[A-Z\"])")
GOAL_RSS_GIB, GOAL_TRAIN_GIB, GOAL_TOKENIZE = 4.0, 1.0, 0.80
DATA_STAGES = ("ingest", "tokenize", "split", "baseline")
SMALL = 2_000  # the corpus whose train memory is the reference
RAW_LIMIT = 200_000  # texts the raw encode_batch peer times (its rate does not depend on more)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--formats", nargs="+", default=["parquet", "jsonl"], choices=["parquet", "jsonl"])
    p.add_argument("--train-size", type=int, default=None,
                   help="corpus size whose train data path is measured (default: the largest)")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--work", default=None, help="keep the corpora and outputs here (default: a temp dir)")
    p.add_argument("--tokenize-rounds", type=int, default=0,
                   help="instead: tokenize and raw encode_batch alternately this many times on "
                        "each size (all texts), best of each")
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


# The tokenizer alone on the same texts, in a fresh process: read every text first (not
# timed), then time encode_batch over CHUNK-sized batches, as tokenize calls it.
RAW = """import json, sys, time
import pyarrow.parquet as pq
from textclf.data.tokens import CHUNK, load_ids_tokenizer
tokenizer = load_ids_tokenizer(sys.argv[2]).tokenizer
reader = pq.ParquetFile(sys.argv[1], pre_buffer=False)
texts, n = [], int(sys.argv[3])
for batch in reader.iter_batches(batch_size=CHUNK, columns=["text"]):
    texts.append(batch.column("text").to_pylist())
    if sum(map(len, texts)) >= n:
        break
started = time.perf_counter()
for chunk in texts:
    tokenizer.encode_batch(chunk, add_special_tokens=False)
print(json.dumps({"docs": sum(map(len, texts)), "seconds": time.perf_counter() - started}))
"""


def raw_encode(corpus: Path, model: str, limit: int) -> float:
    """Documents/s of `tokenizers` encode_batch alone on the corpus's first `limit` texts."""
    out = subprocess.run([sys.executable, "-c", RAW, str(corpus), model, str(limit)], cwd=ROOT,
                         capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return got["docs"] / got["seconds"]


def write_params(work: Path, source: Path, max_steps: int) -> dict:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["ingest"]["source"] = str(source)
    params["tokenize"]["max_length"] = 256
    params["train"].update(max_steps=max_steps, epochs=1, processes=1)
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    return params


def data_stages(work: Path, with_downstream: bool) -> list[tuple[str, list[str]]]:
    w = {k: str(work / v) for k, v in dict(corpus="corpus.parquet", tokens="tokens.parquet",
                                              splits="splits.parquet").items()}
    stages = [("ingest", ["--corpus", w["corpus"], "--report", str(work / "ingest_report.json")])]
    if with_downstream:
        stages += [("tokenize", ["--corpus", w["corpus"], "--tokens", w["tokens"], "--stats",
                                 str(work / "token_stats.json"), "--histogram", str(work / "lengths.csv")]),
                   ("split", ["--corpus", w["corpus"], "--splits", w["splits"], "--counts",
                              str(work / "split_counts.json")]),
                   ("baseline", ["--corpus", w["corpus"], "--splits", w["splits"], "--out",
                                 str(work / "baseline.json"), "--predictions", str(work / "bp.parquet")])]
    return stages


def train_until_first_step(work: Path) -> tuple[float, float]:
    """The train stage, stopped once it logs its resident memory before the first step ->
    (seconds to that point, that memory in GiB). The steps themselves are not the point."""
    args = ["--tokens", str(work / "tokens.parquet"), "--splits", str(work / "splits.parquet"),
            "--model-dir", str(work / "model"), "--curve", str(work / "curve.csv"), "--guards",
            str(work / "guards.json"), "--movement", str(work / "movement.csv"), "--run-file",
            str(work / "run.json"), "--checkpoint-dir", str(work / "checkpoint")]
    cmd = [sys.executable, "-m", "stages.train", "--params", str(work / "params.yaml"), *args]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True, env=env, start_new_session=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        found = re.search(r"before the first step: ([\d.]+) GB resident", line)
        if found:
            seconds = time.perf_counter() - started
            os.killpg(proc.pid, 9)
            proc.wait()
            return seconds, float(found.group(1))
    proc.wait()
    sys.exit(f"train ended before its first step in {work}:\n{''.join(lines[-30:])}")


def measure_size(pools: dict, n: int, formats: list[str], root: Path, train: bool, max_steps: int) -> list[dict]:
    rows = []
    for k, fmt in enumerate(formats):
        work = root / f"{n}-{fmt}"
        work.mkdir(parents=True, exist_ok=True)
        source = work / f"source.{fmt}"  # not corpus.parquet: that is what ingest writes
        started = time.perf_counter()
        write_corpus(pools, n, fmt, source)
        print(f"{n} documents as {fmt}: {source.stat().st_size / 2**20:.0f} MiB written in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        params = write_params(work, source, max_steps)
        # downstream stages read corpus.parquet, the same whatever the source format: once
        for name, args in data_stages(work, with_downstream=k == 0):
            seconds, gib = stage(name, work, *args)
            rows.append({"documents": n, "format": fmt, "stage": name, "wall s": seconds,
                         "peak GiB": gib, "docs/s": n / seconds})
            print(rows[-1], flush=True)
        if k == 0:
            raw = raw_encode(work / "corpus.parquet", params["model"]["name"], min(n, RAW_LIMIT))
            rows.append({"documents": n, "format": fmt, "stage": "raw encode_batch", "wall s": n / raw,
                         "peak GiB": float("nan"), "docs/s": raw})
            print(rows[-1], flush=True)
        if k == 0 and train:
            seconds, gib = train_until_first_step(work)
            rows.append({"documents": n, "format": fmt, "stage": "train (before first step)",
                         "wall s": seconds, "peak GiB": gib, "docs/s": float("nan")})
            print(rows[-1], flush=True)
        source.unlink()  # the corpora are large; the outputs stay for inspection
    return rows


def compare_tokenize(pools: dict, n: int, root: Path, rounds: int) -> dict:
    """The tokenize stage and raw encode_batch on the same n texts, taking turns -> best docs/s."""
    work = root / f"{n}-tokenize"
    work.mkdir(parents=True, exist_ok=True)
    write_corpus(pools, n, "parquet", work / "source.parquet")
    params = write_params(work, work / "source.parquet", 0)
    name, args = data_stages(work, with_downstream=True)[0]
    stage(name, work, *args)  # ingest, once
    tokenize_args = data_stages(work, with_downstream=True)[1][1]
    ours, raw = [], []
    for _ in range(rounds):
        ours.append(n / stage("tokenize", work, *tokenize_args)[0])
        raw.append(raw_encode(work / "corpus.parquet", params["model"]["name"], n))
        print(f"{n}: tokenize {ours[-1]:.0f} docs/s, raw encode_batch {raw[-1]:.0f} docs/s", flush=True)
    return {"documents": n, "tokenize docs/s": max(ours), "raw docs/s": max(raw),
            "ratio": max(ours) / max(raw)}


def print_goals(rows: list[dict], sizes: list[int]) -> None:
    def get(n, stage, key, fmt=None):
        found = [r[key] for r in rows if r["documents"] == n and r["stage"] == stage
                 and (fmt is None or r["format"] == fmt)]
        return found[0] if found else None
    top = max(sizes)
    if len(sizes) > 1:
        low = min(sizes)
        print("\nmemory slope per 100 000 documents (peak RSS, between the two sizes):")
        for stage in DATA_STAGES:
            a, b = get(low, stage, "peak GiB"), get(top, stage, "peak GiB")
            if a is not None and b is not None:
                print(f"  {stage}: {(b - a) / (top - low) * 1e5 * 1024:+.0f} MiB")
    worst = {s: max((r["peak GiB"] for r in rows if r["documents"] == top and r["stage"] == s), default=None)
             for s in DATA_STAGES}
    for stage, gib in worst.items():
        if gib is not None:
            print(f"goal: {stage} peak RSS <= {GOAL_RSS_GIB:.0f} GiB at {top} documents: {gib:.2f} GiB, "
                  f"{'pass' if gib <= GOAL_RSS_GIB else 'FAIL'}")
    for n in sizes:
        ours, raw = get(n, "tokenize", "docs/s"), get(n, "raw encode_batch", "docs/s")
        if ours and raw:
            print(f"goal: tokenize >= {GOAL_TOKENIZE:.0%} of raw encode_batch at {n}: {ours:.0f} vs "
                  f"{raw:.0f} docs/s = {ours / raw:.0%}, {'pass' if ours >= GOAL_TOKENIZE * raw else 'FAIL'}")
    big, small = get(top, "train (before first step)", "peak GiB"), get(SMALL, "train (before first step)", "peak GiB")
    if big is not None and small is not None:
        print(f"goal: train resident before its first step, {top} minus {SMALL} documents <= "
              f"{GOAL_TRAIN_GIB:.0f} GiB: {big:.2f} - {small:.2f} = {big - small:.2f} GiB, "
              f"{'pass' if big - small <= GOAL_TRAIN_GIB else 'FAIL'}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not Path(args.bbc).is_dir():
        sys.exit(f"BBC corpus not found at {args.bbc}; pass --bbc")
    pools = sentence_pools(Path(args.bbc))
    train_size = args.train_size or max(args.sizes)
    with tempfile.TemporaryDirectory(prefix="corpus_scale_") as tmp:
        root = Path(args.work or tmp)
        if args.tokenize_rounds:
            got = [compare_tokenize(pools, n, root, args.tokenize_rounds) for n in sorted(args.sizes)]
            print(table([{k: f"{v:.2f}" if k == "ratio" else f"{v:.0f}" for k, v in r.items()} for r in got],
                        list(got[0])))
            return
        rows = measure_size(pools, SMALL, ["parquet"], root, True, args.max_steps)
        for n in sorted(args.sizes):
            rows += measure_size(pools, n, args.formats, root, n == train_size, args.max_steps)
    print(f"\nsynthetic corpus from BBC sentences, {os.cpu_count()} CPUs, tokenize.max_length 256; "
          "train: resident memory before its first step\n")
    print(table([{k: (f"{v:.2f}" if k == "peak GiB" else f"{v:.0f}" if isinstance(v, float) else v)
                  for k, v in r.items()} for r in rows], list(rows[0])))
    print_goals(rows, sorted(args.sizes))


if __name__ == "__main__":
    main()
