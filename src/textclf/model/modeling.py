"""Build, save and load the three classifier shapes, reporting which parameters are new.

A model folder holds the encoder (or the whole HF model) as safetensors with the label
map in config.json, `head.safetensors` for custom heads, the tokenizer, params.json: the
params that built it, and checksums.json: every file's sha256, checked at load (model.checksums).
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

from textclf.config import ModelParams, TokenizeParams, params_file, parse_section
from textclf.model.calibration import Calibration, save as save_calibration
from textclf.model.checksums import verify_folder, write_checksums
from textclf.model.heads import PooledClassifier, SequenceClassifier, TextCNNClassifier
from textclf.errors import UserError
from textclf.files import read_json, write_json
from textclf.model_source import hub_offline, not_found, resolve_model_name

HEAD_FILE = "head.safetensors"
THRESHOLDS_FILE = "thresholds.json"  # multi-label: {label: threshold}, tuned on validation
MULTI_LABEL = "multi_label_classification"  # transformers' problem_type for sigmoid outputs


def load_tokenizer(name: str):
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(name), local_files_only=hub_offline())
    except OSError as err:
        raise not_found(name, err) from None
    if not tokenizer.is_fast:
        raise UserError(f"model.name={name!r} has no fast tokenizer; pick a model that ships "
                         "tokenizer.json.")
    return tokenizer


def pad_id(tokenizer) -> int:
    """The id batches are padded with: the tokenizer's, else 0 (its padding is masked out,
    so only a real token id matters, not which one)."""
    return int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else 0


def _label_kwargs(labels: list[str], multilabel: bool = False) -> dict:
    """The label map in config.json; multi-label models say so in transformers' problem_type,
    which every reader of the folder (predict, serving, export) goes by."""
    return {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)},
            **({"problem_type": MULTI_LABEL} if multilabel else {})}


@contextlib.contextmanager
def quiet_loading():
    """transformers' load report ("classifier.weight | MISSING", 8 lines) and its progress bar,
    silenced while a model loads: the head is new by design, and load_audit judges what was not
    loaded in one line of its own. A healthy run then says nothing alarming."""
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


def _load(auto_cls, cfg: ModelParams, labels: list[str], multilabel: bool) -> tuple[nn.Module, set[str]]:
    """-> (model, names of parameters NOT loaded from the checkpoint)."""
    path = resolve_model_name(cfg.name)
    if cfg.init == "config":  # the classic mistake, kept on purpose: a random encoder
        model = auto_cls.from_config(AutoConfig.from_pretrained(path, local_files_only=hub_offline(),
                                                              **_label_kwargs(labels, multilabel)))
        return model, {n for n, _ in model.named_parameters()}
    try:
        with quiet_loading():
            model, info = auto_cls.from_pretrained(path, output_loading_info=True, use_safetensors=True,
                                                   local_files_only=hub_offline(), **_label_kwargs(labels, multilabel))
    except OSError as err:
        raise not_found(cfg.name, err) from None
    mismatched = {m[0] if isinstance(m, tuple) else m for m in info.get("mismatched_keys", ())}
    return model, set(info["missing_keys"]) | mismatched


def build_model(cfg: ModelParams, labels: list[str], multilabel: bool = False) -> tuple[nn.Module, set[str]]:
    """-> (classifier, names of its parameters that were newly initialised)."""
    if cfg.head == "sequence_classification":
        hf, new = _load(AutoModelForSequenceClassification, cfg, labels, multilabel)
        return SequenceClassifier(hf, cfg.dropout), {f"hf.{n}" for n in new}
    encoder, new = _load(AutoModel, cfg, labels, multilabel)
    model = _custom_head(cfg, encoder, len(labels))
    head = {n for n, _ in model.named_parameters() if not n.startswith("encoder.")}
    return model, {f"encoder.{n}" for n in new} | head


def _custom_head(cfg: ModelParams, encoder: nn.Module, num_labels: int) -> nn.Module:
    if cfg.head == "pooled":
        return PooledClassifier(encoder, num_labels, cfg.pooling, cfg.dropout)
    return TextCNNClassifier(encoder, num_labels, cfg.hidden_layer, cfg.textcnn.kernel_sizes,
                             cfg.textcnn.num_filters, cfg.dropout)


def encoder_param_names(model: nn.Module) -> set[str]:
    ids = {id(p) for p in model.encoder.parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def is_multilabel_model(model: nn.Module) -> bool:
    """A classifier build_model or load_classifier made -> whether its outputs are per-label sigmoids."""
    return getattr(model.encoder.config, "problem_type", None) == MULTI_LABEL


def save_model(model: nn.Module, folder: Path, tokenizer, params: dict,
               thresholds: dict[str, float] | None = None, calibration: Calibration | None = None) -> None:
    """The model folder; a multi-label model's `thresholds` ({label: threshold}) and a
    single-label model's `calibration` (calibration.json) beside it."""
    folder = Path(folder)
    if thresholds is not None:
        write_json(folder / THRESHOLDS_FILE, thresholds)
    if calibration is not None:
        save_calibration(calibration, folder)
    if isinstance(model, SequenceClassifier):
        model.hf.save_pretrained(folder)
    else:
        model.encoder.save_pretrained(folder)
        head = {n: p.detach().contiguous() for n, p in model.state_dict().items()
                if not n.startswith("encoder.")}
        save_file(head, str(folder / HEAD_FILE))
    tokenizer.save_pretrained(folder)
    write_json(folder / "params.json", {s: dataclasses.asdict(p) for s, p in params.items()})
    write_checksums(folder)  # last: over every file above


def folder_params(folder: str | Path) -> tuple[TokenizeParams, ModelParams]:
    """The tokenize and model params a model folder was trained with (its params.json), so
    that predicting windows and pools as training did; a key an older folder lacks takes its
    default (tokenize.stride, model.chunk_pooling: only chunks reads them)."""
    saved = read_json(Path(folder) / "params.json")
    with params_file(Path(folder) / "params.json"):
        return parse_section("tokenize", saved["tokenize"]), parse_section("model", saved["model"])


def load_classifier(folder: str | Path) -> tuple[nn.Module, list[str]]:
    """A model folder written by the train stage -> (model in eval mode, labels), its files
    first checked against its checksums (every PyTorch load: predict, the pyfunc, export,
    evaluate)."""
    folder = Path(folder)
    verify_folder(folder)
    with params_file(folder / "params.json"):
        cfg = parse_section("model", read_json(folder / "params.json")["model"])
    with quiet_loading():
        loaded = (AutoModelForSequenceClassification if cfg.head == "sequence_classification"
                  else AutoModel).from_pretrained(folder, use_safetensors=True)
    if cfg.head == "sequence_classification":
        model = SequenceClassifier(loaded, cfg.dropout)
    else:
        encoder = loaded
        model = _custom_head(cfg, encoder, encoder.config.num_labels)
        result = model.load_state_dict(load_file(str(folder / HEAD_FILE)), strict=False)
        missing = [k for k in result.missing_keys if not k.startswith("encoder.")]
        if missing or result.unexpected_keys:
            raise UserError(f"{folder / HEAD_FILE} does not match model.head={cfg.head!r} "
                             f"(missing {missing}, unexpected {result.unexpected_keys}); "
                             "retrain with `dvc repro train`.")
    config = model.encoder.config
    return model.eval(), [config.id2label[i] for i in range(config.num_labels)]


def load_thresholds(folder: str | Path, labels: list[str]) -> np.ndarray:
    """A multi-label model folder -> its (C,) thresholds in `labels` order."""
    path = Path(folder) / THRESHOLDS_FILE
    if not path.is_file():
        raise UserError(f"{folder} holds a multi-label model but no {THRESHOLDS_FILE} (the per-label "
                         "thresholds tuned on validation): retrain it with `dvc repro train`.")
    saved = read_json(path)
    if sorted(saved) != sorted(labels):
        raise UserError(f"{path} has thresholds for {sorted(saved)}, but the model's labels are "
                         f"{sorted(labels)}: retrain with `dvc repro train`.")
    return np.array([float(saved[label]) for label in labels])
