"""The TF-IDF baseline's cost (issue 50): the baseline before issue 50 against the project's, and
the alternatives measured to choose it, in the same run.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/speed/baseline_speed.py [--corpora bbc fortunes synthetic]
        [--candidates old new saga-df2 svc-df2 ...] [--labels]

Three corpora, each split as the pipeline does: BBC (../shared/data/bbc; ingest's corpus and
the stable split, default params), Debian's fortunes (42 classes, ~14 600 short texts; built by
benchmarks/corpora.py) and `synthetic`, a seeded many-class corpus
(20 000 documents, 57 classes of 7 to ~1 250 documents, ~90 words each, classes in families of
three siblings that share most of their words, up to a tenth of the documents edited copies of a
sibling's, grouped with it; split by the grouped stratified shuffle, as it has no ingest key).
Each candidate fits on the train split and scores the test split in a fresh process (`--child`),
so its peak RSS is its own; `old` is the baseline before issue 50 (min_df 1, logistic regression
by lbfgs, C 10), `new` the project's fitting function at its default params, the others
CANDIDATES. `--labels` also times the labels stage's cross-fit (its folds and the project's
fitting function, every corpus document) in a fresh process. Printed: per corpus and candidate,
fit wall and CPU seconds (CPU: the same on a busy machine), peak GiB, features, test accuracy,
macro-F1, and the ratios to `old`.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import answer, child  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC, fortunes_corpus  # noqa: E402

# name -> (min_df, max_features, classifier): the measured alternatives (docs/benchmarks.md)
CANDIDATES = {
    "old": (1, None, "lbfgs"),
    "lbfgs-df2": (2, None, "lbfgs"),
    "saga-df2": (2, None, "saga"),
    "sgd-df2": (2, None, "sgd"),
    "svc-df2": (2, None, "svc"),
    "saga-df2-cap100k": (2, 100_000, "saga"),
    "lbfgs-df2-cap100k": (2, 100_000, "lbfgs"),
}


def synthetic(n: int = 20_000, classes: int = 57, seed: int = 0) -> pd.DataFrame:
    """A many-class imbalanced corpus: doc_id, label, text, group (an edited copy shares its
    source's group, as ingest's near-duplicate grouping would put them)."""
    rng = np.random.default_rng(seed)
    syllables = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou")]
    vocab = np.array(sorted({"".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(60_000)}))
    common = 1 / np.arange(1, len(vocab) + 1) ** 1.1  # a Zipf law over every word
    common /= common.sum()
    sizes = np.round(7 + 1293 * np.linspace(0, 1, classes) ** 2.76).astype(int)
    sizes[-1] += n - sizes.sum()
    families = [rng.choice(np.arange(300, len(vocab)), 200, replace=False) for _ in range(classes // 3 + 1)]
    own = [rng.choice(np.arange(300, len(vocab)), 30, replace=False) for _ in range(classes)]
    rows = []
    for c, size in enumerate(rng.permutation(sizes)):
        family, zipf = families[c // 3], 1 / np.arange(1, 201)
        for _ in range(size):
            length = max(5, int(rng.lognormal(np.log(80), 0.5)))
            source = rng.choice(3, length, p=[0.6, 0.37, 0.03])  # common words, the family's, its own
            words = np.where(source == 0, rng.choice(len(vocab), length, p=common),
                             np.where(source == 1, rng.choice(family, length, p=zipf / zipf.sum()),
                                      rng.choice(own[c], length)))
            rows.append((c, words))
    labels, words_of, groups = [], [], []
    for i in rng.permutation(len(rows)):
        c, words = rows[i]
        recent = [j for j in range(max(0, len(labels) - 200), len(labels))
                  if labels[j] != c and labels[j] // 3 == c // 3]
        if recent and rng.random() < 0.1:  # an edited copy of a sibling's document: a fifth of its words
            words = words_of[recent[-1]].copy()
            swap = rng.random(len(words)) < 0.2
            words[swap] = rng.choice(own[c], int(swap.sum()))
            groups.append(groups[recent[-1]])
        else:
            groups.append(len(labels))
        labels.append(c)
        words_of.append(words)
    return pd.DataFrame({"doc_id": [f"s{i:05d}" for i in range(len(labels))],
                         "label": [f"class_{c:02d}" for c in labels],
                         "text": [" ".join(vocab[w]) for w in words_of],
                         "group": [f"g{g:05d}" for g in groups]})


def pipeline_split(corpus: pd.DataFrame) -> pd.DataFrame:
    """The split stage's assignment at the default params -> corpus with a `split` column."""
    from textclf.config import SplitParams
    from textclf.data.split_stage import split_corpus
    from textclf.data.splitting import assign_splits

    cfg = SplitParams()
    if "split_key" in corpus:
        split = split_corpus(corpus, cfg.fractions, cfg.seed, cfg.method)[0].set_index("doc_id")["split"]
    else:  # the synthetic corpus: no ingest, so no split key; the grouped stratified shuffle
        frame = corpus.set_index("doc_id")
        split = assign_splits(frame["label"], frame["group"], cfg.fractions, cfg.seed)
    return corpus.assign(split=corpus["doc_id"].map(split))


def prepare(name: str, work: Path) -> Path:
    """The corpus `name` as work/<name>.parquet: doc_id, label, text, group, split."""
    from textclf.config import IngestParams
    from textclf.data.corpus import build_corpus

    if name == "synthetic":
        corpus = synthetic()
    else:
        source = BBC
        if name == "fortunes":
            source = fortunes_corpus(work / "fortunes", IngestParams().min_per_class)
        cfg = IngestParams()
        corpus = build_corpus(source, cfg.max_bytes, cfg.min_per_class, cfg.near_duplicates)[0]
    out = work / f"{name}.parquet"
    pipeline_split(corpus)[["doc_id", "label", "text", "group", "split"]].to_parquet(out)
    return out


def old_or_candidate(name: str, weights: str = "none"):
    """A scikit-learn pipeline for a CANDIDATES entry, C 10 as the baseline before issue 50."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVC

    min_df, cap, kind = CANDIDATES[name]
    balanced = "balanced" if weights == "balanced" else None
    model = {"lbfgs": lambda: LogisticRegression(C=10.0, max_iter=2000, random_state=42, class_weight=balanced),
             "saga": lambda: LogisticRegression(C=10.0, solver="saga", max_iter=2000, random_state=42,
                                                class_weight=balanced),
             "sgd": lambda: SGDClassifier(loss="log_loss", alpha=1e-5, random_state=42, class_weight=balanced),
             "svc": lambda: CalibratedClassifierCV(LinearSVC(C=1.0, class_weight=balanced), cv=3)}[kind]()
    return make_pipeline(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=min_df,
                                         max_features=cap), model)


def candidate_child(data: str, name: str) -> None:
    """Fit candidate `name` on data's train split, score its test split; answer its figures."""
    from textclf.evaluate.metrics import classification_scores

    frame = pd.read_parquet(data)
    train, test = frame[frame["split"] == "train"], frame[frame["split"] == "test"]
    started, cpu = time.perf_counter(), time.process_time()
    if name.startswith("new"):  # new:min_df=1,max_features=100000 overrides the defaults
        from textclf.config import BaselineParams
        from textclf.evaluate.baseline import fit_baseline

        overrides = dict(kv.split("=") for kv in name.partition(":")[2].split(",") if kv)
        model = fit_baseline(train["text"].tolist(), train["label"].to_numpy(),
                             BaselineParams(**{k: type(getattr(BaselineParams(), k))(v) for k, v in overrides.items()}))
        features = len(model[0].vocabulary_)
    else:
        model = old_or_candidate(name).fit(train["text"].tolist(), train["label"].tolist())
        features = len(model[0].vocabulary_)
    fit, cpu = time.perf_counter() - started, time.process_time() - cpu
    probs = model.predict_proba(test["text"].tolist())
    predicted = np.asarray(model.classes_)[probs.argmax(axis=1)]
    answer({"fit s": fit, "cpu s": cpu, "peak GiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "features": features, **classification_scores(test["label"], predicted)})


def labels_child(data: str) -> None:
    """The labels stage's cross-fit over every document at the default labels.folds."""
    import pyarrow as pa

    from textclf.config import BaselineParams, LabelsParams
    from textclf.evaluate.label_issues import cross_fit, fold_of

    frame = pd.read_parquet(data)
    labels = frame["label"].to_numpy()
    started, cpu = time.perf_counter(), time.process_time()
    fold = fold_of(labels, frame["group"].to_numpy(), LabelsParams().folds, 42)
    probs = cross_fit(pa.chunked_array([pa.array(frame["text"].tolist())]), labels, sorted(set(labels)), fold,
                      BaselineParams(), "none")
    agree = float((np.asarray(sorted(set(labels)))[probs.argmax(axis=1)] == labels).mean())
    answer({"fit s": time.perf_counter() - started, "cpu s": time.process_time() - cpu,
            "folds": int(fold.max() + 1),
            "peak GiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "out-of-fold accuracy": agree})


def run_child(*args: str) -> dict:
    """This script's --child or --labels-child in a fresh process (its peak RSS its own)."""
    result = child(__file__, *args)
    if result is None:
        sys.exit(f"{args} failed (its error above)")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpora", nargs="+", default=["bbc", "fortunes", "synthetic"])
    p.add_argument("--candidates", nargs="+", default=["old", "new"])
    p.add_argument("--labels", action="store_true", help="also time the labels stage's cross-fit")
    p.add_argument("--child", nargs=2, metavar=("DATA", "CANDIDATE"), help=argparse.SUPPRESS)
    p.add_argument("--labels-child", metavar="DATA", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return candidate_child(*args.child)
    if args.labels_child:
        return labels_child(args.labels_child)
    from timing import table

    rows = []
    with tempfile.TemporaryDirectory(prefix="baseline_speed_") as tmp:
        for corpus in args.corpora:
            data = prepare(corpus, Path(tmp))
            split = pd.read_parquet(data, columns=["label", "split"])
            print(f"{corpus}: {len(split)} documents, {split['label'].nunique()} classes, "
                  f"{(split['split'] == 'train').sum()} to fit", flush=True)
            for name in args.candidates:
                rows.append({"corpus": corpus, "candidate": name, **run_child("--child", str(data), name)})
                print(rows[-1], flush=True)
            if args.labels:
                rows.append({"corpus": corpus, "candidate": "labels (new)", **run_child("--labels-child", str(data))})
                print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    print("\n" + table([{k: (f"{v:.4f}" if k in ("accuracy", "macro_f1") else f"{v:.2f}" if isinstance(v, float)
                            else v) for k, v in r.items() if not pd.isna(v)} for r in rows],
                       ["corpus", "candidate", "fit s", "cpu s", "peak GiB", "features", "accuracy", "macro_f1"]))
    if "old" in args.candidates:
        for corpus, got in frame.groupby("corpus", sort=False):
            old = got[got["candidate"] == "old"].iloc[0]
            for _, r in got[~got["candidate"].isin(["old", "labels (new)"])].iterrows():
                print(f"{corpus}: {r['candidate']} / old: time {r['fit s'] / old['fit s']:.3f}x (CPU "
                      f"{r['cpu s'] / old['cpu s']:.3f}x), peak "
                      f"{r['peak GiB'] / old['peak GiB']:.2f}x, accuracy {100 * (r['accuracy'] - old['accuracy']):+.2f} "
                      f"points, macro-F1 {100 * (r['macro_f1'] - old['macro_f1']):+.2f} points")


if __name__ == "__main__":
    main()
