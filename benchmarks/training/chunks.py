"""Long documents read whole or truncated, on BBC: tokenize.truncation chunks at max_length 128
against head+tail at 128 and at 256, per split seed: test accuracy, macro-F1, training time and
inference speed.

    .venv/bin/python benchmarks/training/chunks.py                       # split seeds 0 1, all three
    .venv/bin/python benchmarks/training/chunks.py --seeds 0 1 2 --jobs 1 -S tokenize.stride=64
    .venv/bin/python benchmarks/training/chunks.py --summarize           # the table again, no new runs
    .venv/bin/python benchmarks/training/chunks.py --dry-run             # the experiments it would queue

Each (contender, seed) is a queued DVC experiment of the whole pipeline (`dvc exp run --queue`,
then `dvc queue start`, as textclf.multiseed runs them) with the recipe of benchmarks/bbc.preset,
so the three contenders see the same test documents per seed. Training time is the training
run's wall time in MLflow (model load, epochs, validation, saving). Inference is the served
model (metrics.json's model_uri, ONNX int8 by default) on the same BBC texts for every
contender, timed after one warm-up batch: documents/s, and windows per document with chunks.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
import timing  # noqa: E402,F401  puts this checkout's src/ first: its textclf, not an installed one
from corpora import sample_texts  # noqa: E402
from bbc_experiments import bbc_parser, run_experiments  # noqa: E402
from textclf.stage import run_stage  # noqa: E402
from textclf.multiseed import read_preset  # noqa: E402

log = logging.getLogger("chunks")
CONTENDERS = {  # name -> its -S overrides, after the preset's
    "chunks128": ["tokenize.max_length=128", "tokenize.truncation=chunks"],
    "headtail128": ["tokenize.max_length=128", "tokenize.truncation=head+tail"],
    "headtail256": ["tokenize.max_length=256", "tokenize.truncation=head+tail"],
}


def names(prefix: str, seeds: list[int]) -> dict[tuple[str, int], str]:
    """(contender, seed) -> the DVC experiment's name."""
    return {(c, s): f"{prefix}-{c}-s{s}" for s in seeds for c in CONTENDERS}  # a whole seed first


def overrides(contender: str, seed: int, base: list[str]) -> list[str]:
    """The experiment's -S list, one per key (DVC refuses a key given twice): the contender's
    and the seed override the preset's and the command line's."""
    merged: dict[str, str] = {}
    for item in [*base, *CONTENDERS[contender], f"split.seed={seed}"]:
        key = item.split("=", 1)[0]
        merged.pop(key, None)
        merged[key] = item
    return list(merged.values())


def training_seconds(run_id: str) -> float:
    """The training run's wall time (evaluate logs into it later without moving its end time)."""
    from mlflow.tracking import MlflowClient

    from textclf.tracking.runs import tracking_uri

    info = MlflowClient(tracking_uri()).get_run(run_id).info
    return (info.end_time - info.start_time) / 1000


def inference(model_uri: str, texts: list[str], batch_size: int) -> dict:
    """Documents/s of the served model on `texts` (after a warm-up batch), and its windows per
    document (1 unless chunks)."""
    from textclf.data.tokenizing import encode_texts
    from textclf.inference.loading import load_predictor

    predictor = load_predictor(model_uri, batch_size)
    predictor.predict_proba(texts[:batch_size])  # warm-up: thread pools, first allocations
    start = time.perf_counter()
    predictor.predict_proba(texts)
    seconds = time.perf_counter() - start
    p = predictor  # both predictors hold the model's tokenize params and tokenizer
    enc = encode_texts(p.tokenizer, texts, p.max_length, p.truncation, p.stride)  # type: ignore[attr-defined]
    windows = statistics.fmean(enc.counts) if enc.counts else 1.0
    return {"docs_per_s": len(texts) / seconds, "windows_per_doc": windows}


def row(contender: str, seed: int, m: dict, infer: dict) -> dict:
    return {"contender": contender, "seed": seed, "n_test": m["n_test"], "accuracy": m["accuracy"],
            "macro_f1": m["macro_f1"], "train_s": training_seconds(m["mlflow"]["run_id"]),
            "model_uri": m["mlflow"]["model_uri"], **infer}


def table(rows: list[dict]) -> str:
    """Markdown: a row per contender and seed, then each contender's mean over the seeds."""
    lines = ["| contender | split seed | test docs | accuracy | macro-F1 | train s | infer docs/s | windows/doc |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['seed']} | {r['n_test']} | {r['accuracy'] * 100:.2f} "
                     f"| {r['macro_f1'] * 100:.2f} | {r['train_s']:.0f} | {r['docs_per_s']:.1f} "
                     f"| {r['windows_per_doc']:.2f} |")
    for contender in CONTENDERS:
        mine = [r for r in rows if r["contender"] == contender]
        if mine:
            mean = {k: statistics.fmean(r[k] for r in mine)
                    for k in ("accuracy", "macro_f1", "train_s", "docs_per_s", "windows_per_doc")}
            lines.append(f"| **{contender} mean** | {len(mine)} seeds | | {mean['accuracy'] * 100:.2f} "
                         f"| {mean['macro_f1'] * 100:.2f} | {mean['train_s']:.0f} | {mean['docs_per_s']:.1f} "
                         f"| {mean['windows_per_doc']:.2f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bbc_parser(__doc__, "chunks", "NAME-<contender>-s<seed>")
    parser.add_argument("--infer-docs", type=int, default=200, help="BBC texts timed per contender")
    parser.add_argument("--batch-size", type=int, default=16, help="inference batch size")
    parser.add_argument("--dry-run", action="store_true", help="log the experiments it would queue, run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # dvc_exps runs `dvc` by name: the one beside this interpreter (.venv/bin), as bbc_accuracy.sh does
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    source = Path(args.source).resolve()  # absolute: queued experiments run in a copy of the repo
    if not source.is_dir():
        raise SystemExit(f"--source {args.source}: no such folder (the BBC corpus, a folder per class).")
    exps = names(args.name, args.seeds)
    base = [*read_preset(args.preset), *args.extra, f"ingest.source={source}"]
    if args.dry_run:
        for (contender, seed), name in exps.items():
            log.info("dvc exp run --queue -n %s %s", name,
                     " ".join(f"-S {o}" for o in overrides(contender, seed, base)))
        return
    shown = run_experiments({name: overrides(contender, seed, base) for (contender, seed), name in exps.items()},
                            args.jobs, args.summarize)
    texts = sample_texts(args.infer_docs, source)
    rows = [row(c, s, shown[name], inference(shown[name]["mlflow"]["model_uri"], texts, args.batch_size))
            for (c, s), name in exps.items()]
    log.info("BBC, split seeds %s, %d texts timed per contender, %d CPUs:\n%s",
             " ".join(map(str, args.seeds)), len(texts), os.cpu_count() or 0, table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    run_stage(main)  # a failing dvc command: one line, exit 1
