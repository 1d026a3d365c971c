"""The evaluate stage's work: the model on the test split, its metrics and calibration, the
paired comparison with the baseline, the registry, and all of it into the training run."""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from textclf.config import load_params
from textclf.data.versions import KINDS, diff, dropped_at_ingest
from textclf.evaluate.blend import blended_test
from textclf.evaluate.champion import SPLITS_ARTIFACT, Challenge
from textclf.evaluate.conformal_report import calibration_scores, review_curve, review_metrics, set_metrics
from textclf.evaluate.comparison import compare, per_class_accuracy
from textclf.evaluate.format_check import Scored, answer_of, torch_proba, truth_of
from textclf.evaluate.serving_check import check_export, served_model, serving_mlflow
from textclf.evaluate.metrics import calibration, classification_scores, metric_names, mlflow_metrics, test_metrics
from textclf.evaluate.metrics_file import class_counts, split_per_class
from textclf.data.labelsets import hot
from textclf.evaluate.multilabel import decide, multilabel_test_metrics, per_label_recall
from textclf.inference.frames import PROB_PREFIX, judged_frame
from textclf.errors import UserError
from textclf.files import read_json, write_csv, write_json, write_parquet
from textclf.model.batching import Split, read_token_splits
from textclf.model.calibration import Calibration, load as load_calibration, review_for
from textclf.model.exported import BLEND_KEY, read_export
from textclf.model.modeling import is_multilabel_model, load_classifier, load_thresholds
from textclf.tracking.registry import current_champion, register, split_hash, version_tags
from textclf.tracking.runs import add_to_run, git_commit
from textclf.tracking.store import training_run

log = logging.getLogger("evaluate")
SERVED_GUARD = "served_format"  # the export's format, chosen on validation, not confirmed on test: an alarm


@dataclass(frozen=True)
class EvaluatePaths:
    """What the evaluate stage reads and writes, as its command line names them."""
    params: str
    tokens: str
    splits: str
    model_dir: str
    run_file: str  # JSON naming the training run
    guards: str  # guard results from train
    baseline: str  # baseline scores JSON
    baseline_predictions: str  # the baseline's per-document test predictions
    corpus: str  # texts of the test documents a champion on other data is scored on
    export: str  # the exported model (serve.format), checked against model_dir before it is served
    metrics: str  # written: the metrics JSON
    data_diff: str  # written: documents added, removed, relabelled, edited since the champion's data
    confusion: str  # written: CSV of (actual, predicted)
    per_class: str  # written: CSV of per-class F1, precision, recall
    per_class_json: str  # written: the per-class and per-pair entries, kept out of `metrics` (split_per_class)
    predictions: str  # written: parquet, per test document
    ingest_report: str | None = None  # ingest's accounting: why a removed document was dropped
    review_curve: str | None = None  # written: CSV, share answered and its accuracy per serve.review_below


def multilabel_results(y_true: np.ndarray, probs: np.ndarray, thresholds: np.ndarray,
                       labels: list[str]) -> tuple[dict, pd.DataFrame]:
    """A multi-label model's test results -> (metrics, confusion rows: one (actual, predicted)
    per label a document carries and label it is given)."""
    pred = decide(probs, thresholds)
    metrics = multilabel_test_metrics(y_true, pred, labels)
    metrics["thresholds"] = dict(zip(labels, thresholds.tolist()))
    names = np.asarray(labels)
    rows = [(a, p) for t, d in zip(np.asarray(y_true, dtype=bool), pred) for a in names[t] for p in names[d]]
    return metrics, pd.DataFrame(rows, columns=["actual", "predicted"])


def answers(doc_ids: list[str], y_true: np.ndarray, raw: np.ndarray, found: Calibration | None, labels: list[str],
            thresholds: np.ndarray | None, serve, where: str) -> tuple[dict, pd.DataFrame]:
    """One format's raw test probabilities (documents, C) and its own calibration -> (its
    confidence figures: ece, ece_raw, brier, brier_raw, temperature, sets, review; its judged
    frame as it answers: calibrated, with the prediction set and needs_review (serve.*)).
    Multi-label: no temperature and no sets, the per-label thresholds decide; ECE is the
    predicted set's probability against exact match, as single-label's is the predicted
    class's against a right answer, and the review flag reads that probability."""
    if thresholds is not None:
        review = review_for(None, serve.coverage, serve.review_below, where, multilabel=True)
        frame = judged_frame(doc_ids, y_true, raw, labels, thresholds, review)
        return {"ece": calibration(frame["probability"], frame["correct"])["ece"],
                "review": review_metrics(frame, review.review_below)}, frame
    served = raw if found is None else found.apply(raw)
    review = review_for(found, serve.coverage, serve.review_below, where)
    frame = judged_frame(doc_ids, y_true, served, labels, None, review)
    out = calibration_scores(raw, served, y_true, found.temperature if found else None)
    if review.coverage is not None and review.cut is not None:
        out["sets"] = set_metrics(frame, labels, review.coverage, review.unguaranteed)
    return out | {"review": review_metrics(frame, review.review_below)}, frame


def versus_baseline(predictions: pd.DataFrame, baseline: pd.DataFrame, labels: list[str], cfg,
                    multilabel: bool = False) -> dict:
    """The paired comparison, per-class accuracy of both, and (evaluate.ensemble) the scores
    of the mean of both systems' probabilities, all on the same test documents. Multi-label:
    paired on exact match (the whole label set right), per label each system's recall."""
    if set(baseline["doc_id"]) != set(predictions["doc_id"]):
        raise UserError("the baseline predictions cover other test documents than the model's; "
                         "rerun both on the same split: dvc repro baseline evaluate.")
    if set(baseline.filter(like=PROB_PREFIX).columns) - {PROB_PREFIX + c for c in labels}:
        raise UserError(f"the baseline predicts classes the model does not know ({labels}); "
                         "rerun train and baseline on the same corpus: dvc repro.")
    base = baseline.set_index("doc_id").loc[predictions["doc_id"]]  # the model's document order
    out = {"comparison": compare(predictions["correct"].to_numpy(),
                                 (base["predicted"] == base["label"]).to_numpy(),
                                 cfg.bootstrap, cfg.seed, cfg.alpha)}
    if multilabel:  # exact match per document above; per label, each system's recall
        out["per_class_accuracy"] = per_label_recall(labels, hot(predictions["label"], labels),
                                                     hot(predictions["predicted"], labels), hot(base["predicted"], labels))
        if cfg.ensemble:
            log.info("evaluate.ensemble: not scored for a multi-label model (the model and the baseline "
                     "cut their probabilities at thresholds of their own)")
        return out
    out["per_class_accuracy"] = per_class_accuracy(labels, predictions["label"], predictions["predicted"],
                                                   base["predicted"])
    if cfg.ensemble:  # a class the baseline never saw in training gets probability 0 there
        cols = [PROB_PREFIX + c for c in labels]
        base_probs = base.reindex(columns=cols, fill_value=0.0).to_numpy()
        mean = (predictions[cols].to_numpy() + base_probs) / 2  # (N, C)
        out["ensemble"] = classification_scores(predictions["label"],
                                                [labels[i] for i in mean.argmax(axis=1)])
    return out


def registry_step(paths: EvaluatePaths, cfg, training: dict, metrics: dict,
                  predictions: pd.DataFrame) -> dict:
    """Register this version and let the gate move `champion` (metrics["registry"]) -> the
    document-level diff against the champion's data version."""
    if not cfg.register:
        return {"against_version": None, "why": "evaluate.register is false: no champion to compare with"}
    splits = pd.read_parquet(paths.splits)
    test_docs = splits.loc[splits["split"] == "test"]
    test_split = split_hash(zip(test_docs["content_hash"], test_docs["label"]))
    tags = version_tags(metrics, test_split, git_commit(), os.environ.get("DVC_EXP_NAME"))
    challenge = Challenge(cfg.registered_model, splits, predictions, paths.corpus, cfg,
                          metrics.get("task") == "multilabel")
    champion = current_champion(training["tracking_uri"], cfg.registered_model)
    against = challenge.read_champion(champion, training["tracking_uri"])  # before this version registers
    metrics["registry"] = register(training, cfg.registered_model, tags, challenge)
    if champion is None or against is None:  # no champion, no split table to compare with
        return {"against_version": None, "why": "no champion yet" if champion is None else
                f"the champion (version {champion['version']}) carries no split table "
                f"({SPLITS_ARTIFACT}: registered before data versions were recorded)"}
    dropped = dropped_at_ingest(read_json(paths.ingest_report)) if paths.ingest_report else None
    return {"against_version": int(champion["version"]), **diff(against, splits, dropped=dropped)}


def diff_counts(found: dict) -> dict:
    """The diff's counts, for metrics.json and MLflow."""
    if found.get("against_version") is None:
        return {"against_version": None}
    moves = found.get("split_moves") or {}
    return {"against_version": found["against_version"], **{k: found[k]["count"] for k in KINDS},
            "changed_split": moves.get("moved", 0), "test_to_train": moves.get("test_to_train", 0)}


def score_test(paths: EvaluatePaths, params, model, labels: list[str], thresholds: np.ndarray | None,
               test: Split) -> tuple[dict, pd.DataFrame, pd.DataFrame, dict, pd.DataFrame]:
    """The model on the test split, and the export checked against it -> (metrics, the served
    format's per-document predictions, confusion rows (actual, predicted), the serving check,
    the PyTorch model's per-document predictions). accuracy, macro-F1, per-class scores and the
    confusion are the PyTorch model's; the calibration, sets, review and predictions the served
    format's (metrics' confidence_format), from its own probabilities and calibration."""
    cfg = params.evaluate
    y_true = np.asarray(test.labels)  # (N,) classes, or (N, C) multi-hot
    probs = torch_proba(model, paths.model_dir, test, cfg, thresholds is not None, desc="test")  # (documents, C)
    serving, scored = check_export(paths.export, test.input_ids, truth_of(y_true, labels, thresholds), probs,
                                   labels, params.serve, cfg, test.owner, answer_of(labels, thresholds))
    doc_ids = test.doc_ids or []
    found = None if thresholds is not None else load_calibration(paths.model_dir)  # None: none saved
    confidence, model_frame = answers(doc_ids, y_true, probs, found, labels, thresholds, params.serve, paths.model_dir)
    blend = read_export(paths.export).get(BLEND_KEY)
    if blend and scored is None:  # PyTorch serves the blend (the export's copy of this model)
        scored = Scored("torch", probs, found)
    if blend and scored is not None:  # the export serves the blend with the baseline: what is served
        scored, blend_metrics = blended_test(scored, blend, paths.baseline_predictions, doc_ids, labels, y_true, cfg)
    if scored is not None:  # an export is served: its own probabilities, with its own calibration
        confidence, predictions = answers(doc_ids, y_true, scored.probs, scored.calibration, labels, thresholds,
                                          params.serve, paths.export)
    else:
        predictions = model_frame
    # the trained model's outcome beside the served one: multiseed pools it, as each seed's
    # metrics compare it (the served blend or int8 export may answer otherwise)
    predictions = predictions.assign(model_correct=model_frame["correct"].to_numpy())
    if thresholds is not None:
        metrics, confusion = multilabel_results(y_true, probs, thresholds, labels)
    else:
        y_pred = probs.argmax(axis=1)
        metrics = test_metrics(y_true, y_pred, labels)
        confusion = pd.DataFrame({"actual": [labels[i] for i in y_true], "predicted": [labels[i] for i in y_pred]})
    metrics.update(confidence, confidence_format=serving["format"])
    if blend:
        metrics["blend"] = blend_metrics
    return metrics, predictions, confusion, serving, model_frame


def run(paths: EvaluatePaths) -> None:
    """The stage."""
    params = load_params(paths.params)
    cfg = params.evaluate
    training = training_run(paths.run_file)  # before the work: fail in one line, naming the store
    model, labels = load_classifier(paths.model_dir)
    thresholds = load_thresholds(paths.model_dir, labels) if is_multilabel_model(model) else None
    multilabel = thresholds is not None
    test = read_token_splits(paths.tokens, paths.splits, labels, names=("test",))[0]["test"]
    doc_ids = test.doc_ids or []
    metrics, predictions, confusion_rows, serving, model_frame = score_test(paths, params, model, labels,
                                                                           thresholds, test)
    guard_results = read_json(paths.guards)
    metrics["guards"] = {name: g["status"] for name, g in guard_results.items()}
    if serving.get("unconfirmed"):  # served all the same (the folder serves it), but never as champion
        metrics["guards"][SERVED_GUARD] = "fail"
    # the classes the kept model never recalls on validation: the report names them
    metrics["silent_classes"] = guard_results.get("silent_class", {}).get("classes", [])
    if "class_weights" in guard_results.get("silent_class", {}):  # the weighting train used: the report's advice
        metrics["class_weights"] = guard_results["silent_class"]["class_weights"]
    baseline = read_json(paths.baseline)  # its per-class scores go to per_class.json, as the model's
    metrics["baseline"] = {k: v for k, v in baseline.items() if k != "per_class"}
    if "per_class" in baseline:
        metrics["baseline_per_class"] = baseline["per_class"]
    metrics["gap"] = {k: metrics[k] - metrics["baseline"][k] for k in ("accuracy", "macro_f1")}
    metrics.update(versus_baseline(model_frame, pd.read_parquet(paths.baseline_predictions), labels, cfg,
                                   multilabel))  # the PyTorch model's answers, as accuracy and gap are
    metrics["kept_epoch"] = training.get("kept_epoch")
    metrics["classes"] = class_counts(metrics)
    review = {"coverage": params.serve.coverage, "review_below": params.serve.review_below}
    served = {**training, "model_uri": served_model(paths.export, paths.model_dir, paths.corpus,
                                                    doc_ids, serving, training, review)}
    metrics["serving"] = {**serving, "model_uri": served["model_uri"]}
    metrics["mlflow"] = {"run_id": training["run_id"], "model_uri": served["model_uri"],  # run -> metrics
                         "torch_model_uri": training["model_uri"]}
    data_diff = registry_step(paths, cfg, served, metrics, predictions)
    metrics["data_diff"] = diff_counts(data_diff)
    write_json(paths.data_diff, data_diff)
    summary, per_class = split_per_class(metrics)
    write_json(paths.metrics, summary)
    write_json(paths.per_class_json, per_class)
    write_parquet(predictions, paths.predictions)
    if paths.review_curve:
        write_csv(review_curve(predictions), paths.review_curve)
    write_csv(confusion_rows, paths.confusion)
    write_csv(pd.DataFrame([{"class": c, **{k: s[k] for k in ("f1", "precision", "recall")}}
                            for c, s in metrics["per_class"].items()]), paths.per_class)
    changes = {f"data_diff.{k}": v for k, v in metrics["data_diff"].items() if k != "against_version"}
    serve_metrics, serve_tags = serving_mlflow(serving)
    add_to_run(training, metrics={**mlflow_metrics(metrics), **changes, **serve_metrics},
               tags={"verdict": metrics["comparison"]["verdict"], **serve_tags},
               artifacts=(paths.metrics, paths.per_class_json, paths.confusion, paths.data_diff),
               dicts={"class_names.json": metric_names(labels)})
    with tempfile.TemporaryDirectory() as tmp:  # under its fixed name: a later evaluate reads it
        shutil.copyfile(paths.splits, Path(tmp) / Path(SPLITS_ARTIFACT).name)
        add_to_run(training, artifacts=(Path(tmp) / Path(SPLITS_ARTIFACT).name,),
                   artifact_path=str(Path(SPLITS_ARTIFACT).parent))
    log.info("test accuracy %.4f, macro-F1 %.4f, ECE %.4f on %d documents; versus the baseline: %s",
             metrics["accuracy"], metrics["macro_f1"], metrics["ece"], metrics["n_test"],
             metrics["comparison"]["verdict"])
