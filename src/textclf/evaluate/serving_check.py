"""The exported model checked against the PyTorch one on the test split, at every evaluate:
the share of predicted labels that agree, the largest probability difference, and the paired
verdict (McNemar + bootstrap, as against the baseline). A format that is significantly worse,
or agrees on fewer labels than serve.min_agreement, is not what gets logged and served: int8
falls back to the float32 export beside it, that to PyTorch, and the stage says why (one
warning line naming each fallback, metrics.json, MLflow, the report). The logged model is a
folder of the served format alone (model.export.format_folder): it runs the file it names."""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import mlflow
import numpy as np

from textclf.common import UserError, file_md5
from textclf.config import EvaluateParams, ServeParams
from textclf.evaluate.champion import read_texts
from textclf.evaluate.comparison import WORSE, compare
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.serving import check_review, log_pyfunc
from textclf.model.export import format_folder
from textclf.model.exported import read_export

log = logging.getLogger(__name__)
EXAMPLES = 3  # test texts in the logged model's input example


def check_format(folder: Path, input_ids, y_true: np.ndarray, torch_probs: np.ndarray, serve: ServeParams,
                 cfg: EvaluateParams, owner, answer) -> dict:
    """One exported format (a format_folder) against PyTorch -> {format, agreement,
    max_prob_diff, accuracy, verdict, comparison, reasons (why it is not served; empty: it is)}."""
    exported = OnnxPredictor(folder, cfg.batch_size)
    probs = exported.proba_of_ids(input_ids, owner)  # (N, C), the same token ids as PyTorch's
    ours, theirs = answer(probs), answer(torch_probs)
    agreement = float((ours == theirs).mean())
    cmp = compare(ours == y_true, theirs == y_true, cfg.bootstrap, cfg.seed, cfg.alpha)
    reasons = []
    if agreement < serve.min_agreement:
        reasons.append(f"{int((ours == theirs).sum())} of its {len(ours)} test labels ({agreement:.2%}) "
                       f"agree with PyTorch's, below serve.min_agreement {serve.min_agreement:.2%}")
    if cmp["verdict"] == WORSE:
        reasons.append(f"significantly worse than PyTorch on the test split ({cmp['difference']:+.1%}, "
                       f"McNemar p = {cmp['mcnemar_p']:.3g})")
    return {"format": exported.format, "agreement": agreement,
            "max_prob_diff": float(np.abs(probs - torch_probs).max()),
            "accuracy": float((ours == y_true).mean()), "verdict": cmp["verdict"], "comparison": cmp,
            "reasons": reasons}


def check_export(export_dir: str, input_ids, y_true: np.ndarray, torch_probs: np.ndarray,
                 labels: list[str], serve: ServeParams, cfg: EvaluateParams,
                 owner: np.ndarray | None = None, answer=None) -> dict:
    """-> {requested, format (what is served), agreement, max_prob_diff, accuracy, verdict,
    comparison (of the served export; PyTorch served: of the requested one), fallback (why the
    requested format is not served, or None), checks (each format checked: its agreement,
    max_prob_diff, accuracy, verdict, fallback)}. The chain: the requested format, then
    (int8) the float32 export beside it, then PyTorch. Per document: with chunks (`owner`, each
    row's document) the export pools its windows as PyTorch did. `answer`: (N, C) probabilities
    -> each document's answer, compared with y_true (by default the most probable class; a
    multi-label model's: its label set)."""
    meta = read_export(export_dir)
    requested = meta["format"]
    if requested != serve.format:
        raise UserError(f"{export_dir} holds a {requested} export, but serve.format is "
                        f"{serve.format}: rerun `dvc repro export`.")
    if requested == "torch":
        return {"requested": "torch", "format": "torch", "fallback": None}
    if list(meta["labels"]) != labels:
        raise UserError(f"{export_dir} was exported from a model with the classes "
                        f"{meta['labels']}, not {labels}: rerun `dvc repro export`.")
    chain = [requested] + ([meta["fallback"]["format"]] if meta.get("fallback") else [])
    answer = answer or (lambda p: p.argmax(axis=1))
    checks = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in chain:  # the next format only when this one is not served
            folder = format_folder(export_dir, fmt, Path(tmp) / fmt)
            checks.append(check_format(folder, input_ids, y_true, torch_probs, serve, cfg, owner, answer))
            if not checks[-1]["reasons"]:
                break
    return chain_result(requested, checks)


def chain_result(requested: str, checks: list[dict]) -> dict:
    """The checks of the chain, in order (the last one passed, or none did) -> check_export's
    answer; one warning line naming each format not served and why."""
    failed = [c for c in checks if c["reasons"]]
    why = {c["format"]: "; ".join(c["reasons"]) for c in failed}
    fallback = ("; ".join(why.values()) if len(why) == 1 else
                "; ".join(f"{fmt}: {reason}" for fmt, reason in why.items())) or None
    served = None if len(failed) == len(checks) else checks[-1]
    if fallback:
        log.warning("serving %s, not %s: %s", served["format"] if served else "PyTorch", " or ".join(why), fallback)
    shown = served or checks[0]
    return {"requested": requested, "format": served["format"] if served else "torch",
            **{k: shown[k] for k in ("agreement", "max_prob_diff", "accuracy", "verdict", "comparison")},
            "fallback": fallback,
            "checks": {c["format"]: {**{k: c[k] for k in ("agreement", "max_prob_diff", "accuracy", "verdict")},
                                     "fallback": why.get(c["format"])} for c in checks}}


def served_model(export_dir: str, model_dir: str, corpus: str, doc_ids: list[str],
                 serving: dict, training: dict, review: dict) -> str:
    """Log what passed the check (the export's one format, or the PyTorch folder) as a pyfunc
    of the training run whose answers carry `review` ({coverage, review_below}: serve.*), once
    per export and review (a rerun finds it by its tags) -> the URI to register and serve.
    `review` must be what the export recorded (a PyTorch model carries it in model_config)."""
    check_review(export_dir, review)
    if serving["format"] == "torch":
        return _log_served(None, model_dir, corpus, doc_ids, serving, training, review)
    with tempfile.TemporaryDirectory() as tmp:  # the served format alone, logged as artifacts/export
        return _log_served(format_folder(export_dir, serving["format"], Path(tmp) / "export"),
                           model_dir, corpus, doc_ids, serving, training, review)


def _log_served(export_dir: Path | None, model_dir: str, corpus: str, doc_ids: list[str], serving: dict,
                training: dict, review: dict) -> str:
    mlflow.set_tracking_uri(training["tracking_uri"])
    tags = {"export_md5": "torch" if export_dir is None else file_md5(export_dir / read_export(export_dir)["file"]),
            "serve_review": json.dumps(review, sort_keys=True)}
    logged = mlflow.MlflowClient().search_logged_models(  # an evaluate rerun: logged already
        experiment_ids=[training["experiment_id"]], max_results=1,
        filter_string=f"source_run_id = '{training['run_id']}' AND " +
                      " AND ".join(f"tags.{k} = '{v}'" for k, v in tags.items()))
    if logged:
        return f"models:/{logged[0].model_id}"
    info = log_pyfunc(model_dir, read_texts(corpus, doc_ids[:EXAMPLES]), export_dir,
                      into=(training["experiment_id"], training["run_id"]), tags=tags, review=review)
    log.info("serving %s: %s, answers with %s", serving["format"], info.model_uri, review)
    return info.model_uri


def serving_mlflow(serving: dict) -> tuple[dict, dict]:
    """-> (metrics, tags) of the check for the training run."""
    metrics = {f"serve_{k}": serving[k] for k in ("agreement", "max_prob_diff", "accuracy") if k in serving}
    tags = {"serve.format": serving["format"], "serve.requested": serving["requested"]}
    if serving["fallback"]:
        tags["serve.fallback"] = serving["fallback"]
    return metrics, tags
