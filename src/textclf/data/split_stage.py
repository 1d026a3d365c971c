"""The split stage: a corpus split by split.method and its task (a single-label corpus by
textclf.data.splitting, a multi-label one by textclf.data.multilabel_split, which builds on
it), written with its class counts."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pandas as pd
import pyarrow.parquet as pq

from textclf.config import load_params
from textclf.coverage import too_few_at_split
from textclf.data.labelsets import MULTILABEL, is_multilabel
from textclf.data.multilabel_split import split_multilabel
from textclf.data.splitting import SPLITS, class_counts, stable_split, stratified_split
from textclf.files import write_json, write_parquet


def split_corpus(corpus: pd.DataFrame, fractions: dict[str, float], seed: int,
                 method: str, multilabel: bool = False) -> tuple[pd.DataFrame, list[dict]]:
    """The split stage's work, by split.method and the corpus's task -> (assignment, repair moves)."""
    if multilabel:
        return split_multilabel(corpus, fractions, seed, method)
    if method == "stratified_shuffle":
        return stratified_split(corpus, fractions, seed), []
    return stable_split(corpus, fractions, seed)


@dataclass(frozen=True)
class SplitPaths:
    """What the split stage reads and writes, as its command line names them."""
    params: str
    corpus: str
    splits: str  # written: doc_id -> split (parquet)
    counts: str  # written: class (label) counts per split, the method and its repair moves (JSON)


def run_split(paths: SplitPaths) -> None:
    """The split stage: the corpus's assignment and its class counts."""
    params = load_params(paths.params)
    cfg = params.split
    columns = ["doc_id", "label", "content_hash", "group", "source_path"]  # the path names it in diffs
    if cfg.method == "stable":
        columns.append("split_key")
    multilabel = is_multilabel(pq.read_schema(paths.corpus).metadata)
    corpus = pd.read_parquet(paths.corpus, columns=columns)
    assignment, repairs = split_corpus(corpus, cfg.fractions, cfg.seed, cfg.method, multilabel)
    write_parquet(assignment, paths.splits)
    counts = class_counts(assignment, multilabel)
    sizes = {s: int((assignment["split"] == s).sum()) for s in SPLITS}
    # Multi-label: per-label counts add up to more than the documents, so these are said apart;
    # a single-label file keeps its keys (byte for byte what it was).
    task = {"task": MULTILABEL, "documents": sizes} if multilabel else {}
    write_json(paths.counts, {**counts, **task, "method": cfg.method, "repairs": repairs})
    logging.getLogger("split").info(
        "split (%s) sizes: %s; %d near-duplicate groups, none in two splits; %d group(s) moved so "
        "that every %s is in every split", cfg.method, sizes,
        int((assignment["group"].value_counts() > 1).sum()), len(repairs), "label" if multilabel else "class")
    if not multilabel and params.train.calibration != "none":  # the sets need validation documents: said before training
        line = too_few_at_split(sizes["validation"], len(assignment), params.serve.coverage, cfg.fractions["validation"])
        if line:
            logging.getLogger("split").warning("%s", line)
