"""The labels stage at scale (issue 40): what judging every label adds to a large corpus.

    .venv/bin/python benchmarks/scale/labels_scale.py [--sizes 100000] [--folds 10] [--work DIR]

The synthetic corpus of benchmarks/scale/corpus_scale.py (BBC sentences recombined within each
class, as Parquet), then ingest, split, baseline and labels as `python -m stages.<name>` in
fresh processes with the project's params (labels.folds from --folds), the baseline's test
predictions standing in for the fine-tuned model's (the labels stage needs no tokens, and the
model's probabilities are only averaged in). Per stage: wall time, peak RSS (the stage
process's own VmHWM) and documents/s; the labels stage beside the baseline stage, its peer
(one fit of the same baseline).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import stage, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from corpus_scale import sentence_pools, write_corpus, write_params  # noqa: E402  (the same synthetic corpus)


def stages(work: Path) -> list[tuple[str, list[str]]]:
    w = {k: str(work / v) for k, v in dict(corpus="corpus.parquet", splits="splits.parquet",
                                              bp="bp.parquet").items()}
    return [("ingest", ["--corpus", w["corpus"], "--report", str(work / "ingest_report.json")]),
            ("split", ["--corpus", w["corpus"], "--splits", w["splits"], "--counts", str(work / "n.json")]),
            ("baseline", ["--corpus", w["corpus"], "--splits", w["splits"], "--out", str(work / "b.json"),
                          "--predictions", w["bp"]]),
            ("labels", ["--corpus", w["corpus"], "--splits", w["splits"], "--predictions", w["bp"],
                        "--table", str(work / "li.parquet"), "--summary", str(work / "li.json")])]


def measure(pools: dict, n: int, folds: int, root: Path) -> list[dict]:
    work = root / str(n)
    work.mkdir(parents=True, exist_ok=True)
    source = work / "source.parquet"
    started = time.perf_counter()
    write_corpus(pools, n, "parquet", source)
    print(f"{n} documents written in {time.perf_counter() - started:.0f} s", flush=True)
    params = write_params(work, source, max_steps=1)
    params["labels"]["folds"] = folds
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    rows = []
    for name, args in stages(work):
        seconds, gib = stage(name, work, *args)
        rows.append({"documents": n, "stage": name, "wall s": seconds, "peak GiB": gib, "docs/s": n / seconds})
        print(rows[-1], flush=True)
    summary = json.loads((work / "li.json").read_text())
    print(f"flagged {summary['flagged']} of {summary['documents']}, estimated wrong {summary['estimated_noise']}")
    source.unlink()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--work", default=None, help="keep the corpora and outputs here (default: a temp dir)")
    args = p.parse_args()
    pools = sentence_pools(Path(args.bbc))
    with tempfile.TemporaryDirectory(prefix="labels_scale_") as tmp:
        rows = [r for n in sorted(args.sizes) for r in measure(pools, n, args.folds, Path(args.work or tmp))]
    print(f"\nsynthetic corpus from BBC sentences, {os.cpu_count()} CPUs, labels.folds {args.folds}\n")
    print(table([{k: (f"{v:.2f}" if k == "peak GiB" else f"{v:.0f}" if isinstance(v, float) else v)
                  for k, v in r.items()} for r in rows], list(rows[0])))
    for n in sorted(args.sizes):
        got = {r["stage"]: r for r in rows if r["documents"] == n}
        print(f"{n}: labels / baseline wall time {got['labels']['wall s'] / got['baseline']['wall s']:.1f}x, "
              f"peak {got['labels']['peak GiB']:.2f} vs {got['baseline']['peak GiB']:.2f} GiB")


if __name__ == "__main__":
    main()
