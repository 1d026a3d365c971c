"""train.method setfit (issue 42): SetFit's pairs and loss, one step moving the encoder, the
logistic-regression head copied into the pooled head, the stage with its guards, export and
bad inputs. The training tests use the TINY RANDOM BERT (plumbing); docs/benchmarks.md has BBC."""
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
from accelerate import Accelerator

from textclf.errors import UserError
from textclf.config import load_params
from textclf.model.batching import Split
from textclf.model.heads import PooledClassifier
from textclf.model.modeling import load_tokenizer
from textclf.train.loop import TrainJob, make_scheduler
from textclf.train.setfit import contrastive_steps, cosine_loss, fit_head, sample_pairs

from conftest import copy_prepared, copy_reproduced, dvc, run_baseline, run_evaluate, run_train, write_params

SETFIT = {"model": {"head": "pooled", "pooling": "mean"},
          "train": {"method": "setfit", "setfit_iterations": 2, "epochs": 1, "lr_encoder": 1e-3}}


def test_pairs_give_each_document_one_partner_of_its_class_and_one_of_another_per_round():
    labels = np.array([0, 0, 1, 1, 1, 2])
    pairs = sample_pairs(labels, iterations=3, seed=0)
    assert pairs.shape == (2 * 3 * 6, 3)
    assert np.bincount(pairs[:, 0], minlength=6).tolist() == [6] * 6  # 2 pairs a round, 3 rounds
    same, other = pairs[pairs[:, 2] == 1], pairs[pairs[:, 2] == 0]
    assert (labels[same[:, 0]] == labels[same[:, 1]]).all()
    assert (labels[other[:, 0]] != labels[other[:, 1]]).all()
    assert (same[same[:, 0] == 5][:, 1] == 5).all()  # alone in its class: paired with itself
    assert np.array_equal(pairs, sample_pairs(labels, 3, seed=0))  # seeded
    assert not np.array_equal(pairs, sample_pairs(labels, 3, seed=1))
    with pytest.raises(UserError, match="at least two classes"):
        sample_pairs(np.array([4, 4]), 1, 0)


def test_the_loss_is_the_squared_error_of_the_cosine():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    b = torch.tensor([[2.0, 0.0], [0.0, 5.0], [-1.0, 0.0], [4.0, 3.0]])
    same = torch.tensor([1, 0, 1, 0])
    # cosines 1, 0, -1, 0.96 -> errors 0, 0, 4, 0.9216
    assert cosine_loss(a, b, same).item() == pytest.approx((0 + 0 + 4 + 0.9216) / 4)


def tiny_job(tiny_random_bert, labels: list[int], texts: list[str]) -> tuple[TrainJob, PooledClassifier]:
    from transformers import AutoModel

    torch.manual_seed(0)
    model = PooledClassifier(AutoModel.from_pretrained(tiny_random_bert), 3, "mean", dropout=0.0)
    tok = load_tokenizer(str(tiny_random_bert))
    split = Split([tok(t)["input_ids"] for t in texts], labels, [str(i) for i in range(len(texts))])
    cfg = load_params("params.yaml").train
    optimizer = torch.optim.AdamW([{"params": model.encoder.parameters(), "lr": 1e-3},
                                   {"params": model.classifier.parameters(), "lr": 1e-3}])
    job = TrainJob(model, optimizer, split, split, cfg, tok.pad_token_id, Accelerator(cpu=True))
    return job, model


TEXTS = ["shares rose at the bank", "the bank cut its rates", "the striker scored twice",
         "a late goal won the cup", "a new phone chip", "the laptop has a faster chip"]


def test_one_contrastive_step_moves_the_encoder_and_not_the_head(tiny_random_bert):
    job, model = tiny_job(tiny_random_bert, [0, 0, 1, 1, 2, 2], TEXTS)
    encoder = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    head = {k: v.clone() for k, v in model.classifier.state_dict().items()}
    pairs = sample_pairs(np.array([0, 0, 1, 1, 2, 2]), 1, 0)[:8]
    job = dataclasses.replace(job, params=dataclasses.replace(job.params, batch_size=8))
    loss = contrastive_steps(job, model, pairs, make_scheduler(job.optimizer, 1, job.params))
    assert np.isfinite(loss) and loss > 0
    assert any(not torch.equal(v, model.encoder.state_dict()[k]) for k, v in encoder.items())
    assert all(torch.equal(v, model.classifier.state_dict()[k]) for k, v in head.items())


def test_the_head_is_the_logistic_regression_on_the_embeddings(tiny_random_bert):
    from sklearn.linear_model import LogisticRegression

    job, model = tiny_job(tiny_random_bert, [0, 0, 1, 1, 2, 2], TEXTS)
    fit_head(job, model)
    model.eval()
    with torch.no_grad():
        batch = [torch.tensor([ids]) for ids in job.train.input_ids]
        emb = np.vstack([model.embed(b, torch.ones_like(b)).numpy() for b in batch])  # (6, H)
        ours = np.vstack([torch.softmax(model(b, torch.ones_like(b)), -1).numpy() for b in batch])
    reference = LogisticRegression(max_iter=1000).fit(emb, [0, 0, 1, 1, 2, 2]).predict_proba(emb)
    assert np.allclose(ours, reference, atol=1e-4)


def test_two_classes_get_a_two_logit_head_with_the_regressions_probabilities(tiny_random_bert):
    job, model = tiny_job(tiny_random_bert, [0, 0, 0, 1, 1, 1], TEXTS)
    model.classifier = torch.nn.Linear(model.classifier.in_features, 2)
    fit_head(job, model)
    with torch.no_grad():
        ids = torch.tensor([job.train.input_ids[0]])
        p = torch.softmax(model(ids, torch.ones_like(ids)), -1)
    assert p.shape == (1, 2) and p[0, 0] > 0.5  # its training document, its class


def test_the_setfit_stage_passes_its_guards_and_its_export_agrees(tmp_path, prepared_tiny, monkeypatch):
    p = copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    write_params(tmp_path / "params.yaml", serve={"format": "onnx"}, **SETFIT)
    run_train(p)
    curve = pd.read_csv(tmp_path / "curve.csv")
    assert curve["epoch"].tolist() == [1]  # the head is fitted once: one validation row
    guards = json.loads((tmp_path / "guards.json").read_text())
    assert guards["load_audit"]["status"] == guards["weight_movement"]["status"] == "pass"
    assert "encoder relative change" in guards["weight_movement"]["message"]
    run_baseline(p)
    run_evaluate(p)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["serving"]["format"] == "onnx" and metrics["serving"]["fallback"] is None
    assert metrics["serving"]["agreement"] == 1.0  # the exported model answers as PyTorch


@pytest.mark.parametrize("sections, says", [
    ({"model": {"head": "sequence_classification"}}, "set model.head: pooled and model.pooling: mean"),
    ({"model": {"pooling": "cls"}}, "set model.head: pooled and model.pooling: mean"),
    ({"train": {"encoder": "last_k"}}, "last_k is not supported"),
    ({"train": {"processes": 2}}, "train.method=setfit trains in one process"),
])
def test_what_setfit_cannot_do_is_one_line(tmp_path, prepared_tiny, monkeypatch, sections, says):
    p = copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    write_params(tmp_path / "params.yaml", **SETFIT)
    write_params(tmp_path / "params.yaml", **sections)
    with pytest.raises(UserError, match=says):
        run_train(p)


@pytest.mark.parametrize("sections, says", [
    ({"model": {"head": "sequence_classification"}}, "set model.head: pooled and model.pooling: mean"),
    ({"train": {"encoder": "last_k"}}, "last_k is not supported"),
    ({"ingest": {"task": "multilabel", "label_delimiter": "|"}}, "setfit is for one label per document"),
])
def test_what_setfit_cannot_do_is_refused_as_the_params_load(tmp_path, sections, says):
    """As ingest loads them, not 28-61 s later when train starts after four stages ran."""
    write_params(tmp_path / "params.yaml", **SETFIT)
    write_params(tmp_path / "params.yaml", **sections)
    with pytest.raises(UserError, match=says):
        load_params(tmp_path / "params.yaml")


@pytest.mark.slow
def test_setfit_through_dvc_repro_with_the_packaged_encoder(reproduced, tmp_path):
    """The real MiniLM: `dvc repro` after switching a reproduced demo to setfit retrains, exports,
    checks, evaluates, reports and registers it like any model."""
    repo = copy_reproduced(reproduced, tmp_path / "repo")
    write_params(repo / "params.yaml", model={"head": "pooled", "pooling": "mean"},
                 train={"method": "setfit", "setfit_iterations": 4, "epochs": 1, "batch_size": 16, "lr_encoder": 2e-5})
    out = dvc(repo, "repro", env={"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'setfit.db'}"})
    assert "Running stage 'train'" in out and "Running stage 'report'" in out
    assert json.loads((repo / "models" / "model" / "params.json").read_text())["train"]["method"] == "setfit"
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())
    assert all(metrics["guards"][g] == "pass" for g in ("load_audit", "optimizer_coverage", "weight_movement"))
    assert metrics["serving"]["fallback"] is None and metrics["accuracy"] >= 0.75  # 8 test documents, 5 classes
    assert metrics["registry"]["version"] >= 1
    assert "setfit" in (repo / "reports" / "report.md").read_text()


def test_a_rerun_with_the_finished_checkpoint_restores_it_instead_of_training(tmp_path, prepared_tiny,
                                                                              monkeypatch, caplog):
    """The checkpoint saved after the head (kept here; kept too when the store fails after
    training) lets the same stage finish without the pairs again, with the same weights."""
    from safetensors.torch import load_file

    p = copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    write_params(tmp_path / "params.yaml", **SETFIT)
    write_params(tmp_path / "params.yaml", train={"keep_checkpoint": True})
    run_train(p + ["--checkpoint-dir", "ck"])
    first = load_file(tmp_path / "model" / "model.safetensors")
    with caplog.at_level("INFO"):
        run_train(p + ["--checkpoint-dir", "ck"])
    assert "restored the finished training from its checkpoint" in caplog.text
    second = load_file(tmp_path / "model" / "model.safetensors")
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_an_interrupted_contrastive_phase_says_it_starts_again(tiny_random_bert, monkeypatch, caplog):
    """Issue 60, item 10: an interrupted setfit said "rerun ... to resume", but its contrastive
    phase keeps no checkpoint: a rerun starts it again from its first pair, and the line says so."""
    import signal

    from textclf import signals, stage
    from textclf.train.setfit import CONTRASTIVE_LOST, fit_setfit
    job, _ = tiny_job(tiny_random_bert, [0, 0, 1, 1, 2, 2], TEXTS)
    monkeypatch.setitem(signals._signals, "pending", signal.SIGTERM)  # a signal arrived: the next step stops
    with pytest.raises(signals.Interrupted) as err:
        fit_setfit(job)
    assert err.value.after == CONTRASTIVE_LOST
    with caplog.at_level("ERROR"):
        assert stage._exit_status(err.value) == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM; setfit's contrastive phase keeps no checkpoint" in caplog.text
    assert "to resume" not in caplog.text
