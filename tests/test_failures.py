"""Bad input and broken stores end a stage in one clear line, before any work, and never
rewrite what MLflow recorded. Real stage processes (to see exactly what a user sees), a
real SQLite store; the encoder is conftest's tiny RANDOM BERT (wiring, not accuracy)."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from textclf import preflight

from conftest import REPO, free_port, run_baseline, run_evaluate, run_train, write_params


def stage(tmp, module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The stage failed with exit 1 and exactly one ERROR line, no traceback -> that line."""
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1, proc.stderr[-3000:]
    return errors[0]


TRAIN = ["stages.train", "--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "m",
         "--curve", "curve.csv", "--guards", "g.json", "--movement", "mv.csv", "--run-file", "run.json"]


def test_read_only_store_fails_before_training(prepared):
    tmp, _ = prepared
    MlflowClient(f"sqlite:///{tmp / 'ro.db'}").search_experiments()  # a valid, empty store
    uri = f"sqlite:///file:{tmp / 'ro.db'}?mode=ro&uri=true"  # as a read-only file, even for root
    line = one_error_line(stage(tmp, *TRAIN, env={"MLFLOW_TRACKING_URI": uri}))
    assert f"MLflow tracking store {uri} cannot be written" in line and "readonly database" in line
    assert not (tmp / "curve.csv").exists()  # nothing trained


def test_dead_tracking_server_fails_fast_naming_the_uri(prepared):
    tmp, _ = prepared
    uri = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    line = one_error_line(stage(tmp, *TRAIN, env={"MLFLOW_TRACKING_URI": uri}))
    assert f"MLflow tracking server {uri} is unreachable" in line and "Connection refused" in line
    assert time.monotonic() - started < 60  # MLflow's own client would retry for minutes
    assert not (tmp / "curve.csv").exists()


def test_unknown_model_name_is_one_line_saying_what_was_tried(prepared):
    tmp, p = prepared
    write_params(tmp / "params.yaml", model={"name": "no-such-model"})
    proc = stage(tmp, "stages.tokenize", *p, "--corpus", "c.parquet", "--tokens", "t2.parquet",
                 "--stats", "s2.json", "--histogram", "h2.csv")
    line = one_error_line(proc)
    assert "model.name='no-such-model' could not be loaded" in line
    assert "local folder" in line and "installed model package" in line and "HF_HUB_OFFLINE" in line


def test_a_model_folder_without_weights_is_named_with_what_it_lacks(tiny_random_bert, tmp_path):
    """The folder exists: the message says what is missing, not "no folder"."""
    from textclf.config import ModelParams
    from textclf.model.modeling import build_model

    folder = tmp_path / "model"
    shutil.copytree(tiny_random_bert, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    with pytest.raises(ValueError) as caught:
        build_model(ModelParams(name=str(folder)), ["a", "b"])
    message = str(caught.value)
    assert f"is the folder {folder}" in message and "lacks safetensors weights (model.safetensors" in message
    assert "no folder" not in message and "config" not in message.split("lacks")[1]


def test_unwritable_output_is_one_line_naming_the_path(prepared):
    tmp, p = prepared
    (tmp / "blocker").write_text("a file where a folder should be")
    proc = stage(tmp, "stages.split", *p, "--corpus", "c.parquet", "--splits", "blocker/sp.parquet",
                 "--counts", "n2.json")
    line = one_error_line(proc)
    assert "cannot use" in line and "blocker" in line


def test_evaluate_never_reopens_or_fails_the_training_run(prepared):
    """Evaluate logs into the finished run, in this machine's store; a failing evaluate (an
    artifact it cannot write) leaves the run FINISHED with the end time training gave it."""
    tmp, p = prepared
    run_train(p)
    run_baseline(p)
    run_id = json.loads((tmp / "run.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    trained = client.get_run(run_id).info

    run_evaluate(p)
    time.sleep(1.1)
    run_evaluate(p)
    info = client.get_run(run_id)
    assert "test_accuracy" in info.data.metrics
    assert (info.info.status, info.info.end_time) == ("FINISHED", trained.end_time)

    # run.json travels through the DVC remote: the store it names may be a teammate's. This
    # machine's MLFLOW_TRACKING_URI wins; a store without the run fails in one line naming both.
    run_file = json.loads((tmp / "run.json").read_text())
    elsewhere = "sqlite:////home/teammate/project/mlflow.db"
    (tmp / "run.json").write_text(json.dumps({**run_file, "tracking_uri": elsewhere}))
    client.delete_tag(run_id, "verdict")
    run_evaluate(p)
    assert "verdict" in client.get_run(run_id).data.tags  # logged here, not to the teammate's path
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'empty.db'}"  # monkeypatched by `prepared`
    with pytest.raises(ValueError, match=rf"run {run_id} \(run.json\) is not in the tracking store "
                                         rf"sqlite:///{tmp}/empty.db; it was logged to {elsewhere}"):
        run_evaluate(p)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlflow.db'}"

    artifacts = client.get_run(run_id).info.artifact_uri.removeprefix("file://")
    os.remove(f"{artifacts}/metrics.json")
    os.makedirs(f"{artifacts}/metrics.json")  # a folder where evaluate copies its file
    with pytest.raises(OSError):
        run_evaluate(p)
    info = client.get_run(run_id).info
    assert (info.status, info.end_time) == ("FINISHED", trained.end_time)


def test_preflight_names_a_fifo_that_would_hang_dvc(tmp_path, sample_corpus):
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(sample_corpus)})
    preflight.main(["--params", str(params)])  # a clean corpus passes
    os.mkfifo(sample_corpus / "tech" / "pipe.txt")
    with pytest.raises(ValueError, match=r"holds 1 FIFO, socket or device file\(s\): .*tech/pipe\.txt"):
        preflight.main(["--params", str(params)])
