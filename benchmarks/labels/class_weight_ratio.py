"""Where train.class_weights balanced starts to pay (issue 50): the imbalance ratio from which
`auto` turns it on (textclf.data.weights.AUTO_RATIO).

    .venv/bin/python benchmarks/labels/class_weight_ratio.py --seeds 0 1 2 3 4

BBC with `tech` and `entertainment` cut to their first n documents (file-name order, as
benchmarks/labels/imbalance.py cuts them), n chosen so that the largest class is r times the cut ones,
for each --ratios r (1 = BBC as it is, 1.3 to 1). Per ratio and seed, a stratified 70/30 split,
and issue 50's TF-IDF baseline (word 1-2-grams in 2 documents or more, sublinear tf, logistic
loss by SGD at alpha 1 / (C n), C 10: what the baseline stage fits from issue 50 on; lbfgs,
before it, took 85 s a fit here) with class weights none and balanced (scikit-learn's rule,
textclf.data.weights'): test accuracy, macro-F1 and the two cut classes' recall,
the means over the seeds, and balanced minus none. The fine-tune's own figures at ratios 25
(this corpus), 50 and 125 (benchmarks/recipes/many_class.py) are in docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import table  # noqa: E402  (first: this checkout's textclf)
from corpora import RARE, bbc_classes  # noqa: E402

log = logging.getLogger("class-weight-ratio")
C = 10.0  # baseline.C


def corpus(ratio: float) -> tuple[list[str], list[str]]:
    """BBC's texts and labels, RARE classes cut to the largest class's size over `ratio`."""
    folders = bbc_classes()
    keep = round(max(len(f) for f in folders.values()) / ratio)
    texts, labels = [], []
    for label, files in folders.items():
        for f in files[:keep] if label in RARE else files:
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
            labels.append(label)
    return texts, labels


def measure(ratio: float, seed: int) -> dict[str, dict]:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import SGDClassifier
    from sklearn.metrics import f1_score, recall_score
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline

    texts, labels = corpus(ratio)
    x_train, x_test, y_train, y_test = train_test_split(texts, labels, test_size=0.3, stratify=labels,
                                                        random_state=seed)
    out = {}
    for weights in ("none", "balanced"):
        start = time.perf_counter()
        model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
                              SGDClassifier(loss="log_loss", alpha=1 / (C * len(y_train)), random_state=seed,
                                            class_weight=None if weights == "none" else weights))
        predicted = model.fit(x_train, y_train).predict(x_test)
        out[weights] = {"accuracy": float(np.mean(predicted == np.asarray(y_test))),
                        "macro_f1": float(f1_score(y_test, predicted, average="macro")),
                        "cut_recall": float(recall_score(y_test, predicted, labels=list(RARE), average="macro")),
                        "seconds": time.perf_counter() - start}
    counts = np.unique(y_train, return_counts=True)[1]
    out["ratio"] = {"train_ratio": float(counts.max() / counts.min()), "train": len(y_train), "test": len(y_test)}
    log.info("ratio %s seed %d: %s", ratio, seed, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratios", type=float, nargs="+", default=[1, 2, 3, 5, 8, 15, 30])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    rows = []
    for ratio in args.ratios:
        runs = [measure(ratio, seed) for seed in args.seeds]
        mean = {w: {k: float(np.mean([r[w][k] for r in runs])) for k in runs[0][w]} for w in ("none", "balanced")}
        rows.append({"ratio": ratio, "train ratio": runs[0]["ratio"]["train_ratio"], "train docs": runs[0]["ratio"]["train"],
                     "acc none": 100 * mean["none"]["accuracy"], "acc balanced": 100 * mean["balanced"]["accuracy"],
                     "macro-F1 none": 100 * mean["none"]["macro_f1"],
                     "macro-F1 balanced": 100 * mean["balanced"]["macro_f1"],
                     "Δ macro-F1": 100 * (mean["balanced"]["macro_f1"] - mean["none"]["macro_f1"]),
                     "cut recall none": 100 * mean["none"]["cut_recall"],
                     "cut recall balanced": 100 * mean["balanced"]["cut_recall"],
                     "fit s": mean["none"]["seconds"]})
    print(f"\nBBC, {RARE} cut, stratified 70/30, seeds {args.seeds}, TF-IDF baseline (means, %)\n")
    print(table(rows, list(rows[0])))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
