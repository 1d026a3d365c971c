"""The simple thing to beat: TF-IDF (word 1-2-grams, sublinear tf) + a linear classifier.

Up to baseline.hashing_from training documents: a TfidfVectorizer and a logistic
regression, fitted in memory. Past it, the vocabulary and the feature matrix would not fit
(a million documents hold tens of millions of distinct bigrams), so the same features come
from a HashingVectorizer (2^20 columns, no vocabulary), the idf from a sample, and an
SGDClassifier (logistic loss, the same regularisation) learns from batches of hashed
documents; only the texts are held, as Arrow strings. On BBC the two agree within
0.5 point over split seeds 0-4 (docs/benchmarks.md).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import normalize

from textclf.config import BaselineParams, load_params
from textclf.data.labelsets import is_multilabel
from textclf.data.weights import class_weights, resolve
from textclf.evaluate.baseline_multilabel import fit_multilabel, multilabel_predictions
from textclf.evaluate.metrics import classification_scores
from textclf.inference.frames import PROB_PREFIX
from textclf.common import UserError, open_parquet, write_json, write_parquet

log = logging.getLogger(__name__)

HASH_FEATURES = 2 ** 20
IDF_SAMPLE = 50_000  # training documents whose document frequencies give the idf
MIN_SEEN = 20_000  # SGD passes over the training split until it has seen this many documents
SGD_BATCH = 1_000
BATCH = 10_000  # corpus rows read, and test documents scored, at a time


def fit_and_predict(train_texts: list[str], train_y: list[str], test_texts: list[str],
                    cfg: BaselineParams, weights: str = "none") -> tuple[list[str], np.ndarray]:
    """-> (classes, test probabilities (N, C) in that class order). weights: train.class_weights
    (scikit-learn's "balanced" is textclf.data.weights' rule; auto resolved on train_y)."""
    weights = resolved(weights, train_y)
    model = make_pipeline(
        TfidfVectorizer(ngram_range=(1, cfg.ngram_max), sublinear_tf=True, min_df=cfg.min_df),
        LogisticRegression(C=cfg.C, max_iter=2000, random_state=cfg.seed,
                           class_weight="balanced" if weights == "balanced" else None))
    model.fit(train_texts, train_y)
    return [str(c) for c in model.classes_], model.predict_proba(test_texts)


class HashedTfidf:
    """Sublinear tf x idf, L2-normalised, over hashed word n-grams (as TfidfVectorizer with
    sublinear_tf, smooth idf); min_df does not apply (there is no vocabulary to prune)."""

    def __init__(self, cfg: BaselineParams, sample: list[list[str]]):
        """sample: batches of texts whose document frequencies give the idf, hashed a batch at
        a time (50 000 documents hashed at once would take a gigabyte)."""
        self.hasher = HashingVectorizer(ngram_range=(1, cfg.ngram_max), n_features=HASH_FEATURES,
                                        alternate_sign=False, norm=None, dtype=np.float32)
        df = np.zeros(HASH_FEATURES, np.int64)
        for texts in sample:
            df += np.bincount(self.hasher.transform(texts).indices, minlength=HASH_FEATURES)
        self.idf = (np.log((1 + sum(map(len, sample))) / (1 + df)) + 1).astype(np.float32)

    def __call__(self, texts: list[str]):
        x = self.hasher.transform(texts)  # (N, HASH_FEATURES) sparse counts
        x.data = 1 + np.log(x.data)
        return normalize(x.multiply(self.idf).tocsr())


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
    # LogisticRegression minimises C * sum(loss) + |w|^2 / 2; SGD mean(loss) + alpha |w|^2 / 2
    model = SGDClassifier(loss="log_loss", alpha=1 / (cfg.C * n), random_state=cfg.seed,
                          class_weight=None if balanced is None else dict(zip(classes, balanced.tolist())))
    for _ in range(math.ceil(MIN_SEEN / n)):
        order = rng.permutation(n)
        for start in range(0, n, SGD_BATCH):
            rows = order[start:start + SGD_BATCH]
            model.partial_fit(features(texts(rows)), train_y[rows], classes=classes)
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
                 weights: str = "none") -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """-> (test doc ids, their labels, classes, test probabilities (N, C))."""
    _, train_y, train_texts = read_split(corpus, splits, "train")
    if len(train_y) < cfg.hashing_from:
        test_ids, test_y, test_texts = read_split(corpus, splits, "test")
        classes, probs = fit_and_predict(train_texts.to_pylist(), train_y.tolist(),
                                         test_texts.to_pylist(), cfg, weights)
        return test_ids, test_y, classes, probs
    log.info("%d training documents >= baseline.hashing_from=%d: hashed n-grams + SGD",
             len(train_y), cfg.hashing_from)
    features, model = fit_hashed(train_texts, train_y, cfg, weights)
    del train_texts  # the test texts are read only now: never both splits' texts at once
    test_ids, test_y, test_texts = read_split(corpus, splits, "test")
    probs = np.concatenate([model.predict_proba(features(test_texts.slice(i, BATCH).to_pylist()))
                            for i in range(0, len(test_y), BATCH)])
    return test_ids, test_y, [str(c) for c in model.classes_], probs


def fit_and_score(train_texts: list[str], train_y: list[str], test_texts: list[str],
                  test_y: list[str], cfg: BaselineParams) -> dict[str, float]:
    """Test accuracy and macro-F1 alone (benchmarks/ingest_scale.py)."""
    classes, probs = fit_and_predict(train_texts, train_y, test_texts, cfg)
    return classification_scores(test_y, [classes[i] for i in probs.argmax(axis=1)])


@dataclass(frozen=True)
class BaselinePaths:
    """What the baseline stage reads and writes, as its command line names them."""
    params: str
    corpus: str
    splits: str
    out: str  # written: the baseline's test scores (JSON)
    predictions: str  # written: per test document, label, prediction, probabilities (parquet)


def run_baseline(paths: BaselinePaths) -> None:
    """The baseline stage: fit on the train split, score the test split. Its classes are
    weighted as the fine-tune's (train.class_weights), so the two compare like for like."""
    params = load_params(paths.params)
    cfg, weights = params.baseline, params.train.class_weights
    splits = pd.read_parquet(paths.splits, columns=["doc_id", "split"])
    if is_multilabel(open_parquet(paths.corpus).schema_arrow.metadata):
        return run_multilabel(paths, cfg, weights, splits)
    doc_ids, labels, classes, probs = predict_test(paths.corpus, splits, cfg, weights)  # probs: (N, C)
    predictions = pd.DataFrame({"doc_id": doc_ids, "label": labels,
                                "predicted": np.asarray(classes, dtype=object)[probs.argmax(axis=1)]})
    for i, c in enumerate(classes):
        predictions[PROB_PREFIX + c] = probs[:, i]
    scores = classification_scores(predictions["label"], predictions["predicted"])
    write_json(paths.out, {**scores, "class_weights": weights})
    write_parquet(predictions, paths.predictions)
    logging.getLogger("baseline").info("baseline test accuracy %.4f, macro-F1 %.4f", scores["accuracy"],
                                       scores["macro_f1"])


def run_multilabel(paths: BaselinePaths, cfg: BaselineParams, weights: str, splits: pd.DataFrame) -> None:
    """The baseline stage on a multi-label corpus: one-vs-rest, thresholds tuned on validation."""
    read = {name: read_split(paths.corpus, splits, name) for name in ("train", "validation", "test")}
    labels, thresholds, probs = fit_multilabel({k: v[2].to_pylist() for k, v in read.items()},
                                               {k: v[1] for k, v in read.items()}, cfg, weights)
    predictions, scores = multilabel_predictions(read["test"][0], read["test"][1], labels, probs, thresholds)
    write_json(paths.out, {**scores, "class_weights": weights})
    write_parquet(predictions, paths.predictions)
