"""LP-FT's probe head and train.budget_minutes (issue 59). Plumbing on the TINY RANDOM BERT
(`prepared`) and on a fake model whose steps sleep in proportion to their tokens."""
import json
import time

import numpy as np
import pandas as pd
import pytest
import torch
from accelerate.utils import set_seed
from mlflow.tracking import MlflowClient
from torch import nn

from stages import features as features_stage
from textclf.config import TrainParams, load_params
from textclf.inference.proba import predict_proba
from textclf.model.batching import Split, read_token_splits
from textclf.model.modeling import build_model
from textclf.train import loop, targets
from textclf.train.pace import StepPlan, step_plan, steps_within
from textclf.train.probe import feature_key, final_linear, init_from_probe, read_features
from textclf.train.selection import validation_scores

from conftest import run_train, write_params


def test_the_head_starts_where_the_logistic_regression_ended(prepared):
    """The features stage's features, the regression fitted on them and copied into the last
    layer: the model's validation answers before any step are the regression's."""
    tmp, p = prepared
    features_stage.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--out", "f.safetensors"])
    params = load_params(tmp / "params.yaml")
    found = read_features("f.safetensors", feature_key(params))
    splits, labels = read_token_splits("t.parquet", "sp.parquet", names=("train", "validation"))
    assert found["train"].shape == (len(splits["train"].input_ids), 32)  # the tiny BERT's pooler output
    set_seed(params.train.seed)
    model, _ = build_model(params.model, labels)
    scores = init_from_probe(found, model, len(labels), splits, None, "mean")
    probs = predict_proba(model, splits["validation"].input_ids, 16, 0, torch.device("cpu"))
    assert validation_scores(probs, splits["validation"]) == pytest.approx(scores, abs=1e-6)
    linear = final_linear(model, len(labels))
    assert linear is model.hf.classifier
    assert scores["val_accuracy"] > 1 / len(labels)  # the regression learnt something: not a random head


def test_the_train_stage_starts_from_the_probe(prepared):
    """Through the stage: a step at a vanishing learning rate leaves the model where the probe
    put it, so epoch 1's validation accuracy is the probe's (logged as probe_val_accuracy)."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", train={"max_steps": 1, "lr_encoder": 1e-12, "lr_head": 1e-12,
                                             "fail_on_collapse": False, "min_encoder_change": 0.0})
    features_stage.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--out", "f.safetensors"])
    run_train(p + ["--features", "f.safetensors"])
    run = MlflowClient().get_run(json.loads((tmp / "run.json").read_text())["run_id"])
    curve = pd.read_csv(tmp / "curve.csv")
    assert curve["val_accuracy"].iloc[0] == pytest.approx(run.data.metrics["probe_val_accuracy"], abs=1e-9)
    assert run.data.metrics["cpu_seconds"] > 0 and run.data.metrics["train_seconds"] > 0  # what it cost


def test_features_made_for_another_model_are_refused(prepared, tmp_path):
    tmp, p = prepared
    features_stage.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--out", "f.safetensors"])
    other = load_params(write_params(tmp_path / "other.yaml", train={"seed": 7}))
    with pytest.raises(Exception, match="dvc repro features"):
        read_features("f.safetensors", feature_key(other))


def test_the_kept_epochs_validation_pass_is_not_run_twice(prepared, monkeypatch):
    """Train validates once an epoch and reuses the kept epoch's probabilities (it ran one more
    pass over validation after the last step: minutes on a large split, outside the estimate)."""
    def second_pass(*args, **kwargs):
        raise AssertionError("validation scored again after training")
    monkeypatch.setattr("textclf.train.run.validation_proba", second_pass)
    run_train(prepared[1])


def test_steps_within_counts_every_validation():
    plan = StepPlan(total=600, per_epoch=100, budget_s=60)
    # 1 s a step, 10 s a validation: 60 s left hold 50 more steps and one validation
    assert steps_within(60, 5, plan, 1.0, 10.0) == 55
    # 300 s: 270 steps and 3 validations (after steps 100, 200 and the last)
    assert steps_within(300, 0, plan, 1.0, 10.0) == 270
    assert steps_within(205, 0, plan, 1.0, 10.0) == 185  # 2 validations: the second epoch cut short
    assert steps_within(1e9, 0, plan, 1.0, 10.0) == 600  # never beyond the epochs' cap
    assert steps_within(1, 7, plan, 1.0, 10.0) == 7  # too small a budget: stop where it is
    # 2 validations done: 160 s hold 140 more steps and 2 validations (after step 300 and the last)
    assert steps_within(160, 200, plan, 1.0, 10.0, validated=2) == 340
    assert step_plan(0, 0, 20, 100).decided is False  # epochs 0: the budget decides
    assert step_plan(3, 0, 20, 100).total == 300 and step_plan(3, 0, 20, 100).decided  # explicit epochs win
    assert step_plan(0, 50, 20, 100).total == 50 and step_plan(0, 50, 20, 100).decided  # so does max_steps


class SlowModel(nn.Module):
    """Logits from mean embeddings; each forward sleeps SECONDS_A_TOKEN per padded token
    slot in training (a step: forward and backward) and a third of it in eval, as a real
    encoder's cost grows with its tokens."""
    SECONDS_A_TOKEN = 1.0e-3  # far above the rest of a step, so that a loaded machine does not move it

    def __init__(self, classes: int):
        super().__init__()
        self.encoder = nn.Embedding(100, 8)
        self.classifier = nn.Linear(8, classes)

    def forward(self, input_ids, attention_mask):
        time.sleep(self.SECONDS_A_TOKEN * input_ids.numel() * (1 if self.training else 1 / 3))
        return self.classifier(self.encoder(input_ids).mean(dim=1))


def slow_split(n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    return Split(input_ids=[rng.integers(1, 100, size=int(k)).tolist() for k in rng.integers(10, 60, size=n)],
                 labels=rng.integers(0, 3, size=n).tolist())


class SlowStartModel(SlowModel):
    """A SlowModel whose first SLOW_STEPS training steps cost SLOWER times as much: a machine
    busy as the training starts, or the first batches' lengths unlike the rest."""
    SECONDS_A_TOKEN, SLOW_STEPS, SLOWER = 1.0e-4, 8, 4

    def forward(self, input_ids, attention_mask):
        if self.training and self.SLOW_STEPS > 0:
            self.SLOW_STEPS -= 1
            time.sleep(self.SECONDS_A_TOKEN * input_ids.numel() * (self.SLOWER - 1))
        return super().forward(input_ids, attention_mask)


def budget_run(model: nn.Module, budget: float, documents: int) -> tuple[loop.TrainJob, float, list[dict]]:
    """fit with train.budget_minutes `budget` on `documents` slow_split documents -> (the job,
    the seconds it took, the estimates said)."""
    cfg = TrainParams(epochs=0, budget_minutes=budget, batch_size=8, seed=0)
    estimates: list[dict] = []
    job = loop.TrainJob(model, torch.optim.AdamW(model.parameters(), 1e-3), slow_split(documents, 0),
                        slow_split(100, 1), cfg, 0, loop.make_accelerator("fp32"),
                        loop.Callbacks(on_estimate=lambda values, step: estimates.append(values)))
    started = time.perf_counter()
    loop.fit(job)
    return job, time.perf_counter() - started, estimates


def test_a_budget_is_measured_again_when_the_first_steps_misjudged_it(caplog):
    """The first steps 4 times slower than the rest: their pace plans a quarter of the budget's
    steps; measured again at a quarter of the budget, the training still ends within 15 % of
    it (it ended at about a third before), and says so."""
    budget = 0.2
    with caplog.at_level("INFO", logger="textclf.train.loop"):
        job, took, _ = budget_run(SlowStartModel(3), budget, 800)
    assert took == pytest.approx(budget * 60, rel=0.15)
    assert "measured again after" in caplog.text
    assert job.selector.last_epoch < 6  # the budget, not the epochs' cap, ended it


def test_a_budget_of_n_seconds_takes_n_seconds():
    """train.budget_minutes 0.2 (12 s) on steps that cost what their tokens cost: the training,
    validations included, ends within 15 % of the budget, and the estimate said after the
    timed steps (the cut plan's) is within 15 % of what it took."""
    budget = 0.2
    job, took, estimates = budget_run(SlowModel(3), budget, 400)
    assert took == pytest.approx(budget * 60, rel=0.15)
    assert estimates[0]["estimated_train_seconds"] == pytest.approx(took, rel=0.15)
    assert job.selector.last_epoch < 6  # the budget, not the epochs' cap, ended it
