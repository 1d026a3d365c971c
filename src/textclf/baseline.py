"""The simple thing to beat: TF-IDF (word 1-2-grams, sublinear tf) + a linear classifier."""
from __future__ import annotations

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

from textclf.config import BaselineParams
from textclf.evaluation import classification_scores


def fit_and_score(train_texts: list[str], train_y: list[str], test_texts: list[str],
                  test_y: list[str], cfg: BaselineParams) -> dict[str, float]:
    model = make_pipeline(
        TfidfVectorizer(ngram_range=(1, cfg.ngram_max), sublinear_tf=True, min_df=cfg.min_df),
        LogisticRegression(C=cfg.C, max_iter=2000, random_state=cfg.seed))
    model.fit(train_texts, train_y)
    return classification_scores(test_y, model.predict(test_texts))
