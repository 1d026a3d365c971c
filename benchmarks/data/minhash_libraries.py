"""Which MinHash LSH library for ingest's near-duplicate detection (issue 12): rensa vs datasketch.

    .venv/bin/pip install datasketch==2.0.0     # for this comparison only; not a dependency
    .venv/bin/python benchmarks/data/minhash_libraries.py [--bbc ../shared/data/bbc] [--scales 1 10]

Both get the same input, ingest's word 5-shingles of the BBC articles (each article k times
with a `variant j` line at scale k, as benchmarks/scale/ingest_scale.py builds them), and do the
same work: 128-slot MinHash sketches, an LSH index of 64 bands x 2 rows (ingest's banding at
threshold 0.5), one query per document. Shingling is not timed. Best of --repeats.
"""
from __future__ import annotations

import argparse
import sys
import time
from importlib.metadata import version
from pathlib import Path

import rensa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.config import NearDuplicateParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402
from textclf.data.near_dups import shingles  # noqa: E402

NUM_PERM, BANDS, SEED = 128, 64, 1


def with_rensa(docs: list[list[str]]) -> int:
    sketches = rensa.RMinHash.from_token_sets(docs, NUM_PERM, SEED)
    lsh = rensa.RMinHashLSH(0.5, NUM_PERM, BANDS)
    lsh.insert_many(sketches)
    return sum(len(lsh.query(m)) - 1 for m in sketches) // 2


def with_datasketch(docs: list[list[str]]) -> int:
    import datasketch  # installed for this comparison only: --help runs without it

    sketches = list(datasketch.MinHash.bulk([[s.encode() for s in d] for d in docs],
                                            num_perm=NUM_PERM, seed=SEED))
    lsh = datasketch.MinHashLSH(num_perm=NUM_PERM, params=(BANDS, NUM_PERM // BANDS))
    for i, m in enumerate(sketches):
        lsh.insert(i, m)
    return sum(len(lsh.query(m)) - 1 for m in sketches) // 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--scales", type=int, nargs="+", default=[1, 10])
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    articles, _ = build_corpus(Path(args.bbc), 1_000_000, 5, NearDuplicateParams(enabled=False))
    rows = []
    for k in args.scales:
        docs = [shingles(f"{text}\nvariant {j}", 5) for text in articles["text"] for j in range(1, k + 1)]
        for name, run in (("rensa", with_rensa), ("datasketch", with_datasketch)):
            times = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                pairs = run(docs)
                times.append(time.perf_counter() - started)
            rows.append({"scale": f"{k}x", "documents": len(docs), "library": f"{name} {version(name)}",
                         "sketch + index + query s": f"{min(times):.2f}", "candidate pairs": pairs})
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
