"""Several labels per document, on BBC: a multi-label corpus made of BBC articles (pairs of
articles of two different classes joined into one document, labelled with both, and single
articles with their class), fine-tuned through the whole pipeline per split seed, with the
one-vs-rest TF-IDF baseline beside it on the same test documents.

    .venv/bin/python benchmarks/training/multilabel.py                   # split seeds 0 1
    .venv/bin/python benchmarks/training/multilabel.py --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/training/multilabel.py --summarize       # the table again, no new runs

Every article is used once (in a pair or alone), so no text reaches two splits through two
documents. The table is written outside the repository (--table, default under /tmp): BBC is
never copied into it. Each seed is a queued DVC experiment (`dvc exp run --queue`, then `dvc
queue start`) with the recipe of benchmarks/bbc.preset, `ingest.task: multilabel` and the
table as ingest.source.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf, not an installed one)
from bbc_experiments import bbc_parser, run_experiments  # noqa: E402
from textclf.stage import run_stage  # noqa: E402
from textclf.multiseed import read_preset  # noqa: E402

log = logging.getLogger("multilabel")


def build_table(source: Path, out: Path, pairs: int, seed: int) -> dict:
    """BBC class folders -> a JSON Lines table of `pairs` two-class documents and every other
    article alone -> counts. Pairs take articles of two different classes, each used once."""
    rng = random.Random(seed)
    docs = {c.name: sorted(c.glob("*.txt")) for c in sorted(source.iterdir()) if c.is_dir()}
    for files in docs.values():
        rng.shuffle(files)
    rows = []
    classes = sorted(docs)
    for k in range(pairs):  # class pairs in turn, so each pair of classes appears about as often
        step = 1 + (k // len(classes)) % (len(classes) - 1)  # 1, 2, 3, 4: every other class in turn
        a, b = classes[k % len(classes)], classes[(k % len(classes) + step) % len(classes)]
        if a == b or not docs[a] or not docs[b]:
            continue
        text = docs[a].pop().read_text(encoding="utf-8", errors="replace").strip() + "\n\n" + \
            docs[b].pop().read_text(encoding="utf-8", errors="replace").strip()
        rows.append({"text": text, "label": sorted([a, b])})
    singles = [{"text": f.read_text(encoding="utf-8", errors="replace").strip(), "label": [c]}
               for c in classes for f in docs[c]]
    rows += singles
    rng.shuffle(rows)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return {"documents": len(rows), "pairs": len(rows) - len(singles), "singles": len(singles)}


def row(seed: int, m: dict) -> dict:
    base = m["baseline"]
    return {"seed": seed, "n_test": m["n_test"],
            **{f"model_{k}": m[k] for k in ("accuracy", "micro_f1", "macro_f1", "hamming_loss")},
            **{f"baseline_{k}": base[k] for k in ("accuracy", "micro_f1", "macro_f1", "hamming_loss")},
            "verdict": m["comparison"]["verdict"], "mcnemar_p": m["comparison"]["mcnemar_p"],
            "guards": ", ".join(f"{k}: {v}" for k, v in m["guards"].items() if v != "pass") or "all pass"}


def table(rows: list[dict]) -> str:
    """Markdown: per seed, the model's and the baseline's subset accuracy, micro-F1, macro-F1
    and Hamming loss (percent), the paired verdict; then the means."""
    keys = ("accuracy", "micro_f1", "macro_f1", "hamming_loss")
    lines = ["| split seed | test docs | system | subset acc. | micro-F1 | macro-F1 | Hamming loss | verdict (McNemar p) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for system in ("model", "baseline"):
            cells = " | ".join(f"{r[f'{system}_{k}'] * 100:.2f}" for k in keys)
            verdict = f"{r['verdict']} ({r['mcnemar_p']:.3g})" if system == "model" else ""
            lines.append(f"| {r['seed']} | {r['n_test']} | {system} | {cells} | {verdict} |")
    for system in ("model", "baseline"):
        cells = " | ".join(f"{statistics.fmean(r[f'{system}_{k}'] for r in rows) * 100:.2f}" for k in keys)
        lines.append(f"| **mean** | {len(rows)} seeds | {system} | {cells} | |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = bbc_parser(__doc__, "multilabel", "NAME-s<seed>")
    parser.add_argument("--table", default="/tmp/textclf-bbc-multilabel.jsonl",
                        help="where the multi-label table is written (outside the repository)")
    parser.add_argument("--pairs", type=int, default=600, help="two-class documents (default 600)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    source, out = Path(args.source).resolve(), Path(args.table).resolve()
    if not source.is_dir():
        raise SystemExit(f"--source {args.source}: no such folder (the BBC corpus, a folder per class).")
    if out.is_relative_to(ROOT):
        raise SystemExit(f"--table {out} is inside the repository; BBC text must stay out of it.")
    exps = {seed: f"{args.name}-s{seed}" for seed in args.seeds}
    if not args.summarize:
        log.info("table %s: %s", out, build_table(source, out, args.pairs, seed=0))
    base = [*read_preset(args.preset), "ingest.task=multilabel", f"ingest.source={out}", *args.extra]
    shown = run_experiments({name: [*base, f"split.seed={seed}"] for seed, name in exps.items()},
                            args.jobs, args.summarize)
    rows = [row(seed, shown[name]) for seed, name in exps.items()]
    log.info("BBC as several labels per document (%d pairs), split seeds %s:\n%s", args.pairs,
             " ".join(map(str, args.seeds)), table(rows))
    for r in rows:
        log.info("seed %d guards: %s", r["seed"], r["guards"])
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    run_stage(main)
