"""Label issues for multi-label corpora: the one-vs-rest TF-IDF baseline cross-fitted in the same
grouped folds as the single-label judge, averaged with the model's test probabilities where it
has them, judged by cleanlab's multi-label confident learning (each label of a document checked
against the others, a document flagged when any of its labels looks wrong).

In memory only, as the multi-label baseline stage: past baseline.hashing_from documents it stops
and says so.
"""
from __future__ import annotations

import logging
import time

import numpy as np
from tqdm.auto import tqdm

from textclf.errors import UserError
from textclf.config import BaselineParams
from textclf.data.labelsets import hot, label_sets, labels_of
from textclf.evaluate.baseline_multilabel import fit_sets

log = logging.getLogger(__name__)


def cross_fit_sets(texts: list[str], sets: np.ndarray, labels: list[str], fold: np.ndarray,
                   cfg: BaselineParams, weights: str) -> np.ndarray:
    """-> (N, C) per-label probabilities, each document's from the one-vs-rest baseline fitted on
    the other folds (a label no training document of a fold carries gets 0 there)."""
    if len(texts) >= cfg.hashing_from:
        raise UserError(f"{len(texts)} documents >= baseline.hashing_from={cfg.hashing_from}: multi-label "
                        "label issues fit in memory only, as the multi-label baseline; raise "
                        "baseline.hashing_from if this machine holds the TF-IDF matrix.")
    y = hot(sets, labels)  # (N, C)
    probs = np.zeros(y.shape)
    folds = int(fold.max()) + 1
    for k in tqdm(range(folds), desc="labels folds", unit="fold"):
        started = time.perf_counter()
        train, held = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        model = fit_sets([texts[i] for i in train], y[train], cfg, weights)
        probs[held] = model.predict_proba([texts[i] for i in held])
        log.info("fold %d/%d: %d documents judged by a one-vs-rest baseline fitted on %d in %.1f s", k + 1,
                 folds, len(held), len(train), time.perf_counter() - started)
    return probs


def judge_sets(sets: np.ndarray, probs: np.ndarray, labels: list[str]) -> dict:
    """cleanlab's multi-label filter and scores on the label sets and (N, C) probabilities ->
    what `judge` returns for single-label corpora: quality, flagged, per-label noise rate (the
    share of documents whose given value of that label looks wrong), the estimated share of
    documents with a wrong label, the suggested sets; no overlapping pairs (labels are not
    exclusive, so no pair competes)."""
    from cleanlab.multilabel_classification.filter import find_label_issues, find_multilabel_issues_per_class
    from cleanlab.multilabel_classification.rank import get_label_quality_scores

    index = {label: i for i, label in enumerate(labels)}
    given = [[index[label] for label in labels_of(s)] for s in sets]
    quality = get_label_quality_scores(given, probs)
    # n_jobs=1 everywhere: cleanlab's default forks a pool whose workers inherit the stage's
    # SIGTERM handler; pool.terminate() then printed their Interrupted tracebacks, and a worker
    # killed holding the pool's lock hung the stage (common_multilabel_issues has no n_jobs)
    flagged = find_label_issues(given, probs, filter_by="prune_by_noise_rate", n_jobs=1)
    issues, _, _ = find_multilabel_issues_per_class(given, probs, return_indices_ranked_by="self_confidence",
                                                    n_jobs=1)
    # a label's noise rate: the documents whose given value of it looks wrong (on or off), as
    # common_multilabel_issues' two Issue Probability rows of the label summed
    noise = {c: round(len(found) / len(given), 4) for c, found in zip(labels, issues)}
    return {"quality": quality, "flagged": flagged, "noise": noise,
            "estimated_noise": round(float(flagged.mean()), 4), "overlapping": [],
            "suggested": np.asarray(label_sets(suggest(hot(sets, labels), probs), labels), dtype=object)}


def suggest(given: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """(N, C) given multi-hot, (N, C) probabilities -> (N, C) suggested multi-hot: each label where
    its probability reaches the label's confident threshold (the mean probability the judges
    give the documents that carry it, confident learning's threshold: a fixed 0.5 suggests
    nothing for a rare label, whose probabilities stay low), and at least the label most above
    its threshold."""
    threshold = np.array([probs[given[:, c], c].mean() if given[:, c].any() else 1.0
                          for c in range(given.shape[1])])  # (C,)
    out = probs >= threshold
    out[np.arange(len(probs)), (probs / np.maximum(threshold, 1e-12)).argmax(axis=1)] = True
    return out
