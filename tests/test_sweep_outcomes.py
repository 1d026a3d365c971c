"""A sweep trial's outcome beyond a plain training run: one that DVC restored from its
run-cache is scored from the run that trained it and said to be restored; a sweep whose trials
never beat chance says so (summary line, parent run, sweep.md). Real MLflow stores and Optuna
studies; (slow) two studies through real queued DVC experiments on the tiny random BERT."""
import json
import subprocess
import sys

import optuna
import pytest
from mlflow.tracking import MlflowClient

from textclf.config import SweepParams
from textclf.sweep.chance import chance
from textclf.sweep.study import tell
from textclf.sweep.summary import headline, markdown, summary, write
from textclf.sweep.trials import Outcome, judge, parent_run

from test_sweep import sweep_repo

LR = {"train.lr_encoder": optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)}
DEMO = {"train": {"business": 11, "entertainment": 13, "politics": 10, "sport": 11, "tech": 14},
        "validation": {"business": 3, "entertainment": 2, "politics": 4, "sport": 3, "tech": 1}}


def store_with_a_trained_trial(tmp_path):
    """An MLflow store holding study lr's parent run and its trial lr-t0's training run."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("textclf")
    run = client.create_run(exp, tags={"dvc.exp_name": "lr-t0", "guard.silent_class": "warn"}).info.run_id
    for epoch, f1 in ((1, 0.3), (2, 0.6)):
        client.log_metric(run, "val_macro_f1", f1, step=epoch)
    client.log_metric(run, "kept_epoch", 2)
    return client, exp, run


def test_a_trial_dvc_restored_from_its_run_cache_is_scored_from_the_run_that_trained_it(tmp_path):
    """Study B's trial B-t0 has lr-t0's params: DVC restores train, no run carries B-t0's name,
    and its metrics.json names lr-t0's run. The trial is complete with that run's score, has a
    child run of its own under B's parent (lr-t0's run stays lr's), and says it was restored."""
    client, exp, run = store_with_a_trained_trial(tmp_path)
    client.set_tag(run, "mlflow.parentRunId", parent_run(client, exp, "lr"))
    metrics = {"accuracy": 0.5, "mlflow": {"run_id": run}}
    outcome = judge(client, exp, "B-t0", "Success", "val_macro_f1", metrics)
    assert (outcome.value, outcome.restored_from, outcome.run_id) == (0.6, "lr-t0", run)
    assert outcome.warnings == ["silent_class=warn"]
    gone = judge(client, exp, "B-t0", "Success", "val_macro_f1", {"mlflow": {"run_id": "0" * 32}})
    assert gone.value is None and "restored the experiment B-t0's training from its run-cache" in gone.reason
    assert "no training run" in judge(client, exp, "B-t0", "Failed", "val_macro_f1", metrics).reason

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="B", direction="maximize")
    trial = study.ask(LR)
    trial.set_user_attr("experiment", "B-t0")
    parent = parent_run(client, exp, "B")
    tell(study, trial, outcome, client, exp, parent, SweepParams(study="B"))
    found = summary(study, "val_macro_f1")
    assert found["complete"] == 1 and found["best"]["restored_from"] == {"experiment": "lr-t0", "run_id": run}
    child = client.get_run(found["best"]["run_id"]).data
    assert child.tags["mlflow.parentRunId"] == parent and child.tags["sweep.restored_from"] == "lr-t0"
    assert child.tags["sweep.training_run"] == run and child.metrics["val_macro_f1"] == 0.6
    assert client.get_run(run).data.tags["mlflow.parentRunId"] != parent  # still study lr's trial
    assert "restored by DVC's run-cache from lr-t0's" in markdown(found)
    assert "(restored from lr-t0)" in markdown(found) and "restored by DVC's run-cache" in headline(found)


def test_chance_is_what_a_predictor_that_never_reads_the_texts_scores():
    assert chance("val_macro_f1", DEMO)["value"] == pytest.approx(0.2)  # 1/K beats always "politics"
    assert "always the majority class scores 0.0941" in chance("val_macro_f1", DEMO)["what"]
    shares = [3 / 13, 2 / 13, 4 / 13, 3 / 13, 1 / 13]
    import math
    assert chance("val_loss", DEMO)["value"] == pytest.approx(-sum(p * math.log(p) for p in shares))
    assert chance("val_loss", DEMO, "balanced") is None  # a weighted loss: another constant predictor
    multi = {"task": "multilabel", "documents": {"validation": 10}, "validation": {"a": 5, "b": 1}}
    assert chance("val_macro_f1", multi)["value"] == pytest.approx((2 * 0.5 / 1.5 + 2 * 0.1 / 1.1) / 2)
    assert chance("val_macro_f1", {"validation": {}}) is None


def study_with(values: list[float], bar: dict | None):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="lr", direction="maximize")
    for n, value in enumerate(values):
        trial = study.ask(LR)
        trial.set_user_attr("experiment", f"lr-t{n}")
        trial.set_user_attr("chance", bar)
        study.tell(trial, value)
    return study


def test_a_sweep_whose_trials_never_beat_chance_says_so(tmp_path):
    """The issue's sweep: its one complete trial scored val macro-F1 0.094 on five classes (what
    always "politics" scores; chance
    is 0.2) and was reported as best without a word."""
    bar = chance("val_macro_f1", DEMO)
    found = summary(study_with([0.094], bar), "val_macro_f1")
    assert found["learned"] is False and found["best"]["beats_chance"] is False
    assert "NO TRIAL BEAT CHANCE (0.2000, guessing in proportion to the 5 classes" in headline(found)
    md = markdown(found)
    assert md.splitlines()[2].startswith("**No complete trial beat chance.** The best scored val_macro_f1 0.0940")
    assert "| 0.0940 (below chance) |" in md
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("textclf")
    parent = parent_run(client, exp, "lr")
    write(study_with([0.094], bar), "val_macro_f1", tmp_path / "sweep.json", client, parent)
    data = client.get_run(parent).data
    assert data.tags["sweep.learned"] == "false" and data.metrics["chance_val_macro_f1"] == pytest.approx(0.2)
    assert "beat chance" in (tmp_path / "sweep.md").read_text()

    learned = summary(study_with([0.094, 0.5], bar), "val_macro_f1")
    assert learned["learned"] is True and "chance" not in headline(learned).lower()
    assert "beat chance" not in markdown(learned)
    assert summary(study_with([0.094], None), "val_macro_f1")["learned"] is None  # unknown: not claimed


@pytest.mark.slow
def test_a_study_rerun_under_another_name_is_restored_not_failed(tmp_path, tiny_random_bert):
    """The issue's reproduction: a 1-trial sweep as study lr, then the same as study B (same
    seed, so the same params): DVC restores B-t0's training from the run-cache. B ends with its
    trial complete, scored as lr-t0 was, marked restored; each trial's chance bar comes from its
    own commit's split counts."""
    repo, env = sweep_repo(tmp_path, tiny_random_bert, n_trials=1, parallel=1)
    for study in ("lr", "B"):
        params = (repo / "params.yaml").read_text().replace("study: lr", f"study: {study}", 1)
        (repo / "params.yaml").write_text(params)
        proc = subprocess.run([sys.executable, "-m", "textclf.sweep", "--out", f"reports/{study}.json"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = (json.loads((repo / "reports" / f"{s}.json").read_text()) for s in ("lr", "B"))
    assert second["complete"] == 1 and second["failed"] == 0, second
    restored = second["best"]
    assert restored["restored_from"] == {"experiment": "lr-t0", "run_id": first["best"]["run_id"]}
    assert restored["value"] == first["best"]["value"] and restored["params"] == first["best"]["params"]
    assert restored["chance"]["value"] == pytest.approx(0.2)  # the demo's five classes
    assert restored["beats_chance"] == (restored["value"] > 0.2)
    assert "restored by DVC's run-cache from lr-t0" in proc.stderr
    assert "restored from lr-t0" in (repo / "reports" / "B.md").read_text()
