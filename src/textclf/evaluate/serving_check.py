"""The exported model confirmed on the test split as it is served, at every evaluate, and
logged: the export stage decided on validation which format serves (int8, else float32, else
PyTorch: export.check), and evaluate checks that format against the PyTorch one
(evaluate.format_check: agreement, largest probability difference, McNemar + bootstrap, each
document scored alone and in batches) and logs it whatever the test says, so that the folder
and the logged model never answer apart; a test check that fails is one warning line, the
guard alarm served_format (never champion), metrics.json, MLflow and the report. The logged
model is a folder of the served format alone (model.export.format_folder): it runs the file
it names."""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import mlflow
import numpy as np

from textclf.errors import UserError
from textclf.files import file_md5
from textclf.config import EvaluateParams, ServeParams
from textclf.cpu import has_vnni
from textclf.evaluate.champion import read_texts
from textclf.evaluate.format_check import CHECKED, Scored, check_format
from textclf.inference.serving import check_review, log_pyfunc
from textclf.model.export import format_folder
from textclf.model.exported import BLEND_KEY, EXPORT_FILE, read_export

log = logging.getLogger(__name__)
EXAMPLES = 3  # test texts in the logged model's input example


def check_export(export_dir: str, input_ids, y_true: np.ndarray, torch_probs: np.ndarray,
                 labels: list[str], serve: ServeParams, cfg: EvaluateParams,
                 owner: np.ndarray | None = None, answer=None) -> tuple[dict, Scored | None]:
    """The format the export stage decided to serve (export.json's `format`, checked on
    validation) confirmed on test -> ({requested, format (what is served), agreement,
    max_prob_diff, accuracy, verdict, batch_diff, single_calls, batch_differ, comparison,
    fallback (why the export serves another format than requested, or None), unconfirmed
    (why the test check fails, or None), checks, validation (the export's check), cpu (the
    CPU that checked it)}, the served export's Scored; None where PyTorch is served).
    Evaluate never serves another format than the folder's: every path loading models/export
    answers as the logged model does; a format the test split does not confirm is logged and
    registered all the same, but as a guard alarm (never champion), said in one warning line,
    metrics.json, MLflow and the report (issue 61). Per document:
    with chunks (`owner`) the export pools its windows as PyTorch did. `answer`: (N, C)
    probabilities -> each document's answer (by default the most probable class)."""
    meta = read_export(export_dir)
    requested = meta.get("requested", meta["format"])
    if requested != serve.format:
        raise UserError(f"{export_dir} holds a {requested} export, but serve.format is "
                        f"{serve.format}: rerun `dvc repro export`.")
    decided = {"requested": requested, "validation": meta.get("check"), "cpu": meta.get("cpu"),
               "fallback": (meta.get("check") or {}).get("fallback")}
    if meta["format"] == "torch":
        return {**decided, "format": "torch", "unconfirmed": None}, None
    if list(meta["labels"]) != labels:
        raise UserError(f"{export_dir} was exported from a model with the classes "
                        f"{meta['labels']}, not {labels}: rerun `dvc repro export`.")
    with tempfile.TemporaryDirectory() as tmp:
        folder = format_folder(export_dir, meta["format"], Path(tmp) / meta["format"])
        found = check_format(folder, input_ids, y_true, torch_probs, serve, cfg, owner,
                             answer or (lambda p: p.argmax(axis=1)))
    unconfirmed = "; ".join(found["reasons"]) or None
    if unconfirmed:
        log.warning("serving %s as the export decided on validation, though on test %s; it does not become "
                    "champion (guard served_format)", meta["format"], unconfirmed)
    return ({**decided, "format": meta["format"], "unconfirmed": unconfirmed,
             **{k: found[k] for k in ("comparison",) + CHECKED},
             "checks": {meta["format"]: {**{k: found[k] for k in CHECKED}, "fallback": None}}}, found["scored"])


def served_model(export_dir: str, model_dir: str, corpus: str, doc_ids: list[str],
                 serving: dict, training: dict, review: dict) -> str:
    """Log what passed the check (the export's one format, or the PyTorch folder) as a pyfunc
    of the training run whose answers carry `review` ({coverage, review_below}: serve.*), once
    per export and review (a rerun finds it by its tags) -> the URI to register and serve.
    `review` must be what the export recorded (a PyTorch model carries it in model_config)."""
    check_review(export_dir, review)
    if serving["format"] == "torch":  # the model folder alone, or the export carrying it for the blend
        blend = read_export(export_dir).get(BLEND_KEY)
        return _log_served(Path(export_dir) if blend else None, model_dir, corpus, doc_ids, serving, training, review)
    with tempfile.TemporaryDirectory() as tmp:  # the served format alone, logged as artifacts/export
        return _log_served(format_folder(export_dir, serving["format"], Path(tmp) / "export"),
                           model_dir, corpus, doc_ids, serving, training, review)


def _log_served(export_dir: Path | None, model_dir: str, corpus: str, doc_ids: list[str], serving: dict,
                training: dict, review: dict) -> str:
    mlflow.set_tracking_uri(training["tracking_uri"])
    # the ONNX file and its export.json: a re-export with the same file but another calibration logs anew
    file = None if export_dir is None else read_export(export_dir).get("file")  # none where PyTorch serves a blend
    tags = {"export_md5": "torch" if file is None else file_md5(export_dir / file),
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
    """-> (metrics, tags) of the check for the training run; the CPU that checked the export
    as serve.cpu.flags (its instruction-set flags, textclf.cpu) and serve.cpu.vnni."""
    metrics = {f"serve_{k}": serving[k] for k in ("agreement", "max_prob_diff", "accuracy", "batch_diff")
               if k in serving}
    tags = {"serve.format": serving["format"], "serve.requested": serving["requested"]}
    for key in ("fallback", "unconfirmed"):
        if serving.get(key):
            tags[f"serve.{key}"] = serving[key]
    if serving.get("cpu"):
        tags.update({"serve.cpu.platform": serving["cpu"]["platform"],
                     "serve.cpu.flags": " ".join(serving["cpu"]["flags"]) or "none",
                     "serve.cpu.vnni": str(has_vnni(serving["cpu"])).lower()})
    return metrics, tags
