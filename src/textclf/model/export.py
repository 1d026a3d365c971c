"""Export a trained classifier to ONNX, float32 or with int8 weights, for ONNX Runtime.

torch.onnx's TorchScript exporter (dynamo=False): identical logits (max difference ~1e-6 on
MiniLM), 1.5 s, and no dependency beyond torch and onnx, where the dynamo exporter takes 6 s and
needs onnxscript. The encoder is switched to eager attention first: PyTorch's
scaled_dot_product_attention exports as a graph ONNX Runtime's int8 kernels gain little on (int8
34 docs/s on 2 cores), eager attention's matmuls as one they quantize well (67 docs/s; fp32 35
both ways; docs/benchmarks.md). Both formats give a text the same probabilities whatever else is
in its batch (measured: exactly; SAME_ANSWER_ATOL): int8 quantizes each token row's activations
with its own scale (model/quantize.py), and keeps the float32 file beside it: on many classes
with small margins (Debian's fortunes, 42 classes) no int8 variant measured reached
serve.min_agreement, and the export stage's check then keeps float32 rather than PyTorch
(export.check: decided on validation, so every path loads the same format).
"""
from __future__ import annotations

import logging
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from textclf.errors import UserError
from textclf.files import atomic_path, read_json, write_json
from textclf.config import load_params
from textclf.model.calibration import load as load_calibration
from textclf.model.checksums import verify_folder, write_checksums
from textclf.model.exported import BASELINE_FILES, BLEND_KEY, EXPORT_FILE, ONNX_FILES, TOKENIZER_FILE, read_export
from textclf.model.modeling import is_multilabel_model, load_classifier, load_thresholds, load_tokenizer, pad_id
from textclf.model.quantize import quantize_rows

log = logging.getLogger(__name__)
OPSET = 17
AXES = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
        "logits": {0: "batch"}}


def _eager_attention(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, PreTrainedModel):
            module.set_attn_implementation("eager")


def export_float(model: nn.Module, path: Path) -> None:
    """The classifier -> an ONNX graph (input_ids, attention_mask) -> logits, with dynamic
    batch and sequence axes."""
    _eager_attention(model)
    ids = (torch.arange(2 * 16).reshape(2, 16) % 50 + 1000).long()  # (B, T): any in-vocab ids
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0  # a padded row, so the traced graph masks
    with warnings.catch_warnings():  # the exporter's deprecation and tracer notes, not the user's
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, mask), str(path), dynamo=False, opset_version=OPSET,
                          input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          dynamic_axes=AXES)


def quantize_int8(source: Path, target: Path) -> None:
    """int8 weights (a scale per output channel) and int8 activations with a scale per token
    row, so that a text's answer does not depend on its batch. ONNX Runtime's dynamic
    quantization, shipped before, took one activation scale per batch, padding included: a
    text's probability moved by up to 0.1 with its neighbours (issue 51). Per row it agrees
    with PyTorch as well or better (BBC 99.1 %, fortunes 96.6 % against 99.4 % and 93.7 %) at
    0.95x its speed; static QDQ scales did worse on both (docs/benchmarks.md)."""
    log.info("quantized %d MatMuls to int8 with per-row activation scales", quantize_rows(source, target))


def export_model(model_dir: str | Path, out_dir: str | Path, fmt: str, review: dict | None = None,
                 calibrate: Callable[[Path, dict], dict] | None = None,
                 check: Callable[[Path, dict], dict] | None = None) -> dict:
    """models/model -> out_dir holding ONNX_FILES[fmt], tokenizer.json and export.json; int8
    keeps the float32 file too (export.json's `fallback`); for serve.format torch only
    export.json, which says so. `review` ({coverage, review_below}: serve.*) is recorded as
    export.json's `review`: every path that loads the folder answers with it. A single-label
    model's calibration is the PyTorch model's, unless `calibrate(folder, export.json)` (the
    export stage's: textclf.export.check) rewrites it as each format's own.
    `check(folder, export.json)` (the export stage's: export.check.export_check) keeps
    the format that passes its check on validation, calibrated, and records it as `format`:
    what every path loads; with the baseline blended in where that scores better, for
    serve.format torch too. Written atomically -> export.json."""
    model_dir = Path(model_dir)
    params = read_json(model_dir / "params.json")
    with atomic_path(out_dir, folder=True) as tmp:
        meta: dict = {"format": fmt, **({"review": review} if review is not None else {})}
        if fmt in ONNX_FILES:
            model, labels = load_classifier(model_dir)
            export_float(model, tmp / ONNX_FILES["onnx"])
            if fmt == "onnx-int8":  # the float32 file too: the export check keeps it when int8 disagrees
                quantize_int8(tmp / ONNX_FILES["onnx"], tmp / ONNX_FILES[fmt])
            shutil.copyfile(model_dir / TOKENIZER_FILE, tmp / TOKENIZER_FILE)
            meta.update(file=ONNX_FILES[fmt], labels=labels, head=params["model"]["head"],
                        max_length=params["tokenize"]["max_length"],
                        truncation=params["tokenize"]["truncation"],
                        pad_id=pad_id(load_tokenizer(str(model_dir))), opset=OPSET,
                        torch=torch.__version__.split("+")[0])
            if fmt == "onnx-int8":
                meta["fallback"] = {"format": "onnx", "file": ONNX_FILES["onnx"]}
            if is_multilabel_model(model):  # sigmoid per label, cut at its threshold (onnx_predictor)
                meta.update(task="multilabel", thresholds=load_thresholds(model_dir, labels).tolist())
            elif (calibration := load_calibration(model_dir)) is not None:  # applied as the folder's
                meta["calibration"] = calibration.to_dict()
            if meta["truncation"] == "chunks":  # only then: other exports stay as they were
                meta.update(stride=params["tokenize"]["stride"], chunk_pooling=params["model"]["chunk_pooling"])
            log.info("exported %s as %s (%.1f MB)", model_dir, meta["file"],
                     (tmp / meta["file"]).stat().st_size / 1e6)
        write_json(tmp / EXPORT_FILE, meta)
        write_checksums(tmp)  # last: every file of the folder, whichever the format wrote
        if calibrate is not None and "calibration" in meta:  # in tmp: the folder appears calibrated or not at all
            meta = calibrate(tmp, meta)
        if check is not None:  # in tmp too: the folder appears decided (and blended) or not at all
            meta = check(tmp, meta)
    return meta


def format_folder(export_dir: str | Path, fmt: str, out: str | Path) -> Path:
    """One format of an export alone in `out`: its ONNX file, tokenizer.json, an export.json
    naming that file and format, with that format's own calibration (no fallback), and
    checksums.json -> out. What evaluate checks and logs, so that a logged model says which
    file it runs and carries no other. The source is verified first: a damaged file is
    refused, never copied under a new checksum."""
    verify_folder(export_dir, [EXPORT_FILE])
    meta = read_export(export_dir)
    files = {meta["format"]: meta.get("file"), **({meta["fallback"]["format"]: meta["fallback"]["file"]}
                                                  if meta.get("fallback") else {})}
    if not files.get(fmt):
        raise UserError(f"{export_dir} holds no {fmt} model (it holds {', '.join(files)}): rerun "
                        "`dvc repro export`.")
    verify_folder(export_dir, [files[fmt], TOKENIZER_FILE])  # what is copied, not the other format
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    blend = BASELINE_FILES if meta.get(BLEND_KEY) else ()  # the baseline the blend serves beside it
    verify_folder(export_dir, blend)
    for name in (files[fmt], TOKENIZER_FILE, *blend):
        shutil.copyfile(Path(export_dir) / name, out / name)
    # the fallback's own calibration; an export from before formats had their own: the top-level one
    own = meta["fallback"] if fmt != meta["format"] else meta
    calibration = own.get("calibration", meta.get("calibration"))
    write_json(out / EXPORT_FILE, {**{k: v for k, v in meta.items() if k not in ("fallback", "calibration")},
                                   "format": fmt, "file": files[fmt],
                                   **({"calibration": calibration} if calibration else {})})
    write_checksums(out)
    return out


@dataclass(frozen=True)
class ExportPaths:
    """What the export stage reads and writes, as its command line names them."""
    params: str
    model_dir: str
    out: str  # written: the exported folder


def run_export(paths: ExportPaths, check: Callable[[Path, dict], dict] | None = None) -> None:
    """The stage: the trained model in serve.format, beside models/model, carrying the review
    its answers are given with (serve.coverage, serve.review_below), the format served and its
    calibration decided by `check` (export_model)."""
    serve = load_params(paths.params).serve
    export_model(paths.model_dir, paths.out, serve.format,
                 review={"coverage": serve.coverage, "review_below": serve.review_below}, check=check)
