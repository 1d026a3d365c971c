"""The exported model checked on the test split as it is served, at every evaluate: against
the PyTorch one (the share of predicted labels that agree, the largest probability difference,
the paired verdict: McNemar + bootstrap, as against the baseline), and against itself, each
document scored alone and in batches (SAME_ANSWER_ATOL). A format that is significantly
worse, agrees on fewer labels than serve.min_agreement, or answers a text by what else is in
its batch is not what gets logged and served: int8 falls back to the float32 export beside
it, that to PyTorch, and the stage says why (one warning line naming each fallback,
metrics.json, MLflow, the report). The logged model is a folder of the served format alone
(model.export.format_folder): it runs the file it names."""
from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
from tqdm import tqdm

from textclf.common import UserError, file_md5
from textclf.config import EvaluateParams, ServeParams
from textclf.evaluate.champion import read_texts
from textclf.evaluate.comparison import WORSE, compare
from textclf.inference.frames import SAME_ANSWER_ATOL
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.serving import check_review, log_pyfunc
from textclf.model.calibration import Calibration
from textclf.model.export import format_folder
from textclf.model.exported import EXPORT_FILE, read_export

log = logging.getLogger(__name__)
EXAMPLES = 3  # test texts in the logged model's input example
# Documents scored one per call against their batched answers: all of a test split up to this,
# a seeded sample of this many beyond (docs/serving.md). Scoring one per call cost 0.7-1.8x the
# batched pass (2026-12-06); 1 000 documents find a batch dependence that moves 0.3 % of the
# documents with probability 95 % (dynamic int8 moved all of them), at ~100 s at most.
SINGLE_CALLS = 1000
CHECKED = ("agreement", "max_prob_diff", "accuracy", "verdict", "batch_diff", "single_calls", "batch_differ")


@dataclass(frozen=True)
class Scored:
    """The served export's test probabilities (raw, per document) and its own calibration:
    what evaluate's calibration, sets, review and test predictions are computed from."""
    format: str
    probs: np.ndarray  # (documents, C)
    calibration: Calibration | None


def one_per_call(exported: OnnxPredictor, input_ids, owner: np.ndarray | None, batched: np.ndarray,
                 seed: int) -> dict:
    """Each document (all of them up to SINGLE_CALLS, else a `seed`ed sample) scored alone,
    against its `batched` (documents, C) probabilities -> {batch_diff (the largest difference),
    single_calls (documents scored alone), batch_differ (those past SAME_ANSWER_ATOL)}.
    With chunks (`owner`), a document's windows make one call."""
    n = len(batched)
    docs = np.arange(n) if n <= SINGLE_CALLS else np.sort(
        np.random.default_rng(seed).choice(n, SINGLE_CALLS, replace=False))
    rows = np.arange(n) if owner is None else np.argsort(owner, kind="stable")  # a document's rows together
    bounds = np.arange(n + 1) if owner is None else np.searchsorted(owner[rows], np.arange(n + 1))
    gaps = np.zeros(len(docs))
    for k, d in enumerate(tqdm(docs, desc=f"{exported.format}: one document per call", leave=False)):
        mine = rows[bounds[d]:bounds[d + 1]]
        alone = exported.proba_of_ids([input_ids[i] for i in mine],
                                      None if owner is None else np.zeros(len(mine), dtype=np.int64))
        gaps[k] = np.abs(alone[0] - batched[d]).max()
    return {"batch_diff": float(gaps.max(initial=0.0)), "single_calls": int(len(docs)),
            "batch_differ": int((gaps > SAME_ANSWER_ATOL).sum())}


def check_format(folder: Path, input_ids, y_true: np.ndarray, torch_probs: np.ndarray, serve: ServeParams,
                 cfg: EvaluateParams, owner, answer) -> dict:
    """One exported format (a format_folder) against PyTorch and against itself one document
    per call -> {format, agreement, max_prob_diff, accuracy, verdict, comparison, batch_diff,
    single_calls, batch_differ, reasons (why it is not served; empty: it is), scored}."""
    exported = OnnxPredictor(folder, cfg.batch_size)
    probs = exported.proba_of_ids(input_ids, owner, desc=f"{exported.format}: test")  # (N, C), the same token ids as PyTorch's
    alone = one_per_call(exported, input_ids, owner, probs, cfg.seed)
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
    if alone["batch_differ"]:
        reasons.append(f"{alone['batch_differ']} of {alone['single_calls']} test documents scored one per call "
                       f"differ from their batched answer by up to {alone['batch_diff']:.3g}, over SAME_ANSWER_ATOL "
                       f"{SAME_ANSWER_ATOL:g}: its answer depends on the other texts of a request")
    return {"format": exported.format, "agreement": agreement,
            "max_prob_diff": float(np.abs(probs - torch_probs).max()),
            "accuracy": float((ours == y_true).mean()), "verdict": cmp["verdict"], "comparison": cmp,
            **alone, "reasons": reasons, "scored": Scored(exported.format, probs, exported.calibration)}


def check_export(export_dir: str, input_ids, y_true: np.ndarray, torch_probs: np.ndarray,
                 labels: list[str], serve: ServeParams, cfg: EvaluateParams,
                 owner: np.ndarray | None = None, answer=None) -> tuple[dict, Scored | None]:
    """-> ({requested, format (what is served), agreement, max_prob_diff, accuracy, verdict,
    batch_diff, single_calls, batch_differ, comparison (of the served export; PyTorch served:
    of the requested one), fallback (why the requested format is not served, or None), checks
    (each format checked: the same and its fallback)}, the served export's Scored; None where
    PyTorch is served). The chain: the requested format, then
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
        return {"requested": "torch", "format": "torch", "fallback": None}, None
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
    return chain_result(requested, checks), (None if checks[-1]["reasons"] else checks[-1]["scored"])


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
            **{k: shown[k] for k in ("comparison",) + CHECKED}, "fallback": fallback,
            "checks": {c["format"]: {**{k: c[k] for k in CHECKED}, "fallback": why.get(c["format"])} for c in checks}}


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
    # the ONNX file and its export.json: a re-export with the same file but another calibration logs anew
    tags = {"export_md5": "torch" if export_dir is None else file_md5(export_dir / read_export(export_dir)["file"]),
            "export_json_md5": "torch" if export_dir is None else file_md5(export_dir / EXPORT_FILE),
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
    metrics = {f"serve_{k}": serving[k] for k in ("agreement", "max_prob_diff", "accuracy", "batch_diff")
               if k in serving}
    tags = {"serve.format": serving["format"], "serve.requested": serving["requested"]}
    if serving["fallback"]:
        tags["serve.fallback"] = serving["fallback"]
    return metrics, tags
