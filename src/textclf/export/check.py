"""The export stage's check and calibration on the validation split. Which format the folder
serves is decided here, not in evaluate: a DVC stage cannot write into another's output, and
`predict models/export`, `--table`, REST and Spark must all answer with the format the logged
model runs (issue 61: the folder answered int8 where the registry served float32). So int8 is
checked against PyTorch on validation (evaluate.format_check: agreement, paired verdict, one
document per call); where it fails, the float32 export, else PyTorch; export.json's `format`
names what passed, with the CPU that checked it, and evaluate confirms it on test. Each ONNX
format is calibrated on its own validation probabilities, as served (textclf.model.temperature):
a prediction set's coverage is a guarantee for the probabilities it is cut from, and int8's
differ from PyTorch's."""
from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textclf.files import read_json, write_json
from textclf.config import load_params
from textclf.cpu import this_cpu
from textclf.evaluate.blend import choose_blend
from textclf.evaluate.format_check import answer_of, chain_result, check_format, torch_proba, truth_of
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.model.batching import Split, read_token_splits
from textclf.model.calibration import from_dict, load as load_calibration
from textclf.model.checksums import write_checksums
from textclf.model.export import format_folder
from textclf.model.exported import BLEND_KEY, EXPORT_FILE, TORCH_DIR
from textclf.model.modeling import THRESHOLDS_FILE, is_multilabel_model, load_classifier, load_thresholds
from textclf.model.temperature import fit

log = logging.getLogger(__name__)


def calibrator(tokens: str, splits: str) -> Callable[[Path, dict], dict]:
    """Calibration alone, without the check (model.export.export_model's `calibrate`; the
    stage runs export_check): the validation split of `tokens`, read only when a format is
    calibrated (not for serve.format torch, a multi-label model or train.calibration none)."""
    def calibrate(folder: Path, meta: dict) -> dict:
        validation = read_token_splits(tokens, splits, list(meta["labels"]), names=("validation",))[0]["validation"]
        return own_calibrations(folder, meta, validation)
    return calibrate


def own_calibrations(folder: Path, meta: dict, validation: Split) -> dict:
    """An export folder's export.json (meta) -> the same with each format's calibration fitted
    on its own validation probabilities (the fallback's under `fallback`), written with fresh
    checksums. A multi-label model's per-label thresholds stay PyTorch's (docs/calibration.md)."""
    formats = [meta["format"]] + ([meta["fallback"]["format"]] if meta.get("fallback") else [])
    y = np.asarray(validation.labels)
    fitted = {}
    with tempfile.TemporaryDirectory() as tmp:  # each format alone, as evaluate checks and serves it
        for fmt in formats:
            probs = OnnxPredictor(format_folder(folder, fmt, Path(tmp) / fmt)).proba_of_ids(
                validation.input_ids, validation.owner, desc=f"{fmt}: validation")  # (documents, C), raw
            fitted[fmt] = fit(probs, y).to_dict()
            log.info("%s calibrated on its own %d validation probabilities: temperature %.4f (PyTorch's %.4f)",
                     fmt, len(y), fitted[fmt]["temperature"], meta["calibration"]["temperature"])
    meta = {**meta, "calibration": fitted[meta["format"]]}
    if meta.get("fallback"):
        meta["fallback"] = {**meta["fallback"], "calibration": fitted[meta["fallback"]["format"]]}
    write_json(folder / EXPORT_FILE, meta)
    write_checksums(folder)
    return meta


@dataclass(frozen=True)
class BlendInputs:
    """What the blend reads (serve.blend): the baseline stage's saved model, and the corpus the
    validation texts come from. None in export_check: no blend is tried."""
    baseline: str
    corpus: str


def export_check(tokens: str, splits: str, model_dir: str, params: str,
                 blend: BlendInputs | None = None) -> Callable[[Path, dict], dict]:
    """The export stage's `check` (model.export.export_model): on the validation split of
    `tokens`, the format that serves (served_format), each ONNX format calibrated on its own
    probabilities where the model has a calibration, and the blend with the baseline where
    it scores better (serve.blend)."""
    def check(folder: Path, meta: dict) -> dict:
        cfg = load_params(params)
        wanted = cfg.serve.blend
        if meta["format"] == "torch" and (wanted == "off" or blend is None):
            return meta  # serve.format torch, and no blend to try: nothing to check
        if meta["format"] == "torch":  # no format to check: PyTorch's probabilities, for the blend
            model, labels = load_classifier(model_dir)
            validation = read_token_splits(tokens, splits, labels, names=("validation",))[0]["validation"]
            out = {**meta, "labels": labels}
            torch_probs = torch_proba(model, model_dir, validation, cfg.evaluate,
                                      is_multilabel_model(model), desc="PyTorch: validation")
        else:
            validation = read_token_splits(tokens, splits, list(meta["labels"]), names=("validation",))[0]["validation"]
            out, torch_probs = served_format(folder, meta, validation, model_dir, params)
        return with_blend(folder, out, validation, splits, wanted, blend, Served(model_dir, torch_probs))
    return check


@dataclass(frozen=True)
class Served:
    """The PyTorch model and its raw validation probabilities (served_format's): what the blend
    reads where PyTorch serves."""
    model_dir: str
    torch_probs: np.ndarray  # (documents, C)


def calibrated_validation(folder: Path, out: dict, validation: Split, served: Served) -> np.ndarray | None:
    """The served model's calibrated validation probabilities (documents, C): the ONNX
    format's with its own calibration, or PyTorch's with the training's; None: no calibration."""
    if out["format"] == "torch":
        calibration = load_calibration(served.model_dir)
        return None if calibration is None else calibration.apply(served.torch_probs)
    if "calibration" not in out:
        return None
    onnx = OnnxPredictor(folder)
    calibration = from_dict(out["calibration"], str(folder / EXPORT_FILE))  # the served format's own
    return calibration.apply(onnx.proba_of_ids(validation.input_ids, validation.owner, desc="blend: validation"))


def with_blend(folder: Path, out: dict, validation: Split, splits: str, wanted: str,
               blend: BlendInputs | None, served: Served) -> dict:
    """export.json (`out`) with the blend's decision under check.blend, and the blend itself
    (BLEND_KEY) where it is served; rewritten with fresh checksums where it changed. Where
    PyTorch serves, a served blend carries a copy of the PyTorch model (TORCH_DIR): the folder
    is then what serves, as an ONNX one is (inference.loading)."""
    why = ("serve.blend is off" if wanted == "off" else
           "the export stage was given no --baseline" if blend is None else
           "a multi-label model (its label sets are cut at thresholds of its own)"
           if out.get("task") == "multilabel" or (Path(served.model_dir) / THRESHOLDS_FILE).is_file() else None)
    p_model = None if why else calibrated_validation(folder, out, validation, served)
    if why is None and p_model is None:
        why = "the model has no calibration (train.calibration none)"
    if why or blend is None or p_model is None:
        if wanted != "off":
            log.info("serve.blend: not tried: %s", why)
        return out
    found = choose_blend(folder, p_model, np.asarray(validation.labels), list(out["labels"]),
                         validation.doc_ids or [], blend.baseline, blend.corpus, splits)
    out = {**out, "check": {**out.get("check", {}), "blend": {k: found[k] for k in ("served", "weight", "validation")}}}
    if found["served"]:
        out[BLEND_KEY] = {k: found[k] for k in ("weight", "calibration", "validation")}
        if out["format"] == "torch":  # the model beside its baseline (served_format verified it on loading)
            shutil.copytree(served.model_dir, folder / TORCH_DIR)
    write_json(folder / EXPORT_FILE, out)
    write_checksums(folder)
    return out


def served_format(folder: Path, meta: dict, validation: Split, model_dir: str,
                  params: str) -> tuple[dict, np.ndarray]:
    """An export folder holding serve.format (and int8's float32 fallback) -> the same folder
    holding only the first format of that chain that passes check_format on `validation`
    (none: PyTorch serves, export.json alone says so), export.json recording it as `format`,
    the one asked for as `requested`, each check and why a format is not served as `check`,
    and this CPU as `cpu`; rewritten with fresh checksums -> (export.json, PyTorch's raw
    validation probabilities: the blend's where PyTorch serves)."""
    cfg = load_params(params)
    model, labels = load_classifier(model_dir)
    thresholds = load_thresholds(model_dir, labels) if is_multilabel_model(model) else None
    torch_probs = torch_proba(model, model_dir, validation, cfg.evaluate, thresholds is not None,
                              desc="PyTorch: validation")  # (documents, C), raw
    answer, truth = answer_of(labels, thresholds), truth_of(validation.labels, labels, thresholds)
    if "calibration" in meta:  # each format's own, so the chosen one is served with it
        meta = own_calibrations(folder, meta, validation)
    chain = [meta["format"]] + ([meta["fallback"]["format"]] if meta.get("fallback") else [])
    checks = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in chain:  # the next format only when this one does not pass
            alone = format_folder(folder, fmt, Path(tmp) / fmt)
            checks.append(check_format(alone, validation.input_ids, truth, torch_probs, cfg.serve, cfg.evaluate,
                                       validation.owner, answer, split="validation"))
            if not checks[-1]["reasons"]:
                break
        result = chain_result(meta["format"], checks)
        for path in folder.iterdir():  # the folder holds what serves and nothing else
            path.unlink()
        if result["format"] == "torch":
            kept = {k: meta[k] for k in ("review", "labels") if k in meta} | {"format": "torch"}
        else:
            kept = read_json(Path(tmp) / result["format"] / EXPORT_FILE)
            for path in (Path(tmp) / result["format"]).iterdir():
                shutil.copyfile(path, folder / path.name)
    out = {**kept, "requested": meta["format"], "cpu": this_cpu(),
           "check": {"split": "validation", "documents": len(truth), "fallback": result["fallback"],
                     "checks": result["checks"]}}
    write_json(folder / EXPORT_FILE, out)
    write_checksums(folder)
    return out, torch_probs
