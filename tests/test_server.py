"""The team's tracking server (scripts/server.sh: PostgreSQL + `mlflow server` with proxied
artifacts), used as a teammate would: real PostgreSQL, real mlflow server, real `dvc repro`
and `dvc queue`. One server for the module; the tests share one repo copy reproduced on it."""
import glob
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from reaper import reaper
from conftest import GIT_ENV, REPO, copy_repo, dvc, dvc_run, free_port, server, venv_env, write_params
from test_browser import SHOTS, browser, wait_for_text  # noqa: F401  (browser is a fixture)
from test_serving import invoke
from textclf.errors import UserError
from textclf.tracking.store import check_store

SCRIPT = REPO / "scripts" / "server.sh"
LABELS = {"business", "entertainment", "politics", "sport", "tech"}
NO_POSTGRES = ("PostgreSQL is not installed (no initdb/pg_ctl): `apt-get install postgresql` "
               "(.ci/run does this where apt-get can run)")


def postgres_installed() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or bool(shutil.which("pg_ctl"))


def server_sh(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TEXTCLF_PYTHON": sys.executable, **env})


@dataclass
class Team:
    url: str
    env: dict  # scripts/server.sh's settings
    state: Path


@contextlib.contextmanager
def team_server(prefix: str, **settings: str):
    """scripts/server.sh started with a state folder and free ports of its own, plus `settings`
    (its environment variables), and stopped afterwards -> Team."""
    if not postgres_installed():
        pytest.skip(NO_POSTGRES)
    # Not under pytest's tmp folder: it is closed (0700) to the postgres user the script runs as.
    state = Path(tempfile.mkdtemp(prefix=prefix))
    state.chmod(0o755)
    ports = set()
    while len(ports) < 2:
        ports.add(free_port())
    mlflow_port, pg_port = sorted(ports)
    env = {"TEXTCLF_STATE": str(state), "TEXTCLF_MLFLOW_PORT": str(mlflow_port),
           "TEXTCLF_PG_PORT": str(pg_port), **settings}
    # stopped with the test run however it ends: PostgreSQL and mlflow server are daemons
    stop = reaper().run(["bash", "-c", 'bash "$0" stop; rm -rf "$TEXTCLF_STATE"', str(SCRIPT)],
                        {**os.environ, "TEXTCLF_PYTHON": sys.executable, **env})
    started = server_sh(env, "start")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield Team(f"http://127.0.0.1:{mlflow_port}", env, state)
    finally:
        stopped = server_sh(env, "stop")
        reaper().done(stop)
        shutil.rmtree(state, ignore_errors=True)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture(scope="module")
def team():
    with team_server("textclf-server-") as server:
        yield server


@pytest.fixture(scope="module")
def served(team, tmp_path_factory, tiny_random_bert):
    """A repo copy after `MLFLOW_TRACKING_URI=<server> dvc repro` -> (repo, output). The
    encoder is conftest's tiny RANDOM BERT: the server is plumbing (the packaged MiniLM's
    `dvc repro` is test_pipeline's)."""
    repo = copy_repo(tmp_path_factory.mktemp("served") / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)},
                 train={"epochs": 3, "lr_head": 1e-2})  # every guard passes: a champion
    subprocess.run(["git", "commit", "-qam", "tiny"], cwd=repo, check=True, env={**os.environ, **GIT_ENV})
    return repo, dvc(repo, "repro", env={"MLFLOW_TRACKING_URI": team.url})


def test_the_script_names_the_package_when_postgres_is_missing(tmp_path):
    proc = server_sh({"TEXTCLF_STATE": str(tmp_path), "TEXTCLF_PG_BIN": str(tmp_path / "nowhere")}, "start")
    assert proc.returncode == 1
    assert "apt-get install postgresql" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_script_refuses_a_port_in_use_before_creating_anything(tmp_path):
    if not postgres_installed():
        pytest.skip(NO_POSTGRES)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for var in ("TEXTCLF_PG_PORT", "TEXTCLF_MLFLOW_PORT"):
            env = {"TEXTCLF_STATE": str(tmp_path / "state"), "TEXTCLF_PG_PORT": str(free_port()),
                   "TEXTCLF_MLFLOW_PORT": str(free_port()), var: port}
            proc = server_sh(env, "start")
            assert proc.returncode == 1, proc.stdout
            assert proc.stderr.strip() == f"server.sh: port {port} is in use by another program: set {var} to a free port"
            assert not (tmp_path / "state").exists()


def test_dvc_repro_logs_the_pipeline_to_the_server(served, team):
    repo, out = served
    assert set(re.findall(r"Running stage '(\w+)'", out)) == {
        "ingest", "tokenize", "split", "baseline", "features", "train", "export", "evaluate", "labels", "report"}
    run_file = json.loads((repo / "reports/mlflow_run.json").read_text())
    assert run_file["tracking_uri"] == team.url
    client = MlflowClient(team.url)
    run = client.get_run(run_file["run_id"])
    assert run.info.status == "FINISHED"
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert run.data.metrics["test_accuracy"] == pytest.approx(metrics["accuracy"])
    assert run.data.params["train.epochs"] == "3" and "git_commit" in run.data.tags
    # Proxied: the run's artifacts went through the server into its destination, none to the client.
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")
    assert not (repo / "mlruns").exists()
    stored = team.state / "mlartifacts" / run.info.experiment_id / run.info.run_id / "artifacts"
    assert (stored / "report" / "report.html").read_bytes() == (repo / "reports/report.html").read_bytes()
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert {"report/report.html", "report/confusion.png", "report/ingest_report.json"} <= logged

    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(team.url)
    try:
        model = mlflow.pyfunc.load_model(run_file["model_uri"])
    finally:
        mlflow.set_tracking_uri(previous)
    got = model.predict(pd.DataFrame({"text": ["Shares fell after the profit warning."]}))
    assert got["label"].iloc[0] in LABELS
    assert abs(got.filter(like="prob_").sum(axis=1).iloc[0] - 1) < 1e-5


def test_the_champion_predicts_and_serves_from_the_server(served, team, tmp_path):
    """`models:/textclf@champion` resolves through the server's registry for textclf.predict
    and for `mlflow models serve`, and both give the same label."""
    repo, _ = served
    assert json.loads((repo / "reports/metrics.json").read_text())["registry"]["champion"] == 1
    env = {**venv_env(), "MLFLOW_TRACKING_URI": team.url, "PYTHONPATH": str(REPO)}
    text = "Shares fell after the profit warning."
    cli = subprocess.run([sys.executable, "-m", "textclf.predict", "models:/textclf@champion"],
                         input=text, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr[-2000:]
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/textclf@champion",
           "-h", "127.0.0.1", "-p", url.rsplit(":", 1)[1], "--env-manager", "local"]
    with server(cmd, tmp_path, f"{url}/ping", tmp_path / "serve.log", env={"MLFLOW_TRACKING_URI": team.url}):
        status, answer = invoke(url, [text])
    assert status == 200
    assert answer["predictions"][0]["label"] == cli.stdout.split("\t")[1] in LABELS


def test_the_server_ui_shows_the_run_and_its_artifacts(served, team, browser):  # noqa: F811
    repo, _ = served
    run = json.loads((repo / "reports/mlflow_run.json").read_text())
    page = f"{team.url}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"
    browser.set_window_size(1400, 2400)
    browser.get(page)
    body = wait_for_text(browser, ["test_accuracy", "guard.load_audit"])
    for text in ("test_accuracy", "test_macro_f1", "train.lr_encoder", "guard.load_audit"):
        assert text in body, text
    browser.get(f"{page}/artifacts/report/report.html")  # listed through the artifact proxy
    body = wait_for_text(browser, ["report.html", "confusion.png"])
    assert "report.html" in body and "confusion.png" in body
    browser.save_screenshot(str(SHOTS / "mlflow_server_artifacts.png"))


def wait_for_queue(repo: Path, env: dict, seconds: float = 1500) -> str:
    """`dvc queue status` once nothing is queued or running (bounded)."""
    deadline = time.monotonic() + seconds
    while True:
        status = dvc(repo, "queue", "status", env=env)
        if not re.search(r"\b(Queued|Running)\b", status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"queue still busy after {seconds} s:\n{status}")
        time.sleep(5)


@pytest.mark.slow
def test_queued_experiments_run_two_at_a_time_on_the_server(served, team):
    """Three `dvc exp run --queue`, `dvc queue start -j 2`: three FINISHED runs, no errors.
    They log to a new experiment, which the two first trains both find missing and create."""
    repo, _ = served
    env = {"MLFLOW_TRACKING_URI": team.url, "MLFLOW_EXPERIMENT_NAME": "queued"}
    for seed in (1, 2, 3):
        dvc(repo, "exp", "run", "--queue", "-S", f"train.seed={seed}", "-n", f"seed-{seed}", env=env)
    dvc(repo, "queue", "start", "-j", "2", env=env)  # workers inherit this environment
    status = wait_for_queue(repo, env)
    assert status.count("Success") == 3 and "Failed" not in status, status

    client = MlflowClient(team.url)
    exp = client.get_experiment_by_name("queued")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.params["train.seed"] for r in runs) == ["1", "2", "3"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert all("test_accuracy" in r.data.metrics for r in runs)
    shown = json.loads(dvc(repo, "exp", "show", "--json", "--no-pager"))
    names = {exp["revs"][0].get("name") for baseline in shown for exp in baseline.get("experiments") or []}
    assert {"seed-1", "seed-2", "seed-3"} <= names


@pytest.mark.slow
def test_a_stopped_server_fails_train_at_its_start_and_keeps_its_runs(served, team, tmp_path):
    """Stop both servers: train fails in one line naming the URI before any training.
    Start again: PostgreSQL still holds the run logged before. The module's other tests,
    in any order, find the server running again, even when an assertion here fails, and
    `served` as it was: dvc runs in a copy (it deletes a stage's outputs before running it)."""
    repo = tmp_path / "repo"
    shutil.copytree(served[0], repo, symlinks=True)
    before = json.loads((repo / "reports/mlflow_run.json").read_text())
    stopped = server_sh(team.env, "stop")
    try:
        assert "mlflow server stopped" in stopped.stdout and "PostgreSQL stopped" in stopped.stdout
        assert server_sh(team.env, "status").returncode == 3

        proc = dvc_run(repo, "repro", "--force", "--single-item", "train", env={"MLFLOW_TRACKING_URI": team.url})
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0
        assert f"MLflow tracking server {team.url} is unreachable" in out
        assert "Traceback" not in out and "MLflow run" not in out  # train never opened a run
    finally:
        started = server_sh(team.env, "start")
    assert started.returncode == 0, started.stdout + started.stderr
    again = server_sh(team.env, "start")  # idempotent
    assert "PostgreSQL already running" in again.stdout and "mlflow server already running" in again.stdout
    assert MlflowClient(team.url).get_run(before["run_id"]).info.status == "FINISHED"
    # another database password while mlflow server runs: it keeps its own, which still logs in
    changed = server_sh({**team.env, "TEXTCLF_PG_PASSWORD": "changed-under-it"}, "start")
    assert changed.returncode == 1 and changed.stderr.strip() == (
        "server.sh: mlflow server runs with another database password than TEXTCLF_PG_PASSWORD: "
        "run 'scripts/server.sh stop' first to change it")
    assert psql(team, "SELECT 1").returncode == 0


def psql(team: Team, sql: str, **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    """psql as the server's `mlflow` role, with the password the server started with: a new
    connection, as mlflow server's next one. `popen`: a Popen (stdin a pipe) instead of a run."""
    exe = (sorted(glob.glob("/usr/lib/postgresql/*/bin/psql")) or [shutil.which("psql")])[-1]
    cmd = [exe, "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", team.env["TEXTCLF_PG_PORT"],
           "-U", "mlflow", "-d", "mlflow", *(["-c", sql] if sql else [])]
    env = {**os.environ, "PGPASSWORD": (team.state / "postgres.password").read_text().strip()}
    if popen:
        return subprocess.Popen(cmd, env=env, text=True, **popen)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def test_two_trainings_tagging_a_new_experiment_at_once_both_start(team, monkeypatch):
    """Issue 29, item 24, on real PostgreSQL: another training's insert of the new experiment's
    check tag is open when this one's arrives, which waits on the key and, at the other's
    commit, fails on it (UniqueViolation on experiment_tag_pk). check_store writes again."""
    import threading

    from textclf.tracking import runs, store
    exp_id = MlflowClient(team.url).create_experiment("colliding")
    for module in (runs, store):
        monkeypatch.setattr(module, "EXPERIMENT", "colliding")
    other = psql(team, "", stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    other.stdin.write("BEGIN; INSERT INTO experiment_tags (key, value, experiment_id) "
                      f"VALUES ('textclf.checked', '0', {exp_id});\n")
    other.stdin.flush()
    tag_insert = "query LIKE 'INSERT INTO experiment_tags%'"
    assert until(lambda: sessions(team, f"state = 'idle in transaction' AND {tag_insert}")), "no other insert"
    failed = []
    checking = threading.Thread(target=lambda: failed.extend(catch(lambda: check_store(team.url))))
    checking.start()
    until(lambda: sessions(team, f"wait_event_type = 'Lock' AND {tag_insert}") or not checking.is_alive())
    collided = checking.is_alive()  # this insert waits on the other's key
    other.communicate("COMMIT;\n", timeout=60)
    checking.join(60)
    assert collided, "check_store's tag insert never waited on the other one"
    assert failed == [], failed
    assert MlflowClient(team.url).get_experiment(exp_id).tags["textclf.checked"] != "0"


def sessions(team: Team, where: str) -> int:
    """How many other PostgreSQL sessions match `where` (pg_stat_activity)."""
    got = psql(team, f"SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND {where}")
    return int(got.stdout.strip() or 0)


def until(condition, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not (met := condition()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(met)


def catch(call) -> list[Exception]:
    try:
        call()
    except Exception as err:  # reported by the test's assert
        return [err]
    return []


def test_a_store_that_answers_an_error_is_not_said_to_be_down(team, monkeypatch):
    """The server runs and refuses the write (here: the experiment is deleted): the line
    quotes its error and does not say to start the server."""
    from textclf.tracking import runs, store
    client = MlflowClient(team.url)
    client.delete_experiment(client.create_experiment("deleted"))
    monkeypatch.setattr(runs, "EXPERIMENT", "deleted")
    monkeypatch.setattr(store, "EXPERIMENT", "deleted")
    with pytest.raises(UserError) as caught:
        check_store(team.url)
    message = str(caught.value)
    assert "start the server" not in message and "the server runs and gave this error" in message
    assert "active" in message and len(message.splitlines()) == 1


def stop_postgres(state: Path) -> None:
    """PostgreSQL alone, as a crash or an admin would stop it; mlflow server keeps running."""
    pg_ctl = (sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")) or [shutil.which("pg_ctl")])[-1]
    cmd = [pg_ctl, "-D", str(state / "postgres"), "-m", "fast", "-w", "stop"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.mark.slow  # 79 s on 2 loaded cores: a dvc train and a restart of both servers
def test_postgres_down_fails_train_in_seconds_naming_the_database(served, team, tmp_path):
    """Issue 24: with PostgreSQL down, mlflow server still answers /health (200), and MLflow's
    client retried for minutes before a line that said to start the server. check_store fails
    in seconds, naming the server's database, and `server.sh start` brings PostgreSQL back and
    restarts mlflow server. A worker that found the database gone answers 503 at once or, when
    it had no connection yet, retries it for minutes: both end in the same line."""
    repo = tmp_path / "repo"
    shutil.copytree(served[0], repo, symlinks=True)
    stop_postgres(team.state)
    try:
        assert "PostgreSQL: stopped" in server_sh(team.env, "status").stdout
        started = time.monotonic()
        with pytest.raises(UserError) as caught:
            check_store(team.url)
        assert time.monotonic() - started < 30
        message = str(caught.value)
        assert len(message.splitlines()) == 1 and "start the server (" not in message
        assert message.startswith(f"MLflow tracking server {team.url} answers")
        assert "backend store" in message and "scripts/server.sh start" in message

        proc = dvc_run(repo, "repro", "--force", "--single-item", "train", env={"MLFLOW_TRACKING_URI": team.url})
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and f"MLflow tracking server {team.url} answers" in out, out[-3000:]
        assert "Traceback" not in out and "MLflow run" not in out  # train never opened a run
    finally:
        restarted = server_sh(team.env, "start")
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "PostgreSQL was down under the running mlflow server: restarting" in restarted.stdout
    assert "PostgreSQL started" in restarted.stdout and "mlflow server running" in restarted.stdout
    check_store(team.url)


SWEEP_WORKER = """import json, sys, time
from textclf.config import SweepParams, load_params
from textclf.sweep.space import parse_space
from textclf.sweep.study import ask, open_study
cfg = SweepParams(n_trials=8, parallel=2, storage=sys.argv[1])
dims = parse_space(load_params(sys.argv[2]))
study = open_study(cfg, dims, [], cfg.storage, join=sys.argv[3] == "join")
numbers = []
if sys.argv[3] == "start":  # the first machine creates the study; both workers then join it
    sys.exit(0)
while (trial := ask(study, cfg, dims)) is not None:
    time.sleep(0.05)  # a trial's work: the other worker asks meanwhile
    study.tell(trial, trial.params["train.lr_encoder"])
    numbers.append(trial.number)
print(json.dumps(numbers))"""


def test_two_sweep_workers_on_one_postgresql_study_run_disjoint_trials_n_trials_in_all(team, tmp_path):
    """The study in the server's own `optuna` database: a second machine's --join shares it;
    no trial runs twice, and n_trials is the total of both."""
    password = (team.state / "postgres.password").read_text().strip()
    url = f"postgresql+psycopg://mlflow:{password}@127.0.0.1:{team.env['TEXTCLF_PG_PORT']}/optuna"
    params = write_params(tmp_path / "params.yaml")
    run = [sys.executable, "-c", SWEEP_WORKER, url, str(params)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    started = subprocess.run(run + ["start"], capture_output=True, text=True, env=env, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    workers = [subprocess.Popen(run + ["join"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(2)]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert all(w.returncode == 0 for w in workers), [err[-2000:] for _, err in outputs]
    mine, theirs = (set(json.loads(out.splitlines()[-1])) for out, _ in outputs)
    assert not mine & theirs and len(mine | theirs) == 8 and mine and theirs, (mine, theirs)
