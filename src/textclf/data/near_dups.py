"""Near-duplicate groups: word shingles -> MinHash LSH candidates -> exact Jaccard ->
connected components.

Shingles are hashed in bulk, never built as strings: pyarrow splits a batch of texts into
words, each distinct word gets rensa's 64-bit hash, and a shingle's hash mixes its words'
hashes in numpy. rensa turns the flat shingle hashes into a MinHash matrix (one row per
text, num_perm uint32), and LSH bands are equal row slices, found by sorting each band
(numpy), so no Python object is made per document or per shingle. 1 000 000 documents
sketch at a few thousand a second and their matrix takes 4 x num_perm bytes each
(docs/benchmarks.md). LSH only proposes pairs. Each proposed pair is checked by the exact
Jaccard of its two shingle-hash sets, so a band collision never merges two documents. (Two
of a pair's few hundred shingles sharing a 64-bit hash has odds of about 1e-14, and would
move that Jaccard by one shingle.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rensa import RMinHash

from textclf.config import NearDuplicateParams

# Fixed, not a param: the seed only changes which pairs LSH proposes, and with the banding
# below a pair at the threshold is missed with probability <= MAX_MISS whatever the seed.
MINHASH_SEED = 20240917
MAX_MISS = 1e-3
BATCH = 2_000  # texts shingled at a time: their word arrays are the transient memory peak
SKETCH_MISS = 1e-6  # a pair at the threshold dropped by its MinHash agreement (min_agreement)
PAIR_CHUNK = 65_536  # candidate pairs compared slot by slot at a time
MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant (golden ratio): h * MIX + word

TextsAt = Callable[[np.ndarray], Iterator[tuple[int, str]]]  # indices -> (i, text) of each, any order


@dataclass(frozen=True)
class NearDuplicates:
    group_of: list[int]  # per document: the index of its group's first document
    pairs: list[tuple[int, int, float]]  # (i, j, Jaccard) of each link that joined two groups
    candidates: int  # pairs proposed by LSH whose MinHash rows agree enough to check
    checked: int  # pairs whose exact Jaccard was computed (the rest were already joined)
    bands: int


def shingles(text: str, size: int) -> list[str]:
    """Word `size`-grams of an NFC text, whitespace collapsed (ingest's normalised form);
    a text of at most `size` words is one shingle. The reference the hashed shingles of
    shingle_hashes stand for (tests compare the two)."""
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


def _finish(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves about half the output bits."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def shingle_hashes(texts: list[str], size: int) -> tuple[np.ndarray, np.ndarray]:
    """-> (the 64-bit hash of every shingle of every text, flat (S,) uint64; offsets (N + 1,)
    uint64: text i's are [offsets[i], offsets[i + 1])). Texts must hold at least one word."""
    words = pc.utf8_split_whitespace(pa.array(texts, pa.string()))
    starts = words.offsets.to_numpy().astype(np.int64)  # (N + 1,) into the flat words
    encoded = pc.dictionary_encode(words.flatten())
    distinct = np.array(RMinHash.hash_token_sets([encoded.dictionary.to_pylist()])[0], dtype=np.uint64)
    w = distinct[encoded.indices.to_numpy()]  # (W,) one hash per word
    n = np.diff(starts)  # words per text
    count = np.maximum(n - size + 1, 1)  # shingles per text
    offsets = np.concatenate([[0], np.cumsum(count)])
    padded = np.concatenate([w, np.zeros(size, np.uint64)])
    full = np.zeros(len(w), np.uint64)  # the shingle starting at each word
    short = np.zeros(len(n), np.uint64)  # a text of <= size words: all its words
    for k in range(size):
        full = full * MIX + padded[k:k + len(w)]
        short = np.where(k < n, short * MIX + padded[np.minimum(starts[:-1] + k, len(w))], short)
    text_of = np.repeat(np.arange(len(n)), count)
    position = starts[:-1][text_of] + np.arange(offsets[-1]) - offsets[:-1][text_of]
    hashes = np.where((n <= size)[text_of], short[text_of], full[np.minimum(position, len(w) - 1)])
    return _finish(hashes), offsets.astype(np.uint64)


def sketch_and_keys(texts: list[str], size: int, num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """-> ((N, num_perm) uint32: each text's MinHash of its shingle hashes; (N,) uint64: each
    text's smallest shingle hash). The smallest hash is one more MinHash slot, 64 bits wide:
    near-duplicates share it with probability about their Jaccard, which is what lets the
    stable split key a group by the smallest over its members (data.splitting)."""
    rows, keys = [], []
    for start in range(0, len(texts), BATCH):
        hashes, offsets = shingle_hashes(texts[start:start + BATCH], size)
        keys.append(np.minimum.reduceat(hashes, offsets[:-1].astype(np.int64)))  # >= 1 shingle each
        matrix = RMinHash.digest_matrix_from_flat_token_hashes(hashes, offsets, num_perm, MINHASH_SEED)
        rows.append(np.array(matrix.to_rows(), dtype=np.uint32).reshape(-1, num_perm))
    if not rows:
        return np.zeros((0, num_perm), np.uint32), np.zeros(0, np.uint64)
    return np.concatenate(rows), np.concatenate(keys)


def sketch(texts: list[str], size: int, num_perm: int) -> np.ndarray:
    """(N, num_perm) uint32: each text's MinHash of its shingle hashes."""
    return sketch_and_keys(texts, size, num_perm)[0]


def min_agreement(threshold: float, num_perm: int) -> int:
    """The fewest equal MinHash slots a candidate needs to be checked: a pair at exactly
    `threshold` agrees on Binomial(num_perm, threshold) slots, and has fewer than this with
    probability <= SKETCH_MISS (next to LSH's MAX_MISS, nothing)."""
    below = 0.0
    for k in range(num_perm + 1):
        below += math.comb(num_perm, k) * threshold ** k * (1 - threshold) ** (num_perm - k)
        if below > SKETCH_MISS:
            return k
    return num_perm


def _agreeing(digests: np.ndarray, i: np.ndarray, j: np.ndarray, least: int) -> np.ndarray:
    """Mask of the pairs (i, j) whose MinHash rows agree on >= `least` slots."""
    keep = np.zeros(len(i), bool)
    for lo in range(0, len(i), PAIR_CHUNK):  # (PAIR_CHUNK, num_perm) at a time
        at = slice(lo, lo + PAIR_CHUNK)
        keep[at] = (digests[i[at]] == digests[j[at]]).sum(axis=1) >= least
    return keep


def candidate_pairs(digests: np.ndarray, bands: int, least: int = 0) -> np.ndarray:
    """(M, 2) int64, i < j, sorted and unique: the pairs of rows equal on some band (band b
    is columns [b * r, (b + 1) * r), r = num_perm / bands) and on >= `least` slots in all.
    The agreement filter runs per band, so pairs that share a band by chance (documents that
    share a few sentences: millions of them in a million documents) are never all held."""
    rows = digests.shape[1] // bands
    found = [np.zeros(0, np.int64)]
    n = np.int64(len(digests))
    for b in range(bands):
        cols = digests[:, b * rows:(b + 1) * rows]
        order = np.lexsort(cols.T[::-1])
        same = (cols[order[1:]] == cols[order[:-1]]).all(axis=1)  # (N - 1,) equal to the previous
        run = np.concatenate([[0], np.cumsum(~same)])  # run id per sorted position
        size = np.bincount(run)  # documents per run
        members = np.flatnonzero(size[run] > 1)  # sorted positions in runs of 2+
        for d in range(1, int(size.max())):  # pairs d apart in one run
            members = members[size[run[members]] > d]  # runs too short for d drop out
            a, c = members[:-d], members[d:]
            hit = run[a] == run[c]
            i, j = np.minimum(order[a[hit]], order[c[hit]]), np.maximum(order[a[hit]], order[c[hit]])
            ok = _agreeing(digests, i, j, least)
            found.append(np.unique(i[ok] * n + j[ok]))
    keys = np.unique(np.concatenate(found))
    return np.stack([keys // n, keys % n], axis=1)


def _hash_sets(texts_at: TextsAt, indices: np.ndarray, size: int) -> dict[int, np.ndarray]:
    """Sorted unique shingle hashes of the texts at `indices`, for the exact Jaccard."""
    sets: dict[int, np.ndarray] = {}
    pending: list[tuple[int, str]] = []

    def flush() -> None:
        hashes, offsets = shingle_hashes([t for _, t in pending], size)
        for (i, _), lo, hi in zip(pending, offsets[:-1], offsets[1:]):
            sets[i] = np.unique(hashes[lo:hi])
        pending.clear()
    for item in texts_at(indices):
        pending.append(item)
        if len(pending) == BATCH:
            flush()
    if pending:
        flush()
    return sets


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted, unique hash arrays."""
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def group_sketched(digests: np.ndarray, texts_at: TextsAt, params: NearDuplicateParams) -> NearDuplicates:
    """Group the texts behind `digests` (row i: text i, read back by texts_at for the exact
    check) whose shingle sets have Jaccard >= params.threshold, transitively."""
    bands = lsh_bands(params.threshold, params.num_perm)
    pairs = candidate_pairs(digests, bands, min_agreement(params.threshold, params.num_perm))
    sets = _hash_sets(texts_at, np.unique(pairs), params.shingle_size)
    parent = list(range(len(digests)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    links, checked = [], 0
    for i, j in pairs.tolist():
        a, b = root(i), root(j)
        if a == b:  # already linked through other pairs: the components cannot change
            continue
        checked += 1
        similarity = jaccard(sets[i], sets[j])
        if similarity >= params.threshold:
            parent[max(a, b)] = min(a, b)  # the root stays the group's first document
            links.append((i, j, similarity))
    return NearDuplicates([root(i) for i in range(len(digests))], links, len(pairs), checked, bands)


def find_groups(texts: list[str], params: NearDuplicateParams) -> NearDuplicates:
    """Group NFC texts (in memory) whose shingle sets have Jaccard >= params.threshold."""
    def texts_at(indices: Iterable[int]) -> Iterator[tuple[int, str]]:
        return ((int(i), texts[i]) for i in indices)
    return group_sketched(sketch(texts, params.shingle_size, params.num_perm), texts_at, params)
