"""Object storage for the team: a DVC remote and the tracking server's artifacts in an
S3-compatible store, here moto's S3 server on a free loopback port (tests/moto_s3.py), as DVC's
and MLflow's own suites do. Real DVC, real PostgreSQL + `mlflow server` (scripts/server.sh)."""
import json
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from conftest import dvc, free_port, git, run_baseline, run_evaluate, run_report, run_train
from moto_s3 import moto_server, offline_aws, without_aws
from test_remote import STAGES, UP_TO_DATE, ran, uncached
from test_server import LABELS, NO_POSTGRES, postgres_installed, server_sh, team_server

BUCKET = "textclf"


@pytest.fixture
def s3(tmp_path):
    with moto_server(tmp_path, buckets=(BUCKET,)) as store:
        yield store


def cache_files(repo: Path, kind: str) -> set[str]:
    """The files of .dvc/cache/<kind>, relative to it (where a remote keeps them too)."""
    root = repo / ".dvc" / "cache" / kind
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def locked_outs(repo: Path) -> list[dict]:
    """dvc.lock's cached outputs (`cache: false` ones travel in git, never to a remote)."""
    git_only = {path for stage in STAGES.values() for path in uncached(stage)}
    stages = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    return [out for stage in stages.values() for out in stage.get("outs", []) if out["path"] not in git_only]


def locked_paths(repo: Path) -> set[str]:
    return {out["path"] for out in locked_outs(repo)}


def locked_objects(repo: Path) -> set[str]:
    """The cache paths (md5/ab/cdef…) of every output dvc.lock names."""
    return {f"md5/{out['md5'][:2]}/{out['md5'][2:]}" for out in locked_outs(repo)}


@pytest.mark.slow
def test_a_teammate_pulls_through_s3_and_nothing_runs_again(reproduced, s3, tmp_path):
    """`dvc push --run-cache` to an s3:// remote with `endpointurl`, credentials from the AWS
    variables; a fresh clone with its credentials in `.dvc/config.local` pulls, and neither
    `dvc repro` nor the restore of a deleted model trains."""
    src, _ = reproduced
    origin, clone = tmp_path / "origin", tmp_path / "teammate"
    shutil.copytree(src, origin, symlinks=True, ignore=shutil.ignore_patterns("mlflow.db", "mlruns", "tmp"))
    dvc(origin, "remote", "add", "-d", "team", f"s3://{BUCKET}/dvc")
    dvc(origin, "remote", "modify", "team", "endpointurl", s3.endpoint)
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "pipeline results and the team's S3 remote")
    dvc(origin, "push", "--run-cache", env=s3.env)

    stored = s3.keys(BUCKET, "dvc/")
    outs = locked_objects(origin) & cache_files(origin, "files")
    assert "models/model" in locked_paths(origin) and outs
    assert {f"dvc/files/{f}" for f in outs} <= stored.keys()
    runs = cache_files(origin, "runs")
    assert runs and {f"dvc/runs/{f}" for f in runs} <= stored.keys()

    git(tmp_path, "clone", "-q", str(origin), str(clone))
    for key, value in (("access_key_id", "test"), ("secret_access_key", "test")):
        dvc(clone, "remote", "modify", "--local", "team", key, value)
    env = offline_aws(tmp_path)  # no AWS credentials in the environment: config.local's only
    dvc(clone, "pull", "--run-cache", env=env)
    assert UP_TO_DATE in dvc(clone, "status", env=env)
    out = dvc(clone, "repro", env=env)
    assert ran(out) == set() and UP_TO_DATE in out, out
    model = Path("models/model/model.safetensors")
    assert (clone / model).read_bytes() == (origin / model).read_bytes()

    shutil.rmtree(clone / "models")
    out = dvc(clone, "repro", env=env)
    assert ran(out) == set(), out  # training included: restored from the pulled run-cache
    assert "Stage 'train' is cached - skipping run, checking out outputs" in out, out
    assert (clone / model).read_bytes() == (origin / model).read_bytes()
    assert git(clone, "status", "--porcelain") == ""  # config.local holds the keys, git-ignored


@pytest.mark.slow
@pytest.mark.parametrize("bucket, endpoint", [("missing", None), (BUCKET, "http://127.0.0.1:{closed}")])
def test_the_script_checks_the_bucket_before_creating_anything(s3, tmp_path, bucket, endpoint):
    """A bucket that does not exist, or an endpoint where nothing listens: one line naming the
    destination and the fix, at start, not when a run logs its first artifact."""
    if not postgres_installed():
        pytest.skip(NO_POSTGRES)
    endpoint = (endpoint or s3.endpoint).format(closed=free_port())
    env = {"TEXTCLF_STATE": str(tmp_path / "state"), "TEXTCLF_MLFLOW_PORT": str(free_port()),
           "TEXTCLF_PG_PORT": str(free_port()), "TEXTCLF_ARTIFACTS": f"s3://{bucket}/mlflow",
           "MLFLOW_S3_ENDPOINT_URL": endpoint, **s3.env}
    proc = server_sh(env, "start")
    assert proc.returncode == 1, proc.stdout
    assert proc.stderr.startswith(f"server.sh: artifact store s3://{bucket}/mlflow cannot be reached (")
    assert "MLFLOW_S3_ENDPOINT_URL" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "state").exists()


@pytest.fixture
def team_s3(s3):
    """scripts/server.sh with TEXTCLF_ARTIFACTS=s3://textclf/mlflow; only the server gets the
    endpoint and the credentials."""
    with team_server("textclf-s3-", TEXTCLF_ARTIFACTS=f"s3://{BUCKET}/mlflow",
                     MLFLOW_S3_ENDPOINT_URL=s3.endpoint, **s3.env) as server:
        yield server


@pytest.mark.slow
def test_the_runs_artifacts_land_in_the_bucket_through_the_server(team_s3, s3, prepared, monkeypatch):
    """Train, evaluate and report (the tiny RANDOM BERT: plumbing) from a client with no AWS
    credentials and no endpoint: the model and the report reach the bucket through the server,
    and the model loads back the same way."""
    folder, p = prepared
    without_aws(monkeypatch, folder)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", team_s3.url)
    run_train(p)
    run_baseline(p)
    run_evaluate(p)
    run_report(p)

    run_file = json.loads((folder / "run.json").read_text())
    run = MlflowClient(team_s3.url).get_run(run_file["run_id"])
    assert run.info.status == "FINISHED" and run.info.artifact_uri.startswith("mlflow-artifacts:/")
    stored = s3.keys(BUCKET, "mlflow/")
    run_prefix = f"mlflow/{run.info.experiment_id}/{run.info.run_id}/artifacts/"
    assert s3.read(BUCKET, f"{run_prefix}report/report.html") == (folder / "report.html").read_bytes()
    assert f"{run_prefix}report/confusion.png" in stored
    weights = [k for k in stored if k.startswith(f"mlflow/{run.info.experiment_id}/models/")
               and k.endswith("/model.safetensors")]
    assert len(weights) == 1, sorted(stored)
    assert s3.read(BUCKET, weights[0]) == (folder / "model" / "model.safetensors").read_bytes()
    assert not (folder / "mlruns").exists() and not (team_s3.state / "mlartifacts").exists()

    model = mlflow.pyfunc.load_model(run_file["model_uri"])  # downloaded through the server
    got = model.predict(pd.DataFrame({"text": ["Shares fell after the profit warning."]}))
    assert got["label"].iloc[0] in LABELS
