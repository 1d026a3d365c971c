"""Near-duplicate groups: word shingles -> MinHash LSH candidates -> exact Jaccard ->
connected components.

MinHash and LSH come from rensa (Rust): it sketches and indexes 21 250 documents in 0.45 s
where datasketch takes 14 s, past the whole 10 s budget of that ingest
(docs/near_duplicates.md). LSH only proposes pairs. Each proposed pair is checked by
the exact Jaccard of its two shingle sets, compared as rensa's 64-bit shingle hashes, so a
band collision never merges two documents. (Two of a pair's few hundred shingles sharing a
64-bit hash has odds of about 1e-14, and would move that Jaccard by one shingle.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rensa import RMinHash, RMinHashLSH

from textclf.config import NearDuplicateParams

# Fixed, not a param: the seed only changes which pairs LSH proposes, and with the banding
# below a pair at the threshold is missed with probability <= MAX_MISS whatever the seed.
MINHASH_SEED = 20240917
MAX_MISS = 1e-3
BATCH = 256  # texts shingled at a time: their shingle strings are the transient memory peak


@dataclass(frozen=True)
class NearDuplicates:
    group_of: list[int]  # per document: the index of its group's first document
    pairs: list[tuple[int, int, float]]  # (i, j, Jaccard) of each link that joined two groups
    candidates: int  # pairs proposed by LSH
    checked: int  # pairs whose exact Jaccard was computed (the rest were already joined)
    bands: int


def shingles(text: str, size: int) -> list[str]:
    """Word `size`-grams of an NFC text, whitespace collapsed (ingest's normalised form);
    a text of at most `size` words is one shingle."""
    words = text.split()
    if len(words) <= size:
        return [" ".join(words)]
    return list(map(" ".join, zip(*(words[i:] for i in range(size)))))


def lsh_bands(threshold: float, num_perm: int) -> int:
    """Bands for the LSH: the most rows per band (fewest false candidates) for which a pair
    at exactly `threshold` still shares a band with probability >= 1 - MAX_MISS."""
    best = num_perm  # one row per band: the widest net
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if num_perm % rows == 0 and (1 - threshold ** rows) ** bands <= MAX_MISS:
            best = bands
    return best


def _sketch(texts: list[str], size: int, num_perm: int) -> tuple[list, list[np.ndarray]]:
    """-> (one MinHash per text, its sorted unique 64-bit shingle hashes for the exact check)."""
    sketches, hashed = [], []
    for start in range(0, len(texts), BATCH):
        batch = [shingles(t, size) for t in texts[start:start + BATCH]]
        sketches += RMinHash.from_token_sets(batch, num_perm, MINHASH_SEED)
        hashed += [_sorted_set(h) for h in RMinHash.hash_token_sets(batch)]
    return sketches, hashed


def _sorted_set(values: list[int]) -> np.ndarray:
    """Sorted, repeats dropped: twice as fast as np.unique on these short arrays."""
    a = np.array(values, dtype=np.uint64)
    a.sort()
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted, unique hash arrays."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def find_groups(texts: list[str], cfg: NearDuplicateParams) -> NearDuplicates:
    """Group NFC texts whose shingle sets have Jaccard >= cfg.threshold, transitively."""
    sketches, hashed = _sketch(texts, cfg.shingle_size, cfg.num_perm)
    bands = lsh_bands(cfg.threshold, cfg.num_perm)
    lsh = RMinHashLSH(cfg.threshold, cfg.num_perm, bands)
    lsh.insert_many(sketches)
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs, candidates, checked = [], 0, 0
    for i, sketch in enumerate(sketches):
        for j in sorted(k for k in lsh.query(sketch) if k > i):
            candidates += 1
            a, b = root(i), root(j)
            if a == b:  # already linked through other pairs: the components cannot change
                continue
            checked += 1
            similarity = jaccard(hashed[i], hashed[j])
            if similarity >= cfg.threshold:
                parent[max(a, b)] = min(a, b)  # the root stays the group's first document
                pairs.append((i, j, similarity))
    return NearDuplicates([root(i) for i in range(len(texts))], pairs, candidates, checked, bands)
