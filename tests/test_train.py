"""Train + evaluate stages against a real MLflow store (SQLite in tmp_path).
The encoder is the tiny RANDOM BERT from conftest: these tests check wiring, not accuracy."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from textclf.files import file_md5
from textclf.evaluate.metrics_file import read_metrics
from textclf.tracking.runs import project_root, tracking_uri

import conftest
from conftest import REPO, run_baseline, run_train, write_params


def run_evaluate(p):
    run_baseline(p)
    conftest.run_evaluate(p)


def test_train_then_evaluate_log_one_run(tiny_trained, tmp_path):
    """The shared training (conftest.tiny_trained: train, baseline, evaluate) read back:
    the model folder, curve, metrics, predictions, guards and the one MLflow run they share."""
    tmp, run_file = tiny_trained
    model = tmp / "model"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert not list(model.glob("*.bin"))
    config = json.loads((model / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["business", "entertainment", "politics", "sport", "tech"]
    assert json.loads((model / "params.json").read_text())["train"]["epochs"] == 2
    curve = pd.read_csv(tmp / "curve.csv")
    assert list(curve["epoch"]) == [1, 2] and curve["train_loss"].notna().all()

    metrics = read_metrics(tmp / "metrics.json", tmp / "pc.json")
    n_test = int((pd.read_parquet(tmp / "sp.parquet")["split"] == "test").sum())
    assert {"accuracy", "macro_f1", "per_class", "confusion", "n_test"} <= set(metrics)
    assert sum(sum(row.values()) for row in metrics["confusion"].values()) == metrics["n_test"] == n_test
    # the baseline's per-class scores beside the model's, in per_class.json, not metrics.json (issue 60)
    assert sorted(metrics["baseline_per_class"]) == sorted(metrics["per_class"])
    assert "per_class" not in json.loads((tmp / "metrics.json").read_text())["baseline"]
    assert len(pd.read_csv(tmp / "conf.csv")) == n_test
    assert len(pd.read_csv(tmp / "pc.csv")) == 5
    predictions = pd.read_parquet(tmp / "pred.parquet")
    assert len(predictions) == n_test and predictions["doc_id"].is_unique
    assert (predictions["correct"] == (predictions["label"] == predictions["predicted"])).all()
    assert metrics["accuracy"] == pytest.approx(predictions["correct"].mean())
    assert 0 <= metrics["ece"] <= 1

    client = MlflowClient(run_file["tracking_uri"])
    (run,) = client.search_runs(client.get_experiment_by_name("textclf").experiment_id)
    assert run.info.run_id == run_file["run_id"]
    assert metrics["mlflow"]["run_id"] == run.info.run_id  # each side finds the other
    assert run.data.metrics["test_ece"] == pytest.approx(metrics["ece"])
    assert run.info.status == "FINISHED"
    assert run.data.params["train.epochs"] == "2" and run.data.params["tokenize.max_length"] == "64"
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])
    assert metrics["gap"]["accuracy"] == pytest.approx(metrics["accuracy"] - metrics["baseline"]["accuracy"])
    assert run.data.metrics["gap_accuracy"] == pytest.approx(metrics["gap"]["accuracy"])
    assert len(client.get_metric_history(run.info.run_id, "val_accuracy")) == 2
    assert "git_commit" in run.data.tags
    datasets = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    assert datasets["tokens"].digest == file_md5(tmp / "t.parquet")  # the md5 DVC records
    assert datasets["splits"].source == "sp.parquet"

    # guards: every result reaches metrics.json and a guard.* tag
    assert set(metrics["guards"]) == {"load_audit", "optimizer_coverage", "lr_sanity",
                                      "collapse", "silent_class", "weight_movement"}
    assert metrics["guards"]["lr_sanity"] == "warn"  # the fixture trains at lr_encoder 1e-3
    assert run.data.tags["guard.lr_sanity"] == "warn"
    movement = pd.read_csv(tmp / "move.csv")
    assert {"encoder", "head"} == set(movement["part"]) and (movement["relative_change"] >= 0).all()
    assert "param_groups.json" in {a.path for a in client.list_artifacts(run.info.run_id)}

    model_uri = run_file["model_uri"]  # the PyTorch pyfunc; metrics name the served one too
    assert metrics["mlflow"]["torch_model_uri"] == model_uri
    assert metrics["mlflow"]["model_uri"] == metrics["serving"]["model_uri"]
    mlflow.set_tracking_uri(run_file["tracking_uri"])  # conftest restores it after the test
    logged = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=str(tmp_path)))
    files = {p.relative_to(logged).as_posix() for p in logged.rglob("*") if p.is_file()}
    assert {"MLmodel", "pyfunc_entry.py", "code/textclf/inference/serving.py"} <= files
    assert any(f.endswith("/model.safetensors") for f in files)
    assert not any(f.endswith((".pkl", ".bin", ".pt")) for f in files)  # no pickle anywhere


def test_chunks_train_on_windows_and_evaluate_per_document(tiny_chunked):
    """The stages with tokenize.truncation chunks (conftest.tiny_chunked): the token store holds
    windows, training steps over all of them, validation, metrics, predictions and the
    comparison with the baseline are per document, and the model folder carries what
    predicting needs to window and pool as training did."""
    tmp, run_file = tiny_chunked
    tokens, splits = pd.read_parquet(tmp / "t.parquet"), pd.read_parquet(tmp / "sp.parquet")
    assert tokens["doc_id"].nunique() == len(splits) < len(tokens)  # rows are windows
    stats = json.loads((tmp / "s.json").read_text())
    assert stats["truncation"] == "chunks" and stats["unread_tokens"] == 0 and stats["windows_mean"] > 1
    test_docs = splits.loc[splits["split"] == "test", "doc_id"]
    metrics = read_metrics(tmp / "metrics.json", tmp / "pc.json")
    assert metrics["n_test"] == len(test_docs) and 0 <= metrics["accuracy"] <= 1
    assert sum(sum(row.values()) for row in metrics["confusion"].values()) == len(test_docs)
    predictions = pd.read_parquet(tmp / "pred.parquet")
    assert predictions["doc_id"].is_unique and set(predictions["doc_id"]) == set(test_docs)
    assert metrics["accuracy"] == pytest.approx(predictions["correct"].mean())
    baseline = pd.read_parquet(tmp / "bp.parquet")
    cmp = metrics["comparison"]  # paired per document
    assert sum(cmp[k] for k in ("model_only", "baseline_only", "both_right", "both_wrong")) == len(baseline) \
        == len(predictions)
    assert metrics["serving"]["format"] == "onnx" and metrics["serving"]["agreement"] == 1.0
    curve = pd.read_csv(tmp / "curve.csv")
    assert list(curve["epoch"]) == [1, 2]
    saved = json.loads((tmp / "model" / "params.json").read_text())
    assert saved["tokenize"] == {"max_length": 64, "truncation": "chunks", "stride": 16}
    assert saved["model"]["chunk_pooling"] == "max"
    export = json.loads((tmp / "export" / "export.json").read_text())
    assert (export["truncation"], export["stride"], export["chunk_pooling"]) == ("chunks", 16, "max")
    run = MlflowClient(run_file["tracking_uri"]).get_run(run_file["run_id"])
    assert run.data.params["tokenize.truncation"] == "chunks" and run.data.params["model.chunk_pooling"] == "max"
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])


def test_same_params_same_metrics(prepared, tiny_trained):
    """A second training with the shared one's params and data gives the same curve."""
    tmp, p = prepared
    run_train(p, "m2", "c2.csv", "r2.json")
    assert (tmp / "c2.csv").read_text() == (tiny_trained[0] / "curve.csv").read_text()


def test_the_run_time_estimate_is_said_before_training_ends_and_reaches_the_run(prepared, caplog):
    """Issue 50: after its first steps, train logs the measured pace and the whole run's estimated
    time, before the first validation (the demo takes 8 steps an epoch, 2 epochs); the estimate is
    a metric of the run, sent at once (MLflow shows it while training goes on)."""
    tmp, p = prepared
    with caplog.at_level("INFO", logger="textclf.train.loop"):
        run_train(p)
    said = [r.getMessage() for r in caplog.records if r.name == "textclf.train.loop"]
    plan = next(i for i, m in enumerate(said) if m.startswith("training: 16 optimizer steps left"))
    pace = next(i for i, m in enumerate(said) if m.startswith("pace: "))
    first_epoch = next(i for i, m in enumerate(said) if m.startswith("epoch 1: "))
    assert plan < pace < first_epoch
    assert "should take about" in said[pace] and "validation" in said[pace]
    run_id = json.loads((tmp / "run.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri())
    (estimate,) = client.get_metric_history(run_id, "estimated_train_seconds")
    assert estimate.step == 0 and estimate.value > 0
    assert client.get_run(run_id).data.metrics["train_steps_per_s"] > 0


def test_failed_training_ends_run_failed(prepared):
    tmp, p = prepared
    (tmp / "blocked").write_text("a file where the model folder should go")
    with pytest.raises(Exception):
        run_train(p, model_dir="blocked")
    client = MlflowClient(tracking_uri())
    (run,) = client.search_runs(client.get_experiment_by_name("textclf").experiment_id)
    assert run.info.status == "FAILED"
    assert mlflow.active_run() is None


def test_tracking_uri_default_and_override(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking_uri() == "http://127.0.0.1:5000"


def test_temp_experiment_copies_log_to_the_project_store(tmp_path):
    copy = tmp_path / "proj" / ".dvc" / "tmp" / "exps" / "tmpabc123"
    copy.mkdir(parents=True)
    assert project_root(copy) == (tmp_path / "proj").resolve()
    assert project_root(tmp_path) == tmp_path.resolve()


def test_random_encoder_fails_the_stage_with_the_audit_message(prepared):
    """The from_config mistake, replayed: model.init=config builds a random encoder."""
    tmp, _ = prepared
    params = write_params(tmp / "params.yaml", model={"head": "pooled", "init": "config"})
    with pytest.raises(ValueError, match="newly initialised"):
        run_train(["--params", str(params)])
    recorded = json.loads((tmp / "guards.json").read_text())
    assert recorded["load_audit"]["status"] == "fail"
    client = MlflowClient(tracking_uri())
    (run,) = client.search_runs(client.get_experiment_by_name("textclf").experiment_id)
    assert run.info.status == "FAILED" and run.data.tags["guard.load_audit"] == "fail"


def test_cpu_bf16_training_logs_a_model_and_evaluates(prepared):
    """train.precision: bf16 on a CPU, in its own process as under DVC: the stage must get
    past logging its pyfunc, which loads the model and predicts the input example. Then
    evaluate (evaluate.precision: bf16) in this process, whose Accelerate state is fp32."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", train={"precision": "bf16"}, evaluate={"precision": "bf16"})
    proc = subprocess.run([sys.executable, "-m", "stages.train", *p, "--tokens", "t.parquet", "--splits",
                           "sp.parquet", "--model-dir", "model", "--curve", "curve.csv", "--guards",
                           "guards.json", "--movement", "move.csv", "--run-file", "run.json"],
                          cwd=tmp, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp / "model" / "params.json").read_text())["train"]["precision"] == "bf16"
    run_file = json.loads((tmp / "run.json").read_text())
    run = MlflowClient(tracking_uri=run_file["tracking_uri"]).get_run(run_file["run_id"])
    assert run.data.params["train.precision"] == "bf16"
    run_evaluate(p)
    metrics = json.loads((tmp / "metrics.json").read_text())
    n_test = int((pd.read_parquet(tmp / "sp.parquet")["split"] == "test").sum())
    assert metrics["n_test"] == n_test > 0 and 0 <= metrics["accuracy"] <= 1


@pytest.mark.parametrize("head", ["pooled", "textcnn"])
def test_the_other_heads_train_audit_and_serve(prepared, head):
    """`model.head` pooled and textcnn through the stage (the default head: tiny_trained):
    the load audit and weight movement pass, and the logged pyfunc predicts a label."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", model={"head": head, "textcnn": {"kernel_sizes": [2, 3], "num_filters": 8}},
                 train={"epochs": 1})
    run_train(p)
    guards = json.loads((tmp / "guards.json").read_text())
    assert guards["load_audit"]["status"] == guards["weight_movement"]["status"] == "pass", guards
    model = mlflow.pyfunc.load_model(json.loads((tmp / "run.json").read_text())["model_uri"])
    got = model.predict(pd.DataFrame({"text": ["Shares fell after the profit warning."]}))
    assert got["label"].iloc[0] in {"business", "entertainment", "politics", "sport", "tech"}
    assert abs(got.filter(like="prob_").sum(axis=1).iloc[0] - 1) < 1e-5


def test_the_collapse_guard_judges_the_kept_epoch_not_the_last(prepared, monkeypatch):
    """select: best keeps epoch 1; epoch 2 collapses. The stage must judge epoch 1
    (`recovered`, naming epoch 2), not the last. Fault injection: the selector is told
    epoch 1 scored best, and the real collapse detector sees epoch 1 predict the labels and
    epoch 2 predict one class."""
    from textclf.train import guards
    from textclf.train.selection import EpochSelector

    tmp, p = prepared
    write_params(tmp / "params.yaml", train={"epochs": 2, "select": "best"})
    update, detect = EpochSelector.update, guards.collapse_check
    monkeypatch.setattr(EpochSelector, "update", lambda self, row, model, probs=None: update(
        self, {**row, "val_macro_f1": 1.0 - row["epoch"] / 10}, model, probs))
    seen = []

    def collapse_check(pred, y_true, labels, share):  # epoch 1 right, epoch 2 all one class
        seen.append(1)
        return detect(np.asarray(y_true) if len(seen) == 1 else pred * 0, y_true, labels, share)
    monkeypatch.setattr(guards, "collapse_check", collapse_check)
    run_train(p)
    collapse = json.loads((tmp / "guards.json").read_text())["collapse"]
    assert json.loads((tmp / "run.json").read_text())["kept_epoch"] == 1
    assert (collapse["status"], collapse["epoch"], collapse["collapsed_epochs"]) == ("recovered", 1, [2])
    assert collapse["message"].startswith("epoch 2 collapsed, but the kept epoch 1 did not")
