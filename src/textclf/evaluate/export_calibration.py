"""Each exported format calibrated on its own probabilities (the export stage): the validation
split scored through the format's OnnxPredictor, as it will be served, and fitted as train fits
the PyTorch model (textclf.model.temperature). export.json's `calibration` is then the served
format's own and int8's float32 fallback carries its own: a prediction set's coverage is a
guarantee for the probabilities it is cut from, and int8's differ from PyTorch's."""
from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from textclf.common import write_json
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.model.batching import Split, read_token_splits
from textclf.model.checksums import write_checksums
from textclf.model.export import format_folder
from textclf.model.exported import EXPORT_FILE
from textclf.model.temperature import fit

log = logging.getLogger(__name__)


def calibrator(tokens: str, splits: str) -> Callable[[Path, dict], dict]:
    """The export stage's `calibrate` (model.export.export_model): the validation split of
    `tokens`, read only when a format is calibrated (not for serve.format torch, a multi-label
    model or train.calibration none)."""
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
