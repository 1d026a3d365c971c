"""End to end: real `dvc repro` on a copy of the repo, real packaged MiniLM, real MLflow store."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from textclf.evaluate.pooled import pooled_comparison
from textclf.multiseed import experiment_outcomes, seed_row, table
from textclf.tracking.dvc_exps import experiments, revisions

from conftest import GIT_ENV, REPO, copy_repo, copy_reproduced, dvc, git, write_params

LABELS = {"business", "entertainment", "politics", "sport", "tech"}
LEARNS = 0.7  # validation and test accuracy; chance is 0.2 (3 epochs: 0.80 at worst over 10 seeds)


def ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def runs(repo: Path):
    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    exp = client.get_experiment_by_name("textclf")
    return client, ([] if exp is None else client.search_runs(exp.experiment_id))


def test_dvc_repro_end_to_end(reproduced, tmp_path):
    repo, out = reproduced
    assert ran(out) == {"ingest", "tokenize", "split", "baseline", "features", "train", "export", "evaluate", "labels",
                        "report"}
    for rel in ("data/interim/corpus.parquet", "data/interim/ingest_report.json",
                "data/processed/tokens.parquet", "data/processed/splits.parquet",
                "models/model/model.safetensors", "reports/train_curve.csv",
                "reports/confusion.csv", "reports/per_class.csv", "reports/token_lengths.csv",
                "reports/weight_change.csv", "reports/report.md", "reports/report.html",
                "reports/confusion.png", "data/processed/test_predictions.parquet"):
        assert (repo / rel).is_file(), rel
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert {"accuracy", "macro_f1", "n_test", "baseline", "gap", "classes"} <= set(metrics)
    per_class = json.loads((repo / "reports/per_class.json").read_text())  # what grows with the classes
    assert {"per_class", "confusion", "per_class_accuracy"} <= set(per_class)
    assert set(per_class) & set(metrics) == {"sets"} and "per_class_coverage" in per_class["sets"]
    report = (repo / "reports/report.md").read_text()
    assert "Test metrics" in report and "TF-IDF baseline" in report

    client, (run,) = runs(repo)
    assert run.info.status == "FINISHED"
    assert metrics["mlflow"]["run_id"] == run.info.run_id and 0 <= metrics["ece"] <= 1
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    outs = {o["path"]: o["md5"] for stage in lock.values() for o in stage.get("outs", [])}
    datasets = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    for name, path in (("corpus", "data/interim/corpus.parquet"), ("tokens", "data/processed/tokens.parquet"),
                       ("splits", "data/processed/splits.parquet")):
        assert (datasets[name].source, datasets[name].digest) == (path, outs[path])  # DVC's md5
    # lineage: those datasets and dvc.lock as it stood when training started, not dozens of tags
    assert not [t for t in run.data.tags if t.startswith("dvc.") and t != "dvc.exp_name"]
    assert run.data.tags["git_commit"] == git(repo, "rev-parse", "HEAD").strip()
    at_training = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "dvc.lock")).read_text())
    assert at_training["stages"]["split"] == lock["split"]  # the stages before train, as they ran
    branch, short = git(repo, "branch", "--show-current").strip(), git(repo, "rev-parse", "--short", "HEAD").strip()
    assert run.info.run_name == f"{branch}@{short}"  # the commit the workspace ran
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/report.html", "report/confusion.png", "report/ingest_report.json"} <= logged
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])
    assert "val_accuracy" in run.data.metrics and run.data.params["train.epochs"] == "3"
    repo = copy_reproduced(reproduced, tmp_path / "repo")  # dvc writes its state: work in a copy
    shown = dvc(repo, "metrics", "show")
    assert "accuracy" in shown
    dvc(repo, "plots", "show", "-o", str(tmp_path / "plots"))
    page = (tmp_path / "plots" / "index.html").read_text()
    for plot in ("train_curve.csv", "confusion.csv", "per_class.csv", "token_lengths.csv"):
        assert plot in page, plot

    out = dvc(repo, "repro")  # nothing changed: no stage runs, no new MLflow run
    assert ran(out) == set() and len(runs(repo)[1]) == 1


def test_the_demo_model_learns(reproduced):
    """The packaged MiniLM fine-tuned on the demo corpus (3 epochs at 64 tokens) is far above
    chance (20 %) on its validation and test splits. The bar comes from repeated runs
    (`benchmarks/training/demo_learning.py --epochs 3`, README: Tests)."""
    repo, _ = reproduced
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    curve = pd.read_csv(repo / "reports/train_curve.csv")
    assert metrics["accuracy"] >= LEARNS and curve["val_accuracy"].max() >= LEARNS, (metrics, curve)


def test_a_changed_param_reruns_its_stage(reproduced, tmp_path):
    """`dvc repro --dry` in a copy (the shared repo stays as it is) names the stage whose
    params changed; the stages after it follow when its outputs change (slow tier)."""
    repo = copy_reproduced(reproduced, tmp_path / "repo")
    write_params(repo / "params.yaml", train={"epochs": 2})
    assert ran(dvc(repo, "repro", "--dry")) == {"train"}
    write_params(repo / "params.yaml", train={"epochs": 3}, evaluate={"alpha": 0.01})
    # the export stage judges the served format with evaluate's test of significance (issue 61)
    assert ran(dvc(repo, "repro", "--dry")) == {"export", "evaluate"}


@pytest.mark.slow
def test_a_changed_train_param_reruns_train_evaluate_and_report(reproduced, tmp_path):
    """A real rerun in a copy, logging to a store of its own (the copy's mlflow.db would put
    the run's artifacts in the shared repo's mlruns/)."""
    repo = copy_reproduced(reproduced, tmp_path / "repo")
    write_params(repo / "params.yaml", train={"epochs": 2})
    store = f"sqlite:///{tmp_path / 'rerun.db'}"
    assert ran(dvc(repo, "repro", env={"MLFLOW_TRACKING_URI": store})) == {"train", "export", "evaluate", "labels", "report"}
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    assert run.data.params["train.epochs"] == "2" and "test_accuracy" in run.data.metrics


def pyfunc_predict(repo: Path, model_uri: str, texts: list[str]) -> pd.DataFrame:
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    try:
        return mlflow.pyfunc.load_model(model_uri).predict(pd.DataFrame({"text": texts}))
    finally:
        mlflow.set_tracking_uri(previous)


@pytest.mark.slow
def test_every_head_through_dvc_experiments(tmp_path, monkeypatch):
    """`dvc exp run -S model.head=...` for each head; `dvc exp show` has head, lr and guards;
    each head's logged pyfunc loads and predicts; multiseed's table and pooled test over them."""
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, train={"epochs": 1})
    subprocess.run(["git", "commit", "-qam", "tiny"], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    for head in ("sequence_classification", "pooled", "textcnn"):
        dvc(repo, "exp", "run", "-S", f"model.head={head}", "-n", head.replace("_", "-"))
    shown = json.loads(dvc(repo, "exp", "show", "--json", "--no-pager"))
    params = {exp["revs"][0]["name"]: exp["revs"][0]["data"]["params"]["params.yaml"]["data"]
              for baseline in shown for exp in baseline.get("experiments") or []}
    exps = experiments(shown)
    assert set(exps) == set(params) == {"sequence-classification", "pooled", "textcnn"}
    for name, metrics in exps.items():
        assert params[name]["model"]["head"] == name.replace("-", "_")
        assert "lr_encoder" in params[name]["train"]
        assert metrics["guards"]["load_audit"] == "pass"
        assert metrics["guards"]["weight_movement"] == "pass"
        assert 0 <= metrics["accuracy"] <= 1 and "gap" in metrics
        run = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}").get_run(metrics["mlflow"]["run_id"])
        assert run.info.run_name == name  # the UI lists the runs by their DVC experiment names
        got = pyfunc_predict(repo, metrics["mlflow"]["model_uri"], ["Shares fell after the profit warning."])
        assert got["label"].iloc[0] in LABELS
        assert abs(got.filter(like="prob_").sum(axis=1).iloc[0] - 1) < 1e-5
    assert len(runs(repo)[1]) == 3
    rows = [seed_row(i, m) for i, m in enumerate(exps.values())]  # the multiseed table over these
    assert [r["errors"] for r in rows] == [round(m["n_test"] * (1 - m["accuracy"])) for m in exps.values()]
    assert {r["verdict"] for r in rows} <= {"better", "worse", "no significant difference"}
    assert f"| mean ± sd | | {sum(r['accuracy'] for r in rows) / 3 * 100:.2f} ± " in table(rows)
    monkeypatch.chdir(repo)  # each experiment's predictions, from its commit and the DVC cache
    pooled = pooled_comparison([experiment_outcomes(rev["rev"]) for rev in revisions(shown).values()])
    assert pooled["pairs"] == sum(m["n_test"] for m in exps.values())
    assert pooled["model_only"] == sum(m["comparison"]["model_only"] for m in exps.values())
    assert pooled["baseline_only"] == sum(m["comparison"]["baseline_only"] for m in exps.values())


def test_a_bad_input_is_one_clear_line_not_a_traceback(tmp_path):
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(tmp_path / "nowhere")})
    proc = subprocess.run([sys.executable, "-m", "stages.ingest", "--params", str(params),
                           "--corpus", str(tmp_path / "c.parquet"), "--report", str(tmp_path / "r.json")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1
    assert "ingest.source=" in proc.stderr and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
