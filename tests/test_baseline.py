import pytest

from textclf.config import BaselineParams
from textclf.corpus import build_corpus
from textclf.splitting import stratified_split
from textclf.baseline import fit_and_score

from conftest import BBC


@pytest.mark.skipif(not BBC.is_dir(), reason=f"BBC corpus not found at {BBC}")
def test_tfidf_baseline_on_bbc_is_strong():
    """The bar a fine-tune must clear: TF-IDF + logistic regression on real BBC text."""
    corpus, _ = build_corpus(BBC, 1_000_000, 5)
    split = stratified_split(corpus, {"train": 0.7, "validation": 0.15, "test": 0.15}, seed=42)
    frame = corpus.merge(split[["doc_id", "split"]], on="doc_id")
    train, test = frame[frame["split"] == "train"], frame[frame["split"] == "test"]
    scores = fit_and_score(train["text"].tolist(), train["label"].tolist(),
                           test["text"].tolist(), test["label"].tolist(), BaselineParams())
    assert scores["accuracy"] > 0.95 and scores["macro_f1"] > 0.95
