"""The simple thing to beat: TF-IDF (word 1-2-grams, sublinear tf) + a linear classifier with
logistic loss learnt by SGD, one fitting function (`fit_baseline`) for the baseline stage and
every fold of the labels stage.

Up to baseline.hashing_from training documents the features are a TfidfVectorizer's (the
max_features most frequent n-grams), fitted in memory. Past it, the vocabulary and the feature matrix
would not fit (a million documents hold tens of millions of distinct bigrams), so the same
features come from a HashingVectorizer (2^20 columns, no vocabulary), the idf from a sample, and
the same SGDClassifier learns from batches of hashed documents; only the texts are held, as
Arrow strings. On BBC the two agree within 0.5 point over split seeds 0-4 (docs/benchmarks.md).
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.pipeline import make_pipeline
from tqdm.auto import tqdm

from textclf.config import BaselineParams
from textclf.data.weights import class_weights, resolve
from textclf.evaluate.metrics import classification_scores
from textclf.model.linear_text import hashed_features, hasher, save_linear
from textclf.errors import UserError
from textclf.files import open_parquet

log = logging.getLogger(__name__)

HASH_FEATURES = 2 ** 20
IDF_SAMPLE = 50_000  # training documents whose document frequencies give the idf
MIN_SEEN = 20_000  # SGD passes over the training split until it has seen this many documents
SGD_BATCH = 1_000
BATCH = 10_000  # corpus rows read, and test documents scored, at a time
CHECKED = 64  # training texts the saved baseline is checked on against the fitted one


def tfidf(cfg: BaselineParams) -> TfidfVectorizer:
    """The in-memory features: word 1..ngram_max-grams seen in min_df documents, the
    max_features most frequent of them, sublinear tf x idf."""
    return TfidfVectorizer(ngram_range=(1, cfg.ngram_max), sublinear_tf=True, min_df=cfg.min_df,
                           max_features=cfg.max_features or None)


def linear(cfg: BaselineParams, n: int, class_weight=None) -> SGDClassifier:
    """The classifier of every baseline: logistic loss by SGD, the regularisation of a logistic
    regression at C (which minimises C * sum(loss) + |w|^2 / 2; SGD mean(loss) + alpha |w|^2 / 2)
    on n training documents. SGD, not lbfgs: lbfgs holds ten gradients of n-grams x classes
    and took minutes and gigabytes with many classes (docs/benchmarks.md, issue 50)."""
    return SGDClassifier(loss="log_loss", alpha=1 / (cfg.C * n), random_state=cfg.seed, class_weight=class_weight)


def uses_hashing(n_train: int, cfg: BaselineParams) -> bool:
    """Whether a baseline fitted on n_train documents hashes its features and learns by SGD."""
    return n_train >= cfg.hashing_from


def fit_baseline(texts, y: np.ndarray, cfg: BaselineParams, weights: str = "none",
                 hashed: bool | None = None):
    """The baseline's one fit, for the baseline stage and every labels fold -> a model with
    classes_ and predict_proba(list of texts). texts: a list or Arrow strings; y (N,) labels;
    weights: train.class_weights; hashed: decided by the caller for a set of fits (the labels
    stage's folds: one model type in all), else from len(texts) and baseline.hashing_from."""
    started = time.perf_counter()
    weights = resolved(weights, y)  # auto: balanced above an imbalance ratio, as the fine-tune's
    if hashed is None:
        hashed = uses_hashing(len(texts), cfg)
    if hashed:
        import pyarrow as pa

        arrow = texts if isinstance(texts, pa.ChunkedArray) else pa.chunked_array([pa.array(texts, pa.string())])
        model = Hashed(*fit_hashed(arrow, np.asarray(y), cfg, weights))
        what = f"hashed n-grams + SGD (baseline.hashing_from={cfg.hashing_from})"
    else:
        model = make_pipeline(tfidf(cfg), linear(cfg, len(y), "balanced" if weights == "balanced" else None))
        fit_tfidf(model, texts if isinstance(texts, list) else texts.to_pylist(), np.asarray(y), cfg.min_df)
        what = f"TF-IDF ({len(model[0].vocabulary_)} n-grams) + SGD"
    log.info("baseline: %s fitted on %d documents in %.1f s", what, len(y), time.perf_counter() - started)
    return model


def fit_tfidf(model, texts: list[str], y: np.ndarray, min_df: int) -> None:
    """model.fit, with scikit-learn's refusals of a baseline.min_df that a small corpus (or a
    labels fold) leaves no n-gram for said in one line instead of a traceback."""
    fix = "lower baseline.min_df (1 keeps every n-gram), or give the corpus more documents"
    if min_df > len(texts):
        raise UserError(f"baseline.min_df={min_df} keeps n-grams found in at least {min_df} documents, and the "
                        f"baseline is fitted on {len(texts)}: {fix}.")
    try:
        model.fit(texts, y)
    except ValueError as err:
        if "no terms remain" not in str(err):
            raise
        raise UserError(f"baseline.min_df={min_df}: no n-gram is in {min_df} of the {len(texts)} documents "
                        f"the baseline is fitted on: {fix}.") from None


def predict(model, texts) -> np.ndarray:
    """(N, C) probabilities in model.classes_ order, BATCH texts at a time (list or Arrow strings)."""
    if len(texts) == 0:
        return np.zeros((0, len(model.classes_)))
    batch = (lambda i: texts[i:i + BATCH]) if isinstance(texts, list) else lambda i: texts.slice(i, BATCH).to_pylist()
    return np.concatenate([model.predict_proba(batch(i)) for i in range(0, len(texts), BATCH)])


def fit_and_predict(train_texts: list[str], train_y: list[str], test_texts: list[str],
                    cfg: BaselineParams, weights: str = "none") -> tuple[list[str], np.ndarray]:
    """-> (classes, test probabilities (N, C) in that class order). weights: train.class_weights
    (scikit-learn's "balanced" is textclf.data.weights' rule)."""
    model = fit_baseline(train_texts, np.asarray(train_y), cfg, weights)
    return [str(c) for c in model.classes_], predict(model, test_texts)


class HashedTfidf:
    """Sublinear tf x idf, L2-normalised, over hashed word n-grams (model.linear_text's
    features); min_df does not apply (there is no vocabulary to prune)."""

    def __init__(self, cfg: BaselineParams, sample: list[list[str]]):
        """sample: batches of texts whose document frequencies give the idf, hashed a batch at
        a time (50 000 documents hashed at once would take a gigabyte)."""
        self.hasher = hasher(cfg.ngram_max, HASH_FEATURES)
        df = np.zeros(HASH_FEATURES, np.int64)
        for texts in sample:
            df += np.bincount(self.hasher.transform(texts).indices, minlength=HASH_FEATURES)
        self.idf = (np.log((1 + sum(map(len, sample))) / (1 + df)) + 1).astype(np.float32)

    def __call__(self, texts: list[str]):
        return hashed_features(self.hasher, self.idf, texts)


class Hashed:
    """The hashed features and the SGD model that reads them, as one predictor."""

    def __init__(self, features: HashedTfidf, model: SGDClassifier):
        self.features, self.model, self.classes_ = features, model, model.classes_

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return self.model.predict_proba(self.features(texts))


class Rows:
    """Texts held as a ChunkedArray, fetched by row number. ChunkedArray.take gathers across
    chunks by first joining them all (a copy of every text per call: 1.6 GB per batch of 1 000
    at a million documents); this takes from each chunk it needs."""

    def __init__(self, texts):
        self.texts = texts
        self.starts = np.cumsum([0] + [len(c) for c in texts.chunks])  # (chunks + 1,)

    def __len__(self) -> int:
        return len(self.texts)

    def __call__(self, rows: np.ndarray) -> list[str]:
        import pyarrow as pa

        chunk = np.searchsorted(self.starts, rows, side="right") - 1
        out: list = [None] * len(rows)
        for c in np.unique(chunk).tolist():
            at = np.flatnonzero(chunk == c)
            picked = self.texts.chunk(c).take(pa.array(rows[at] - self.starts[c])).to_pylist()
            for k, text in zip(at.tolist(), picked):
                out[k] = text
        return out


def fit_hashed(train_texts, train_y: np.ndarray, cfg: BaselineParams,
               weights: str = "none") -> tuple[HashedTfidf, SGDClassifier]:
    """train_texts: Arrow strings (a ChunkedArray), labels (N,); weights: train.class_weights."""
    weights = resolved(weights, train_y)
    rng = np.random.default_rng(cfg.seed)
    texts = Rows(train_texts)
    n = len(texts)
    sample = rng.permutation(n)[:IDF_SAMPLE]
    features = HashedTfidf(cfg, [texts(sample[i:i + SGD_BATCH]) for i in range(0, len(sample), SGD_BATCH)])
    classes, codes = np.unique(train_y, return_inverse=True)
    # partial_fit refuses class_weight="balanced" (it sees one batch): the same weights, as a dict
    balanced = class_weights(codes, len(classes), weights)
    model = linear(cfg, n, None if balanced is None else dict(zip(classes, balanced.tolist())))
    passes = math.ceil(MIN_SEEN / n)
    with tqdm(total=passes * n, desc="baseline SGD", unit="doc", unit_scale=True, mininterval=5) as bar:
        for _ in range(passes):
            order = rng.permutation(n)
            for start in range(0, n, SGD_BATCH):
                rows = order[start:start + SGD_BATCH]
                model.partial_fit(features(texts(rows)), train_y[rows], classes=classes)
                bar.update(len(rows))
    return features, model


def resolved(weights: str, train_y) -> str:
    """train.class_weights on these training labels: auto said and resolved as the fine-tune's."""
    used = resolve(weights, train_y)
    if weights == "auto":
        log.info("train.class_weights: auto is %s on these %d training documents", used, len(train_y))
    return used


def read_split(corpus: str, splits: pd.DataFrame, name: str):
    """The corpus rows in split `name`, in corpus order, one record batch at a time ->
    (doc ids, labels, texts as Arrow strings): no Python str per text."""
    import pyarrow as pa

    wanted = set(splits.loc[splits["split"] == name, "doc_id"])
    parts = []
    for batch in open_parquet(corpus).iter_batches(batch_size=BATCH, columns=["doc_id", "label", "text"]):
        keep = [d in wanted for d in batch.column("doc_id").to_pylist()]
        parts.append(batch.filter(pa.array(keep)))
    table = pa.Table.from_batches(parts)
    if len(table) != len(wanted):
        raise UserError(f"{len(wanted) - len(table)} {name} document(s) of the split are not in "
                        f"{corpus}: the split was made from another corpus; rerun `dvc repro split`.")
    return (table.column("doc_id").to_numpy(), table.column("label").to_numpy(),
            table.column("text"))


def predict_test(corpus: str, splits: pd.DataFrame, cfg: BaselineParams,
                 weights: str = "none", model_dir: str | None = None) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """-> (test doc ids, their labels, classes, test probabilities (N, C)); the fitted model
    saved to model_dir where given (model.linear_text: what a blended export serves)."""
    _, train_y, train_texts = read_split(corpus, splits, "train")
    model = fit_baseline(train_texts, train_y, cfg, weights)
    if model_dir:
        save_linear(model, model_dir, train_texts.slice(0, CHECKED).to_pylist())
    del train_texts  # the test texts are read only now: never both splits' texts at once
    test_ids, test_y, test_texts = read_split(corpus, splits, "test")
    return test_ids, test_y, [str(c) for c in model.classes_], predict(model, test_texts)


def fit_and_score(train_texts: list[str], train_y: list[str], test_texts: list[str],
                  test_y: list[str], cfg: BaselineParams) -> dict[str, float]:
    """Test accuracy and macro-F1 alone (benchmarks/scale/ingest_scale.py)."""
    classes, probs = fit_and_predict(train_texts, train_y, test_texts, cfg)
    return classification_scores(test_y, [classes[i] for i in probs.argmax(axis=1)])
