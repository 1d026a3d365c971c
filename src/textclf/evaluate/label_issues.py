"""Which labels are probably wrong: out-of-sample probabilities for every corpus document,
judged by cleanlab's confident learning -> reports/label_issues.parquet and a summary.

Confident learning needs probabilities from a model that never saw the document it judges
(in-sample probabilities agree with the given label, wrong or not, and hide the errors). So the
TF-IDF baseline is cross-fitted over the whole corpus: k folds, grouped by near-duplicate group
(no document is judged by a model that trained on its edited copy) and stratified by label,
each fold's documents scored by the baseline fitted on the other folds with the baseline
stage's own fitting function, hashed (bounded memory) in every fold or in none: decided once, from
the largest fold's training documents against baseline.hashing_from. As many folds as the
smallest class allows (labels.folds at most, 2 at least). The fine-tuned model's test
probabilities are out of sample too; where they exist the two are averaged (the ensemble
evaluate scores): a bag of words and a contextual encoder make different mistakes, so where
only one is confidently wrong the mean is less so, and a label both disagree with stays suspect.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from textclf.errors import UserError
from textclf.files import write_json, write_parquet
from textclf.config import BaselineParams, LabelsParams, load_params
from textclf.data.labelsets import hot, is_multilabel, labels_of
from textclf.data.mixed_groups import mixed_counts, other_labels
from textclf.data.weights import resolve
from textclf.evaluate.baseline import fit_baseline, predict, uses_hashing
from textclf.evaluate.label_issues_multilabel import cross_fit_sets, judge_sets
from textclf.inference.frames import PROB_PREFIX

log = logging.getLogger(__name__)

# the table's columns, in order (issue 40's contract with the corrections command)
# group / group_labels: its near-duplicate group, and the labels that group holds besides its own
# ("" for most documents): a mixed-label group ingest kept is listed for review (data.mixed_groups)
COLUMNS = ["doc_id", "source_path", "split", "given", "suggested", "quality", "flagged", "judged_by", "group",
           "group_labels"]
TOP_PAIRS = 10  # overlapping class pairs kept in the summary
STAGE_OF = {"validation": "train", "test": "evaluate"}  # the stage that writes each split's predictions


def read_corpus(corpus: str) -> pa.Table:
    """Every corpus document: doc_id, label, source_path, group, text (Arrow strings)."""
    import pyarrow.parquet as pq

    return pq.read_table(corpus, columns=["doc_id", "label", "source_path", "group", "text"])


def rarest_labels(sets: np.ndarray) -> np.ndarray:
    """Multi-label: each document's rarest label (fewest documents in the corpus, ties by name),
    its fold stratum: a label set is too rare a stratum, and the first label by name left the
    rare labels unstratified and the fold line naming a common one."""
    counts = pd.Series([c for s in sets.tolist() for c in labels_of(s)]).value_counts()
    return np.array([min(labels_of(s), key=lambda c: (counts[c], c)) if labels_of(s) else ""
                     for s in sets.tolist()], dtype=object)


def fold_count(labels: np.ndarray, groups: np.ndarray, folds: int, what: str = "class") -> int:
    """labels.folds, lowered to what the smallest class allows (its near-duplicate groups: a
    group stays in one fold), at least 2; said in one line, with the classes too small for
    any fold (a single group: each is judged by a model that never saw its class). `what`
    names a stratum in that line (a multi-label corpus's: the documents whose rarest label it is)."""
    per_class = pd.DataFrame({"label": labels, "group": groups}).groupby("label")["group"].nunique()
    usable = max(2, min(folds, int(per_class.min())))
    if usable < folds:
        tiny = sorted(map(str, per_class.index[per_class < 2]))
        log.warning("labels.folds=%d lowered to %d: %s %r has %d document group(s)%s", folds, usable, what,
                    str(per_class.idxmin()), int(per_class.min()),
                    f"; too small for any fold, judged by models that never saw their class: {tiny}" if tiny else "")
    return usable


def fold_of(labels: np.ndarray, groups: np.ndarray, folds: int, seed: int, what: str = "class") -> np.ndarray:
    """(N,) fold of each document: near-duplicate groups kept whole, labels stratified, in
    fold_count(labels.folds) folds."""
    from sklearn.model_selection import StratifiedGroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise UserError(f"labels.folds={folds} but the corpus holds {n_groups} document group(s); "
                        "cross-fitting needs at least 2: add documents.")
    folds = fold_count(labels, groups, folds, what)
    fold = np.empty(len(labels), dtype=np.int64)
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # a class with fewer groups than folds: fold_count said so
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        for k, (_, held) in enumerate(splitter.split(np.zeros(len(labels)), labels, groups)):
            fold[held] = k
    return fold


def cross_fit(texts: pa.ChunkedArray, labels: np.ndarray, classes: list[str], fold: np.ndarray,
              cfg: BaselineParams, weights: str) -> np.ndarray:
    """-> (N, C) probabilities, each document's from the baseline fitted on the other folds
    (a class absent from those folds gets 0). One model type in every fold: hashed (bounded
    memory) if the largest fold's training documents reach baseline.hashing_from."""
    probs = np.zeros((len(labels), len(classes)))
    column = {c: i for i, c in enumerate(classes)}
    folds = int(fold.max()) + 1
    hashed = uses_hashing(max(int((fold != k).sum()) for k in range(folds)), cfg)
    for k in tqdm(range(folds), desc="labels folds", unit="fold"):
        started = time.perf_counter()
        train, held = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        model = fit_baseline(texts.take(pa.array(train)), labels[train], cfg, weights, hashed)
        p = predict(model, texts.take(pa.array(held)))
        probs[np.ix_(held, np.array([column[str(c)] for c in model.classes_]))] = p
        log.info("fold %d/%d: %d documents judged by a baseline fitted on %d in %.1f s", k + 1, folds,
                 len(held), len(train), time.perf_counter() - started)
    return probs


def with_model(probs: np.ndarray, doc_ids: np.ndarray, classes: list[str],
               predictions: dict[str, pd.DataFrame]) -> np.ndarray:
    """(N,) judged_by; probs averaged in place with the fine-tuned model's where it has them:
    its validation and test predictions ({split: frame}), out of sample both (train keeps
    an epoch by validation scores, not by any one document's label)."""
    judged = np.full(len(doc_ids), "baseline", dtype=object)
    for split, frame in predictions.items():
        missing = [c for c in classes if PROB_PREFIX + c not in frame.columns]
        if missing:
            raise UserError(f"the model's {split} predictions have no probability for class(es) {missing}: "
                            f"they come from another corpus; rerun `dvc repro {STAGE_OF[split]}`.")
        at = pd.Index(doc_ids).get_indexer(frame["doc_id"])
        if (at < 0).any():
            raise UserError(f"{int((at < 0).sum())} {split} document(s) of the model's predictions are not "
                            f"in the corpus: rerun `dvc repro {STAGE_OF[split]}`.")
        # the mean: a bag of words and an encoder make different mistakes (docs/label_issues.md)
        probs[at] = (probs[at] + frame[[PROB_PREFIX + c for c in classes]].to_numpy()) / 2
        judged[at] = "baseline+model"
    return judged


def judge(given: np.ndarray, probs: np.ndarray, classes: list[str]) -> dict:
    """cleanlab on (N,) class indices and (N, C) out-of-sample probabilities -> quality (N,),
    flagged (N,), per-class noise rate, overlapping class pairs."""
    from cleanlab.count import estimate_joint
    from cleanlab.dataset import find_overlapping_classes
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    quality = get_label_quality_scores(given, probs)
    # n_jobs=1: no worker pool (its workers would inherit the stage's SIGTERM handler)
    flagged = find_label_issues(given, probs, filter_by="prune_by_noise_rate", n_jobs=1)
    joint = estimate_joint(given, probs)  # joint[i, j]: P(given label i, true label j)
    noise = 1 - np.diag(joint) / np.maximum(joint.sum(axis=1), 1e-12)
    pairs = find_overlapping_classes(labels=given, pred_probs=probs, class_names=classes)
    pairs = pairs[pairs["Num Overlapping Examples"] > 0].head(TOP_PAIRS)
    # cleanlab's count is its joint times N, an estimate that gave a class of 7 documents an
    # "overlap" of 78; shown instead: the documents labelled one class whose judges' top is the other
    judged = probs.argmax(axis=1)
    return {"quality": quality, "flagged": flagged, "noise": dict(zip(classes, noise.round(4).tolist())),
            "estimated_noise": round(float(1 - np.trace(joint)), 4),
            "overlapping": [{"a": r["Class Name A"], "b": r["Class Name B"],
                             "documents": crossed(given, judged, r["Class Index A"], r["Class Index B"]),
                             "joint": round(float(r["Joint Probability"]), 4)} for _, r in pairs.iterrows()]}


def crossed(given: np.ndarray, judged: np.ndarray, a: int, b: int) -> int:
    """Documents labelled `a` whose judges' most probable class is `b`, and the other way round."""
    return int(((given == a) & (judged == b)).sum() + ((given == b) & (judged == a)).sum())


def model_accuracy(doc_ids: np.ndarray, flagged_by_baseline: np.ndarray, predictions: pd.DataFrame) -> dict:
    """The model's test accuracy, plain and on the test documents the baseline alone does not
    flag: flags that also read the model's test probabilities leave out its own mistakes, and
    the figure rose by construction (zero noise, a 60 % model: 0.607 -> 0.670)."""
    right = pd.Series((predictions["label"] == predictions["predicted"]).to_numpy(), predictions["doc_id"])
    flagged = pd.Series(flagged_by_baseline, doc_ids).loc[right.index].to_numpy()
    return {"documents": len(right), "flagged": int(flagged.sum()), "flagged_by": "baseline",
            "accuracy": round(float(right.mean()), 4) if len(right) else None,
            "accuracy_unflagged": round(float(right[~flagged].mean()), 4) if (~flagged).any() else None}


@dataclass(frozen=True)
class LabelsPaths:
    """What the labels stage reads and writes, as its command line names them."""
    params: str
    corpus: str
    splits: str
    predictions: str  # the fine-tuned model's test predictions (evaluate)
    table: str  # written: one row per corpus document, most suspect first (parquet)
    summary: str  # written: counts, noise rates, overlapping pairs, test accuracy (JSON)
    val_predictions: str | None = None  # the kept model's validation predictions (train); None: baseline alone


def run_labels(paths: LabelsPaths) -> None:
    """The labels stage: out-of-sample probabilities for every document -> cleanlab -> the table."""
    params = load_params(paths.params)
    cfg: LabelsParams = params.labels
    corpus = read_corpus(paths.corpus)
    multilabel = is_multilabel(corpus.schema.metadata)
    doc_ids = corpus.column("doc_id").to_numpy(zero_copy_only=False)
    labels = corpus.column("label").to_numpy(zero_copy_only=False)  # (N,) a class, or a label set
    classes = sorted({c for s in set(labels.tolist()) for c in labels_of(s)} if multilabel else set(labels.tolist()))
    strata = rarest_labels(labels) if multilabel else labels
    groups = corpus.column("group").to_numpy(zero_copy_only=False)
    fold = fold_of(strata, groups, cfg.folds, params.baseline.seed,
                   "the documents whose rarest label is" if multilabel else "class")
    # auto resolved once, on the whole corpus: every fold's judge weighs its classes alike
    weights = resolve(params.train.class_weights, hot(labels, classes) if multilabel else labels)
    if multilabel:
        probs = cross_fit_sets(corpus.column("text").to_pylist(), labels, classes, fold, params.baseline, weights)
    else:
        probs = cross_fit(corpus.column("text"), labels, classes, fold, params.baseline, weights)
    predictions = pd.read_parquet(paths.predictions)
    model = {"test": predictions}
    if paths.val_predictions:
        model["validation"] = pd.read_parquet(paths.val_predictions)
    alone = probs.copy()  # the baseline's: the test figure's flags may not read the model's answers
    judged_by = with_model(probs, doc_ids, classes, model)
    if multilabel:
        verdict, by_baseline = judge_sets(labels, probs, classes), judge_sets(labels, alone, classes)
        suggested = verdict["suggested"]
    else:
        given = pd.Index(classes).get_indexer(labels)
        verdict, by_baseline = judge(given, probs, classes), judge(given, alone, classes)
        suggested = np.asarray(classes, dtype=object)[probs.argmax(axis=1)]
    table = pd.DataFrame({"doc_id": doc_ids,
                          "source_path": corpus.column("source_path").to_numpy(zero_copy_only=False),
                          "split": split_of(paths.splits, doc_ids), "given": labels, "suggested": suggested,
                          "quality": verdict["quality"].astype(float), "flagged": verdict["flagged"].astype(bool),
                          "judged_by": judged_by, "group": groups, "group_labels": other_labels(groups, labels)})
    # most suspect first; ties in corpus order (a stable sort), so the table is reproducible
    table = table.sort_values("quality", kind="stable").reset_index(drop=True)[COLUMNS]
    write_parquet(table, paths.table)
    test = model_accuracy(doc_ids, by_baseline["flagged"].astype(bool), predictions)
    write_json(paths.summary, summary(table, verdict, cfg, classes, test, multilabel, int(fold.max()) + 1))
    log.info("%d of %d documents flagged; estimated share of wrong labels %.3f", table["flagged"].sum(),
             len(table), verdict["estimated_noise"])


def split_of(splits: str, doc_ids: np.ndarray) -> np.ndarray:
    """(N,) each corpus document's split, in corpus order."""
    split = pd.read_parquet(splits, columns=["doc_id", "split"]).set_index("doc_id")["split"].reindex(doc_ids)
    if split.isna().any():
        raise UserError(f"{int(split.isna().sum())} corpus document(s) are in no split of {splits}: the "
                        "split was made from another corpus; rerun `dvc repro split`.")
    return split.to_numpy()


def per_class(table: pd.DataFrame, classes: list[str], multilabel: bool) -> pd.DataFrame:
    """Per class (per label of a multi-label corpus): its documents and how many are flagged."""
    carried = table.assign(label=table["given"].map(labels_of if multilabel else lambda g: [g]))
    return carried.explode("label").groupby("label")["flagged"].agg(["size", "sum"]).reindex(classes, fill_value=0)


def summary(table: pd.DataFrame, verdict: dict, cfg: LabelsParams, classes: list[str], test: dict,
            multilabel: bool, folds: int) -> dict:
    """What the report and MLflow show of the table; folds: those cross-fitted (fold_count's)."""
    by_class = per_class(table, classes, multilabel)
    return {"documents": len(table), "flagged": int(table["flagged"].sum()), "folds": folds, "show": cfg.show,
            "estimated_noise": verdict["estimated_noise"], "noise_warn": cfg.noise_warn,
            "label_noise": "warn" if verdict["estimated_noise"] > cfg.noise_warn else "pass",
            "flagged_by_split": {s: int(n) for s, n in table.groupby("split")["flagged"].sum().items()},
            "model_judged": sorted(set(table.loc[table["judged_by"] == "baseline+model", "split"])),
            "per_class": {c: {"documents": int(by_class.loc[c, "size"]), "flagged": int(by_class.loc[c, "sum"]),
                              "noise_rate": verdict["noise"][c]} for c in classes},
            "overlapping": verdict["overlapping"], "test": test, "mixed_groups": mixed_counts(table)}
