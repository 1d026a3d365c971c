"""The simple thing to beat: TF-IDF (word 1-2-grams, sublinear tf) + a linear classifier."""
from __future__ import annotations

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from textclf.config import BaselineParams
from textclf.evaluate.metrics import classification_scores


def fit_and_predict(train_texts: list[str], train_y: list[str], test_texts: list[str],
                    cfg: BaselineParams) -> tuple[list[str], np.ndarray]:
    """-> (classes, test probabilities (N, C) in that class order)."""
    model = make_pipeline(
        TfidfVectorizer(ngram_range=(1, cfg.ngram_max), sublinear_tf=True, min_df=cfg.min_df),
        LogisticRegression(C=cfg.C, max_iter=2000, random_state=cfg.seed))
    model.fit(train_texts, train_y)
    return [str(c) for c in model.classes_], model.predict_proba(test_texts)


def fit_and_score(train_texts: list[str], train_y: list[str], test_texts: list[str],
                  test_y: list[str], cfg: BaselineParams) -> dict[str, float]:
    """Test accuracy and macro-F1 alone (benchmarks/ingest_scale.py)."""
    classes, probs = fit_and_predict(train_texts, train_y, test_texts, cfg)
    return classification_scores(test_y, [classes[i] for i in probs.argmax(axis=1)])
