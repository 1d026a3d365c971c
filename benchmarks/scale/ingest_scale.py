"""Ingest at scale with near-duplicate detection (issue 12): the BBC variant corpus.

    .venv/bin/python benchmarks/scale/ingest_scale.py [--bbc ../shared/data/bbc] [--scales 1 10 40]
        [--repeats 2]

For each scale k, in a temporary folder: every BBC article left after exact de-duplication
(2125) is written k times, each copy with one extra line `variant j`, so no two files are
exact duplicates. Then:
- the ingest stage runs in a fresh process, detection on (best of --repeats) and off:
  wall time (imports and parquet writing included) and peak RSS;
- every variant family (the copies of one article) must be exactly one group, and the
  families must group as their articles do at 1x (BBC's own near-duplicates join two);
- split (seed 42, group-aware) + TF-IDF baseline: its test accuracy must stay within
  1 point of the 1x figure. For contrast, the same baseline on a split that ignores the
  groups (every document its own, as before issue 12), where copies leak into test.
Prints a table, the memory slope (least squares over the scales) and the goals.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import stage, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.evaluate.baseline import fit_and_score  # noqa: E402
from textclf.config import BaselineParams, NearDuplicateParams, SplitParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402
from textclf.data.splitting import stratified_split  # noqa: E402

GOAL_SECONDS = 10.0  # ingest of the 10x corpus, detection included, on the 2-core machine


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--scales", type=int, nargs="+", default=[1, 10, 40])
    p.add_argument("--repeats", type=int, default=2, help="timed ingest runs per scale; the best counts")
    return p.parse_args(argv)


def write_variants(articles: pd.DataFrame, k: int, root: Path) -> int:
    """label/<article>_v<j>.txt for j = 1..k -> number of files written."""
    for label in articles["label"].unique():
        (root / label).mkdir(parents=True)
    for a in articles.itertuples():
        stem = a.source_path.rsplit("/", 1)[-1].removesuffix(".txt")
        for j in range(1, k + 1):
            (root / a.label / f"{stem}_v{j:02d}.txt").write_text(f"{a.text}\nvariant {j}\n", encoding="utf-8")
    return len(articles) * k


def run_ingest(source: Path, work: Path, enabled: bool) -> tuple[float, float]:
    """The ingest stage in a fresh process -> (wall seconds, peak RSS MiB)."""
    params = work / f"params-{enabled}.yaml"
    params.write_text(yaml.safe_dump({"ingest": {"source": str(source),
                                                 "near_duplicates": {"enabled": enabled}}}))
    seconds, gib = stage("ingest", work, "--corpus", str(work / "corpus.parquet"), "--report",
                         str(work / "report.json"), params=params)
    return seconds, gib * 1024


def family_check(corpus: pd.DataFrame, article_groups: pd.Series) -> tuple[int, bool]:
    """-> (families spread over two or more groups, whether families group as their
    articles do in BBC itself: the same partition)."""
    family = corpus["source_path"].str.replace(r"_v\d+\.txt$", ".txt", regex=True)
    spread = int((corpus.groupby(family)["group"].nunique() > 1).sum())
    pairs = pd.DataFrame({"got": corpus["group"].to_numpy(),
                          "bbc": article_groups[family].to_numpy()}).drop_duplicates()
    return spread, bool(pairs["got"].is_unique and pairs["bbc"].is_unique)


def baseline_accuracy(corpus: pd.DataFrame) -> tuple[float, float]:
    """Group-aware split (seed 42) + TF-IDF baseline -> (test accuracy, seconds)."""
    started = time.perf_counter()
    split = stratified_split(corpus, SplitParams().fractions, SplitParams().seed)
    frame = corpus.merge(split[["doc_id", "split"]], on="doc_id")
    train, test = frame[frame["split"] == "train"], frame[frame["split"] == "test"]
    scores = fit_and_score(train["text"].tolist(), train["label"].tolist(),
                           test["text"].tolist(), test["label"].tolist(), BaselineParams())
    return scores["accuracy"], time.perf_counter() - started


def measure(k: int, articles: pd.DataFrame, article_groups: pd.Series, repeats: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"ingest_scale_{k}x_") as tmp:
        source, work = Path(tmp) / "corpus", Path(tmp)
        files = write_variants(articles, k, source)
        off_seconds, off_mib = run_ingest(source, work, enabled=False)
        runs = [run_ingest(source, work, enabled=True) for _ in range(repeats)]
        seconds, mib = min(runs)
        corpus = pd.read_parquet(work / "corpus.parquet")
    spread, as_bbc = family_check(corpus, article_groups)
    accuracy, baseline_s = baseline_accuracy(corpus)
    leaky, _ = baseline_accuracy(corpus.assign(group=corpus["doc_id"]))
    sizes = corpus["group"].value_counts()
    return {"scale": f"{k}x", "files": files, "ingest s": seconds, "runs s": [s for s, _ in runs],
            "no detection s": off_seconds, "peak MiB": mib, "no detection MiB": off_mib,
            "groups of 2+": int((sizes > 1).sum()), "groups": len(sizes), "families split": spread,
            "grouped as BBC": as_bbc, "baseline acc": accuracy, "baseline s": baseline_s,
            "baseline acc, groups ignored": leaky}


FORMATS = {"ingest s": ".2f", "no detection s": ".2f", "peak MiB": ".0f", "no detection MiB": ".0f",
           "baseline acc": ".4f", "baseline s": ".1f", "baseline acc, groups ignored": ".4f"}


def shown(row: dict) -> dict:
    out = {k: format(v, FORMATS[k]) if k in FORMATS else v for k, v in row.items()}
    out["runs s"] = ", ".join(f"{s:.2f}" for s in row["runs s"])
    out["grouped as BBC"] = "yes" if row["grouped as BBC"] else "NO"
    return out


def print_goals(frame: pd.DataFrame) -> None:
    if len(frame) > 1:
        slope, intercept = np.polyfit(frame["files"], frame["peak MiB"], 1)
        residual = np.abs(np.polyval([slope, intercept], frame["files"]) - frame["peak MiB"]).max()
        print(f"\nmemory slope: {slope * 1000:.1f} MiB per 1000 files, intercept {intercept:.0f} MiB "
              f"(largest residual {residual:.0f} MiB)")
    by_scale = frame.set_index("scale")
    if "10x" in by_scale.index:
        t10 = by_scale.loc["10x", "ingest s"]
        print(f"goal: 10x ingest <= {GOAL_SECONDS:.0f} s: {t10:.2f} s, {'pass' if t10 <= GOAL_SECONDS else 'FAIL'}")
        if "1x" in by_scale.index:
            gap = abs(by_scale.loc["10x", "baseline acc"] - by_scale.loc["1x", "baseline acc"])
            print(f"goal: 10x baseline within 1 point of 1x: {gap * 100:.2f} points, "
                  f"{'pass' if gap <= 0.01 else 'FAIL'}")
    ok = (frame["families split"] == 0).all() and frame["grouped as BBC"].all()
    print(f"goal: every variant family one group, grouped as its article in BBC: {'pass' if ok else 'FAIL'}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not Path(args.bbc).is_dir():
        sys.exit(f"BBC corpus not found at {args.bbc}; pass --bbc")
    articles, _ = build_corpus(Path(args.bbc), 1_000_000, 5, NearDuplicateParams(enabled=False))
    grouped, _ = build_corpus(Path(args.bbc), 1_000_000, 5)
    article_groups = grouped.set_index("source_path")["group"]
    rows = [measure(k, articles, article_groups, args.repeats) for k in args.scales]
    print(f"BBC variant corpus, {len(articles)} articles, {os.cpu_count()} CPUs\n")
    print(table([shown(r) for r in rows], list(rows[0])))
    print_goals(pd.DataFrame(rows))


if __name__ == "__main__":
    main()
