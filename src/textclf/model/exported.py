"""What an exported model folder (models/export) holds, for the exporter (model.export, torch)
and the ONNX predictor (inference.onnx_predictor, no torch): the ONNX file of its format,
tokenizer.json and export.json, which says how texts become the model's inputs."""
from __future__ import annotations

from pathlib import Path

from textclf.errors import UserError
from textclf.files import read_json

EXPORT_FILE = "export.json"
ONNX_FILES = {"onnx": "model.onnx", "onnx-int8": "model.int8.onnx"}  # serve.format -> file
TOKENIZER_FILE = "tokenizer.json"
BLEND_KEY = "blend"  # {weight, calibration, validation}: the baseline blended in (inference.blend); absent: none
BASELINE_FILES = ("baseline.json", "baseline.safetensors")  # the blend's baseline (model.linear_text)
TORCH_DIR = "model"  # where PyTorch serves a blend: the export folder's copy of the model folder


def read_export(folder: str | Path) -> dict:
    """export.json of an exported folder -> {format, file, labels, max_length, truncation,
    pad_id, head, ... and with chunks stride, chunk_pooling}; a folder that is not one fails
    in one line."""
    path = Path(folder) / EXPORT_FILE
    if not path.is_file():
        raise UserError(f"{folder} is not an exported model folder (no {EXPORT_FILE}); run "
                        "`dvc repro export` or pass models/model.")
    meta = read_json(path)
    if meta.get("format") in ONNX_FILES and not (Path(folder) / meta["file"]).is_file():
        raise UserError(f"{folder}: {meta['file']} is missing; rerun `dvc repro export`.")
    return meta
