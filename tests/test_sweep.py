"""python -m textclf.sweep: the space and its refusals before any training, the study's checks
(one search per study, one SQLite worker, n_trials in all), trials judged by their guards in a
real MLflow store, and (slow) an interrupted sweep resuming on the tiny RANDOM BERT. A study end
to end through real queued DVC experiments is docs/sweeps.md's block, run from the page
(`test_pages.py::test_the_experiment_and_sweep_pages_as_written`)."""
import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient

from textclf.errors import UserError
from textclf.config import SweepParams, load_params
from textclf.sweep.space import parse_space
from textclf.sweep.study import ask, counted, open_study, single_worker_lock
from textclf.sweep.trials import judge

from conftest import GIT_ENV, copy_repo, dvc, write_params


def space_of(tmp_path, space: dict):
    return parse_space(load_params(write_params(tmp_path / "params.yaml", sweep={"space": space})))


@pytest.mark.parametrize("space, message", [
    ({"train.lr_encodr": {"log_uniform": [1e-6, 1e-2]}}, "Did you mean 'lr_encoder'"),
    ({"trian.lr_encoder": {"log_uniform": [1e-6, 1e-2]}}, "Did you mean 'train'"),
    ({"sweep.n_trials": {"int": [1, 5]}}, "not a param a trial can set"),
    ({"train.lr_encoder": {"log_uniform": [1e-2, 1e-6]}}, "is empty; low must be below high"),
    ({"train.lr_encoder": {"log_uniform": [0, 1e-2]}}, "log_uniform needs low > 0"),
    ({"train.lr_encoder": {"log_uniform": [1e-6, 2.0]}}, "train.lr_encoder=2.0 is out of range"),
    ({"train.optimizer": {"choice": ["adamw", "sgd"]}}, "train.optimizer='sgd' must be one of"),
    ({"train.batch_size": {"choice": [8, "sixteen"]}}, "train.batch_size='sixteen' must be an integer"),
    ({"train.epochs": {"int": [1.5, 4]}}, "int needs [low, high], two integers"),
    ({"train.epochs": {"range": [1, 4]}}, "must be one of {log_uniform"),
    ({"train.optimizer": {"choice": []}}, "non-empty list"),
])
def test_a_bad_space_is_refused_in_one_line_before_any_training(tmp_path, space, message):
    with pytest.raises(UserError) as err:
        space_of(tmp_path, space)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_sampled_value_the_param_refuses_points_at_the_space_not_at_dash_s(tmp_path):
    """`-S train.epochs=...` cannot fix a range the sampler draws from (issue 55, rough edges)."""
    with pytest.raises(UserError) as err:
        space_of(tmp_path, {"train.epochs": {"int": [-1, 4]}})
    assert str(err.value).startswith("params.yaml: sweep.space.train.epochs may sample -1, which the param "
                                     "refuses (train.epochs=-1 is out of range: it must be >= 0")
    assert str(err.value).endswith(": narrow sweep.space.train.epochs.") and "-S" not in str(err.value)


def test_the_space_gives_optuna_distributions_and_dvc_overrides(tmp_path):
    dims = space_of(tmp_path, {"train.lr_encoder": {"log_uniform": [1e-6, 1e-2]},
                               "model.textcnn.num_filters": {"int": [8, 64]},
                               "train.optimizer": {"choice": ["adamw", "adam"]}})
    assert [d.distribution().__class__.__name__ for d in dims] == ["FloatDistribution", "IntDistribution",
                                                                    "CategoricalDistribution"]
    assert dims[0].distribution().log and dims[0].override(3e-5) == "train.lr_encoder=3e-05"
    assert dims[1].override(16) == "model.textcnn.num_filters=16"


def study_of(tmp_path, **changes):
    cfg = SweepParams(**{"n_trials": 3, **changes})
    dims = parse_space(load_params(write_params(tmp_path / "params.yaml", sweep={"space": cfg.space})))
    return cfg, dims, f"sqlite:///{tmp_path / 'optuna.db'}"


def test_a_study_is_one_search_and_takes_n_trials_in_all(tmp_path):
    cfg, dims, url = study_of(tmp_path)
    study = open_study(cfg, dims, ["tokenize.max_length=64"], url, join=False)
    with pytest.raises(UserError, match="exists with another fixed"):
        open_study(cfg, dims, [], url, join=False)
    (tmp_path / "other").mkdir()
    other, other_dims, _ = study_of(tmp_path / "other", space={"train.lr_head": {"uniform": [1e-4, 1e-2]}})
    with pytest.raises(UserError, match="exists with another space"):
        open_study(other, other_dims, ["tokenize.max_length=64"], url, join=False)
    with pytest.raises(UserError, match="--join needs a study other machines reach"):
        open_study(cfg, dims, [], url, join=True)
    trials = [ask(study, cfg, dims) for _ in range(4)]
    assert [t is None for t in trials] == [False, False, False, True]  # the fourth is past n_trials
    assert len(counted(study)) == 3 and trials[0].user_attrs["experiment"] == "lr-t0"
    assert 1e-6 <= trials[0].params["train.lr_encoder"] <= 1e-2


def test_a_resumed_study_does_not_draw_its_first_trials_again(tmp_path):
    """A resumed sweep's sampler restarted from sweep.seed: trial 2 retrained trial 0's exact
    learning rate. Reopened, it draws on; a new study with the same seed still draws the same."""
    cfg, dims, url = study_of(tmp_path, n_trials=4)
    first = [ask(open_study(cfg, dims, [], url, join=False), cfg, dims).params for _ in range(2)]
    resumed = ask(open_study(cfg, dims, [], url, join=False), cfg, dims).params
    assert resumed not in first
    (tmp_path / "again").mkdir()
    again_cfg, again_dims, again_url = study_of(tmp_path / "again", n_trials=4)
    assert ask(open_study(again_cfg, again_dims, [], again_url, join=False), again_cfg, again_dims).params == first[0]


def test_a_sqlite_study_takes_one_worker(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    held = single_worker_lock(url, "lr", tmp_path)
    with pytest.raises(UserError, match="another sweep of study 'lr' is running on this machine"):
        single_worker_lock(url, "lr", tmp_path)
    held.close()
    single_worker_lock(url, "lr", tmp_path).close()  # free again
    assert single_worker_lock("postgresql://h/db", "lr", tmp_path) is None  # PostgreSQL: many


def test_a_trial_with_a_guard_alarm_failed_and_a_warning_is_listed(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("textclf")
    for name, collapse in (("lr-t0", "collapsed"), ("lr-t1", "recovered")):
        run = client.create_run(exp, tags={"dvc.exp_name": name, "guard.collapse": collapse,
                                           "guard.load_audit": "pass"})
        for epoch, f1 in ((1, 0.2), (2, 0.6), (3, 0.5)):
            client.log_metric(run.info.run_id, "val_macro_f1", f1, step=epoch)
        client.log_metric(run.info.run_id, "kept_epoch", 2)
    alarm = judge(client, exp, "lr-t0", "Success", "val_macro_f1")
    assert alarm.value is None and alarm.reason == "guard alarm: collapse=collapsed"
    kept = judge(client, exp, "lr-t1", "Success", "val_macro_f1")
    assert kept.value == 0.6 and kept.warnings == ["collapse=recovered"]  # the kept epoch's, not the last
    failed = judge(client, exp, "lr-t1", "Failed", "val_macro_f1")
    assert failed.value is None and failed.reason == "the experiment lr-t1 failed (dvc queue logs lr-t1)"
    stopped = judge(client, exp, "lr-t0", "Failed", "val_macro_f1")  # a guard that failed the stage
    assert stopped.reason == "guard alarm: collapse=collapsed"
    assert "no training run in the tracking store" in judge(client, exp, "lr-t9", "Success", "val_macro_f1").reason


def sweep_repo(tmp_path, bert, **sweep) -> tuple:
    """A repo copy on the tiny random BERT with `sweep` params, committed -> (repo, env)."""
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", model={"name": str(bert)}, tokenize={"max_length": 64},
                 train={"epochs": 1, "lr_head": 1e-2},
                 sweep={"space": {"train.lr_encoder": {"log_uniform": [1e-5, 1e-1]}}, **sweep})
    env = {**os.environ, **GIT_ENV, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run(["git", "commit", "-qam", "sweep"], cwd=repo, check=True, env=env)
    return repo, env


def test_trials_register_no_model_version_unless_told_and_a_sampled_param_is_not_fixed(tmp_path):
    from textclf.sweep.__main__ import fixed_params
    dims = space_of(tmp_path, {"train.lr_encoder": {"log_uniform": [1e-6, 1e-2]}})
    assert fixed_params(["tokenize.max_length=64"], dims) == ["tokenize.max_length=64", "evaluate.register=false"]
    assert fixed_params(["evaluate.register=true"], dims) == ["evaluate.register=true"]
    for bad, message in (("train.lr_encoder=1e-5", "is in sweep.space"), ("max_length", "give key=value")):
        with pytest.raises(UserError, match=message):
            fixed_params([bad], dims)


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_with_the_same_command(tmp_path, tiny_random_bert):
    """Ctrl-C while the first trial runs: the sweep exits 130, the trial is stopped and not
    counted; the same command then runs n_trials that count, the interrupted one not among them."""
    repo, env = sweep_repo(tmp_path, tiny_random_bert, n_trials=2, parallel=1)
    cmd = [sys.executable, "-m", "textclf.sweep"]
    with open(tmp_path / "first.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "Running" not in dvc(repo, "queue", "status") and time.monotonic() < deadline:
        time.sleep(1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, (tmp_path / "first.log").read_text()[-2000:]
    done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads((repo / "reports" / "sweep.json").read_text())
    assert [t["experiment"] for t in found["trials"]] == ["lr-t1", "lr-t2"]  # lr-t0 was interrupted
    assert found["complete"] + found["failed"] == 2


def test_the_summary_lists_every_counted_trial_and_draws_optunas_figures(tmp_path):
    from textclf.sweep.summary import figures, markdown, summary
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for value in (0.8, 0.9, 0.85):
        trial = study.ask({"train.lr_encoder": optuna.distributions.FloatDistribution(1e-6, 1e-2, log=True)})
        study.tell(trial, value)
    alarm = study.ask()
    alarm.set_user_attr("reason", "guard alarm: collapse=collapsed")
    study.tell(alarm, state=optuna.trial.TrialState.FAIL)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # interrupted: no reason, not listed
    found = summary(study, "val_macro_f1")
    assert (found["complete"], found["failed"], found["best"]["trial"]) == (3, 1, 1)
    assert "| 3 | None |  | failed | guard alarm: collapse=collapsed |" in markdown(found)
    made = figures(study, tmp_path, "train.lr_encoder")
    assert [p.name for p in made] == ["optimization_history.png", "param_importances.png", "slice.png"]
    assert all(p.stat().st_size > 1000 for p in made)
