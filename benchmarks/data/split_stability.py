"""How many documents change split when BBC's data changes, stable split against the exact
stratified shuffle (split.method), measured through ingest and split on real folders.

    .venv/bin/python benchmarks/data/split_stability.py [--seed 42]

Each scenario ingests two versions of ../shared/data/bbc (copied into a temporary folder,
default ingest params) and splits both with default split params but the method: a random
90 % then all of it, all then a random 5 % removed, one document added to one class, and
20 documents moved to another class folder (a relabelling round). Per scenario and method:
documents in both versions that changed split, first-version test documents now in train,
and the groups the stable split moved to give a class every split.
"""
from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.config import SplitParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402
from textclf.data.split_stage import split_corpus  # noqa: E402
from textclf.data.splitting import class_counts  # noqa: E402


def copy(files: dict[str, str], folder: Path) -> Path:
    """{relative path in the copy: relative path in BBC} -> the copied corpus folder."""
    for rel, src in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(BBC / src, folder / rel)
    return folder


def scenarios(rng: random.Random) -> dict[str, tuple[dict, dict]]:
    files = sorted(str(p.relative_to(BBC)) for p in BBC.rglob("*.txt"))
    every = {f: f for f in files}
    ninety = {f: f for f in rng.sample(files, round(0.9 * len(files)))}
    minus = {f: f for f in rng.sample(files, len(files) - round(0.05 * len(files)))}
    one_less = dict(every)
    del one_less[rng.choice([f for f in files if f.startswith("tech/")])]
    classes = sorted({f.split("/")[0] for f in files})
    moved = dict(every)
    for f in rng.sample(files, 20):
        other = rng.choice([c for c in classes if c != f.split("/")[0]])
        moved[f"{other}/moved_{f.replace('/', '_')}"] = moved.pop(f)
    return {"90 % -> 100 %": (ninety, every), "100 % -> 95 %": (every, minus),
            "one added to tech": (one_less, every), "20 relabelled": (every, moved)}


def splits(corpus: pd.DataFrame, method: str, seed: int) -> tuple[pd.Series, int, dict]:
    """-> (split per content hash, repair moves, class counts)."""
    params = SplitParams()
    out, repairs = split_corpus(corpus, params.fractions, seed, method)
    return out.set_index("content_hash")["split"], len(repairs), class_counts(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42, help="which documents each scenario picks")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows, counts = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, (old, new)) in enumerate(scenarios(random.Random(args.seed)).items()):
            a = build_corpus(copy(old, Path(tmp) / f"{n}a"), 1_000_000, 5)[0]
            b = build_corpus(copy(new, Path(tmp) / f"{n}b"), 1_000_000, 5)[0]
            for method in ("stable", "stratified_shuffle"):
                (before, _, _), (after, repairs, per_class) = (splits(a, method, 42), splits(b, method, 42))
                both = before.index.intersection(after.index)
                changed = before[both] != after[both]
                test_to_train = ((before[both] == "test") & (after[both] == "train")).sum()
                rows.append({"scenario": name, "method": method, "docs before": len(a), "after": len(b),
                             "in both": len(both), "changed split": int(changed.sum()),
                             "test -> train": f"{int(test_to_train)} of {int((before == 'test').sum())}",
                             "repairs": repairs})
                counts.setdefault(method, per_class)
    print(table(rows, list(rows[0])))
    for method, per_class in counts.items():
        print(f"\nclass counts per split, all of BBC, {method}:")
        classes = sorted(per_class["train"])
        print(table([{"split": s, **per_class[s]} for s in ("train", "validation", "test")],
                    ["split", *classes]))


if __name__ == "__main__":
    main()
