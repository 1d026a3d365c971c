"""The team's tracking server with authentication (scripts/server.sh, TEXTCLF_AUTH=basic):
MLflow's basic-auth app on the same PostgreSQL, users made by `server.sh add-user`, and what
`tracking.check_store` says to a client without a login or a permission. Real PostgreSQL, real
`mlflow server`, its own free loopback ports; the pipeline test trains conftest's tiny RANDOM BERT."""
import base64
import importlib.util
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from mlflow.exceptions import MlflowException
from mlflow.server.auth.client import AuthServiceClient
from mlflow.tracking import MlflowClient

from conftest import GIT_ENV, REPO, copy_repo, dvc_run, write_params
from test_server import server_sh, team_server
from textclf.errors import UserError
from textclf.tracking.store import check_store

ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"


@dataclass
class AuthServer:
    url: str
    env: dict  # scripts/server.sh's settings
    state: Path

    def password(self, user: str) -> str:
        name = "admin.password" if user == "admin" else f"users/{user}.password"
        return (self.state / name).read_text().strip()

    def login(self, user: str) -> dict:
        return {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": self.password(user)}


@pytest.fixture
def as_user(monkeypatch):
    """Run MLflow client calls in this process as a user (None: no credentials)."""
    def switch(server: AuthServer, user: str | None) -> MlflowClient:
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            monkeypatch.delenv(key, raising=False)
        for key, value in (server.login(user) if user else {}).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        return MlflowClient(server.url)
    return switch


# The server's start (PostgreSQL, two databases, two accounts) takes 45 s of the default tier's
# 10 minutes: every test that needs it runs in the slow tier (make test-all, CI).

@pytest.fixture(scope="module")
def auth_server():
    """A server with basic auth; alice has EDIT, bob READ on the experiment and the model."""
    with team_server("textclf-auth-", TEXTCLF_AUTH="basic") as server:
        for user, permission in (("alice", "EDIT"), ("bob", "READ")):
            added = server_sh(server.env, "add-user", user, permission)
            assert added.returncode == 0 and not added.stderr, added.stdout + added.stderr
        yield AuthServer(server.url, server.env, server.state)


def request(url: str, user: str | None = None, password: str = "", method: str = "GET",
            data: bytes | None = None, headers: dict | None = None) -> int:
    """The HTTP status of one request (no MLflow client: no retries, no credential lookup)."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def refused(call) -> int:
    """The HTTP status an MLflow client call failed with (artifact uploads raise requests')."""
    try:
        call()
    except MlflowException as err:
        return err.get_http_status_code()
    except requests.HTTPError as err:
        return err.response.status_code
    raise AssertionError("the call succeeded")


def one_line_error(fn) -> str:
    started = time.monotonic()
    with pytest.raises(UserError) as caught:
        fn()
    assert time.monotonic() - started < 30
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


def test_the_script_refuses_a_non_loopback_bind_without_auth(tmp_path):
    for auth in ({}, {"TEXTCLF_AUTH": "none"}):
        env = {"TEXTCLF_STATE": str(tmp_path / "state"), "TEXTCLF_MLFLOW_HOST": "0.0.0.0", **auth}
        proc = server_sh(env, "start")
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.startswith("server.sh: TEXTCLF_MLFLOW_HOST=0.0.0.0 is reachable beyond this machine")
        assert "set TEXTCLF_AUTH=basic" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "state").exists()  # refused before anything was created


def auth_users():
    """scripts/auth_users.py as a module: its functions, without a server."""
    spec = importlib.util.spec_from_file_location("auth_users", REPO / "scripts" / "auth_users.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_add_user_refuses_a_name_that_is_not_a_file_name(tmp_path, capsys):
    script = auth_users()
    for name in ("../x", "a/b", ".hidden", "a b", "x" * 65):
        with pytest.raises(SystemExit) as refused:
            script.main([name, "READ", "--passwords", str(tmp_path / "users")])
        message = str(refused.value.code)
        assert message.startswith(f"server.sh: add-user: NAME {name!r} is not a user name"), message
        assert len(message.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_password_file_and_folder_from_before_are_closed_to_other_users(tmp_path):
    """mkdir(mode=) and touch(mode=) set modes only on what they create: a folder or a stale
    password file that existed (a deleted account's) kept 755 and 644."""
    folder = tmp_path / "users"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "alice.password").write_text("stale\n")
    (folder / "alice.password").chmod(0o644)
    path = auth_users().write_password(folder, "alice", "new-secret")
    assert path.read_text() == "new-secret\n"
    assert (folder.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)


def test_switching_auth_on_closes_what_the_open_server_wrote(tmp_path):
    """server.sh's tighten step, which a start with TEXTCLF_AUTH=basic runs: artifacts and logs
    an open server wrote (755 folders, 644 files) close to other users; the state folder
    keeps x for others (root runs PostgreSQL as `postgres`, which must reach its data)."""
    state = tmp_path / "state"
    run = state / "mlartifacts" / "1" / "abc" / "artifacts"
    run.mkdir(parents=True)
    (run / "model.safetensors").write_bytes(b"w")
    (state / "mlflow.log").write_text("log")
    (state / "postgres").mkdir()
    (state / "postgres").chmod(0o750)  # PostgreSQL's own choice: left alone
    outside = tmp_path / "artifacts"
    (outside / "0").mkdir(parents=True)
    for path in (state, *state.rglob("*"), outside, *outside.rglob("*")):
        if path.name != "postgres":
            path.chmod(0o755 if path.is_dir() else 0o644)
    for artifacts in (str(state / "mlartifacts"), str(outside)):
        proc = subprocess.run(["bash", "-c", f'source "{REPO}/scripts/server.sh" && tighten'], text=True,
                              capture_output=True, env={**os.environ, "TEXTCLF_STATE": str(state),
                                                        "TEXTCLF_ARTIFACTS": artifacts})
        assert proc.returncode == 0, proc.stderr
    opened = [p for p in (*state.rglob("*"), outside, *outside.rglob("*"))
              if p.name != "postgres" and p.stat().st_mode & 0o077]
    assert opened == []
    assert (state.stat().st_mode & 0o777, (state / "postgres").stat().st_mode & 0o777) == (0o711, 0o750)


@pytest.mark.slow
def test_unauthenticated_requests_get_401(auth_server):
    search = f"{auth_server.url}/api/2.0/mlflow/experiments/search?max_results=5"
    assert request(search) == 401
    assert request(search, "alice", "wrong password") == 401
    assert request(search, "admin", "password1234") == 401  # MLflow's old default: never the admin's
    assert request(search, "alice", auth_server.password("alice")) == 200
    assert request(f"{auth_server.url}/health") == 200  # left open for load balancers and server.sh
    assert request(f"{auth_server.url}/") == 401  # the UI
    assert request(f"{auth_server.url}/graphql", method="POST", data=b'{"query": "{ __typename }"}',
                   headers={"Content-Type": "application/json"}) == 401
    assert request(f"{auth_server.url}/{ARTIFACTS}/1/x/artifacts/a.txt", method="PUT", data=b"x") == 401
    assert request(f"{auth_server.url}/{ARTIFACTS}?path=1") == 401


@pytest.mark.slow
def test_secrets_are_random_and_in_files_only_their_owner_reads(auth_server, as_user):
    for name in ("admin.password", "flask.secret", "basic_auth.ini", "users/alice.password"):
        assert (auth_server.state / name).stat().st_mode & 0o777 == 0o600, name
    # the server's artifacts on its disk: the permissions would mean little if anyone could read them
    alice = as_user(auth_server, "alice")
    alice.log_text(alice.create_run(alice.get_experiment_by_name("textclf").experiment_id).info.run_id, "x", "a.txt")
    assert (auth_server.state / "mlartifacts").stat().st_mode & 0o777 == 0o700
    before = auth_server.state / "mlartifacts" / "0" / "logged-before-auth"  # by a server without it
    before.mkdir(mode=0o755, parents=True)
    (before / "a.txt").write_text("x")
    assert server_sh(auth_server.env, "start").returncode == 0  # switching auth on closes it too
    assert (before.stat().st_mode & 0o777, (before / "a.txt").stat().st_mode & 0o777) == (0o700, 0o600)
    admin = auth_server.password("admin")
    assert len(admin) >= 24 and admin != "password1234"
    ini = (auth_server.state / "basic_auth.ini").read_text()
    assert "default_permission = NO_PERMISSIONS" in ini
    assert "/mlflow_auth" in ini and admin not in ini  # passwords reach the server by its environment
    assert auth_server.env["TEXTCLF_PG_PORT"] in ini


@pytest.mark.slow
def test_the_security_middleware_allows_only_the_bound_names(auth_server):
    search = f"{auth_server.url}/api/2.0/mlflow/experiments/search?max_results=5"
    port, password = auth_server.env["TEXTCLF_MLFLOW_PORT"], auth_server.password("alice")
    assert request(search, "alice", password, headers={"Host": f"localhost:{port}"}) == 200
    # a private address is allowed by MLflow's defaults, but this server is not bound to it
    for host in ("evil.example.com", f"192.168.1.10:{port}"):
        assert request(search, "alice", password, headers={"Host": host}) == 403, host


@pytest.mark.slow
def test_a_changed_auth_is_refused_while_the_server_runs(auth_server):
    proc = server_sh({**auth_server.env, "TEXTCLF_AUTH": "none"}, "start")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("server.sh: mlflow server runs with host and auth '127.0.0.1 basic', not "
                                   "'127.0.0.1 none': run 'scripts/server.sh stop' first to change them")


@pytest.mark.slow
def test_a_read_user_cannot_create_a_run_or_move_an_alias(auth_server, as_user):
    admin = as_user(auth_server, "admin")
    exp_id = admin.get_experiment_by_name("textclf").experiment_id
    run = admin.create_run(exp_id)
    admin.log_text(run.info.run_id, "weights", "model/weights.txt")
    version = admin.create_model_version("textclf", f"{run.info.artifact_uri}/model", run.info.run_id)
    admin.set_registered_model_alias("textclf", "champion", version.version)
    other = admin.create_model_version("textclf", f"{run.info.artifact_uri}/model", run.info.run_id)

    bob = as_user(auth_server, "bob")
    assert bob.get_run(run.info.run_id).info.run_id == run.info.run_id  # READ reads
    assert bob.download_artifacts(run.info.run_id, "model/weights.txt", str(Path(tempfile.mkdtemp())))
    for write in (lambda: bob.create_run(exp_id),
                  lambda: bob.set_registered_model_alias("textclf", "champion", other.version),
                  lambda: bob.delete_registered_model_alias("textclf", "champion"),
                  lambda: bob.log_text(run.info.run_id, "swapped", "model/weights.txt")):
        assert refused(write) == 403
    assert admin.get_model_version_by_alias("textclf", "champion").version == version.version
    assert as_user(auth_server, "admin").download_artifacts(
        run.info.run_id, "model/weights.txt", str(Path(tempfile.mkdtemp()))).endswith("weights.txt")

    alice = as_user(auth_server, "alice")  # EDIT may move it: the 403 above is the permission
    alice.set_registered_model_alias("textclf", "champion", other.version)
    assert alice.get_model_version_by_alias("textclf", "champion").version == other.version


@pytest.mark.slow
def test_an_account_without_a_grant_sees_no_artifacts(auth_server, as_user):
    """default_permission NO_PERMISSIONS: an account add-user never granted reads nothing,
    artifacts included (MLflow 3.17.2 authorises the proxied artifact routes per experiment)."""
    admin = as_user(auth_server, "admin")
    AuthServiceClient(auth_server.url).create_user("mallory", "mallory-password-1234")
    exp_id = admin.get_experiment_by_name("textclf").experiment_id
    run = admin.create_run(exp_id)
    admin.log_text(run.info.run_id, "secret", "a.txt")
    path = f"{exp_id}/{run.info.run_id}/artifacts/a.txt"
    who = ("mallory", "mallory-password-1234")
    assert request(f"{auth_server.url}{ARTIFACTS}/{path}", *who) == 403
    assert request(f"{auth_server.url}{ARTIFACTS}?path={exp_id}/{run.info.run_id}/artifacts", *who) == 403
    assert request(f"{auth_server.url}/api/2.0/mlflow/runs/get?run_id={run.info.run_id}", *who) == 403
    assert request(f"{auth_server.url}{ARTIFACTS}/{path}", "bob", auth_server.password("bob")) == 200


@pytest.mark.slow
def test_check_store_names_the_variable_to_set(auth_server, as_user):
    as_user(auth_server, None)
    message = one_line_error(lambda: check_store(auth_server.url))
    assert "(HTTP 401): set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD" in message

    as_user(auth_server, "bob")
    message = one_line_error(lambda: check_store(auth_server.url))
    assert "user bob may not write to experiment textclf (HTTP 403)" in message
    assert "scripts/server.sh add-user bob EDIT" in message

    os.environ["MLFLOW_TRACKING_PASSWORD"] = "not bob's"  # as_user's monkeypatch restores it
    message = one_line_error(lambda: check_store(auth_server.url))
    assert "refused the login of MLFLOW_TRACKING_USERNAME=bob (HTTP 401)" in message

    as_user(auth_server, "alice")
    check_store(auth_server.url)


@pytest.mark.slow
def test_add_user_again_changes_the_permission_and_keeps_the_password(auth_server, as_user):
    before = auth_server.password("bob")
    again = server_sh(auth_server.env, "add-user", "carol", "READ")
    assert again.returncode == 0 and "password" in again.stdout
    again = server_sh(auth_server.env, "add-user", "carol", "EDIT")
    assert again.returncode == 0 and "password" not in again.stdout.replace("MLFLOW_TRACKING_PASSWORD", "")
    assert auth_server.password("bob") == before
    carol = as_user(auth_server, "carol")
    assert carol.create_run(carol.get_experiment_by_name("textclf").experiment_id).info.status == "RUNNING"


@pytest.mark.slow
def test_an_edit_user_runs_the_pipeline_and_a_read_user_is_stopped_in_one_line(auth_server, tmp_path,
                                                                                 tiny_random_bert, as_user):
    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)},
                 train={"epochs": 2, "lr_head": 1e-2})
    subprocess.run(["git", "commit", "-qam", "tiny"], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    uri = {"MLFLOW_TRACKING_URI": auth_server.url}
    proc = dvc_run(repo, "repro", env={**uri, **auth_server.login("alice")})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run_id = json.loads((repo / "reports/mlflow_run.json").read_text())["run_id"]
    admin = as_user(auth_server, "admin")
    run = admin.get_run(run_id)
    versions = admin.search_model_versions(f"name = 'textclf' and run_id = '{run_id}'")
    assert run.info.status == "FINISHED" and "test_accuracy" in run.data.metrics
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/") and len(versions) == 1

    proc = dvc_run(repo, "repro", "--force", "--single-item", "train", env={**uri, **auth_server.login("bob")})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "user bob may not write to experiment textclf (HTTP 403)" in out, out[-3000:]
