"""The baseline as a file, without pickle (issue 59: the blend serves it beside the fine-tune):
the TF-IDF n-gram vocabulary (or the hashed features' size), the idf and the linear model's
weights, written by the baseline stage and read by every predictor of a blended export.

`baseline.json` holds the kind, n-gram range, classes and vocabulary (terms in column order);
`baseline.safetensors` the idf, coef (C, F) and intercept (C,). Loaded, the features come from
scikit-learn's own vectorizers (a TfidfVectorizer given that vocabulary and idf, or the
HashingVectorizer): the same numbers as the fitted pipeline, which `save_linear` checks on a
few texts before it writes. The probabilities are SGDClassifier's for logistic loss:
one-vs-rest sigmoids, normalised to sum to 1 (two classes: one sigmoid)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file
from scipy.special import expit
from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer
from sklearn.preprocessing import normalize

from textclf.errors import UserError
from textclf.model.exported import BASELINE_FILES

LINEAR_JSON, LINEAR_WEIGHTS = BASELINE_FILES
SAME = 1e-6  # the largest probability difference a saved baseline may show against its fitted self


def hashed_features(hasher: HashingVectorizer, idf: np.ndarray, texts: list[str]):
    """Sublinear tf x idf, L2-normalised, over hashed word n-grams (as TfidfVectorizer with
    sublinear_tf and smooth idf) -> (N, F) sparse."""
    x = hasher.transform(texts)  # (N, F) sparse counts
    x.data = 1 + np.log(x.data)
    return normalize(x.multiply(idf).tocsr())


def hasher(ngram_max: int, n_features: int) -> HashingVectorizer:
    return HashingVectorizer(ngram_range=(1, ngram_max), n_features=n_features, alternate_sign=False,
                             norm=None, dtype=np.float32)


class LinearText:
    """A saved baseline: texts -> (N, C) probabilities in `classes` order."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        try:
            meta = json.loads((folder / LINEAR_JSON).read_text())
            weights = load_file(str(folder / LINEAR_WEIGHTS))
        except (OSError, ValueError) as err:
            raise UserError(f"{folder} holds no readable baseline ({err}): rerun `dvc repro baseline export`.") from None
        self.classes = [str(c) for c in meta["classes"]]
        self.coef, self.intercept, idf = weights["coef"], weights["intercept"], weights["idf"]
        if meta["kind"] == "hashed":
            vectorizer = hasher(meta["ngram_max"], meta["n_features"])
            self.features = lambda texts: hashed_features(vectorizer, idf, texts)
        else:
            tfidf = TfidfVectorizer(ngram_range=(1, meta["ngram_max"]), sublinear_tf=True,
                                    vocabulary=meta["vocabulary"])
            tfidf.idf_ = idf
            self.features = tfidf.transform

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        decision = np.asarray(self.features(list(texts)) @ self.coef.T) + self.intercept  # (N, C or 1)
        p = expit(decision)
        if p.shape[1] == 1:  # two classes: the second's sigmoid
            return np.hstack([1 - p, p])
        return p / p.sum(axis=1, keepdims=True)


def save_linear(model, folder: str | Path, check_texts: list[str]) -> None:
    """The fitted baseline (evaluate.baseline's pipeline, or its Hashed model) -> folder's
    baseline.json and baseline.safetensors, then read back and checked on `check_texts`
    against the fitted model: a file that answers otherwise is never written as the model."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "features"):  # Hashed: HashedTfidf + SGDClassifier
        sgd, h = model.model, model.features.hasher
        meta = {"kind": "hashed", "ngram_max": h.ngram_range[1], "n_features": h.n_features}
        idf = model.features.idf
    else:  # Pipeline(TfidfVectorizer, SGDClassifier)
        tfidf, sgd = model[0], model[-1]
        vocabulary = sorted(tfidf.vocabulary_, key=tfidf.vocabulary_.get)
        meta = {"kind": "tfidf", "ngram_max": tfidf.ngram_range[1], "vocabulary": vocabulary}
        idf = tfidf.idf_
    meta["classes"] = [str(c) for c in sgd.classes_]
    save_file({"idf": np.asarray(idf), "coef": np.asarray(sgd.coef_, np.float64),
               "intercept": np.asarray(sgd.intercept_, np.float64)}, str(folder / LINEAR_WEIGHTS))
    (folder / LINEAR_JSON).write_text(json.dumps(meta))
    if check_texts:
        gap = np.abs(LinearText(folder).predict_proba(check_texts) - model.predict_proba(check_texts)).max()
        if gap > SAME:
            raise RuntimeError(f"the saved baseline answers {gap:.3g} away from the fitted one")
