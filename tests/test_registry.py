"""The model registry: versions, the challenger and champion aliases, the promotion gate,
and predicting from and serving `models:/textclf@champion`. Real SQLite store; the encoder is the tiny
RANDOM BERT from conftest (wiring, not accuracy)."""
import json
import logging
import socket
import subprocess
import sys
import time

import pytest
from mlflow.tracking import MlflowClient

from textclf.tracking.registry import (SPLIT_HASH_PREFIX, SPLIT_TAG, best_version, register, split_hash,
                                      version_tags)
from textclf.evaluate.metrics_file import read_metrics
from textclf.severity import severity

from conftest import REPO, free_port, run_baseline, run_evaluate, run_train, server, venv_env, write_params
from test_serving import invoke

PASS = {"guard.load_audit": "pass", "guard.collapse": "pass", SPLIT_TAG: "s1", "test_macro_f1": "0.8"}


def v(version: int, **tags) -> dict:
    return {**PASS, **{k.replace("__", "."): val for k, val in tags.items()}, "version": str(version)}


@pytest.mark.parametrize("versions, best", [
    ([], None),
    ([v(1)], "1"),
    ([v(1, test_macro_f1="0.9"), v(2)], "1"),  # the best, not the newest
    ([v(1), v(2)], "2"),  # a tie goes to the newest
    ([v(1), v(2, test_macro_f1="0.99", guard__collapse="collapsed")], "1"),  # an alarm never wins
    ([v(1), v(2, test_macro_f1="0.99", guard__load_audit="fail")], "1"),
    ([v(1), v(2, test_macro_f1="0.81", guard__lr_sanity="warn", guard__collapse="recovered",
           guard__load_audit="allowed")], "2"),  # warnings compete on their score
    ([v(1, test_macro_f1="0.99", **{SPLIT_TAG: "s2"}), v(2)], "2"),  # another split does not compare
])
def test_the_champion_is_the_best_eligible_version_on_the_split(versions, best):
    found = best_version(versions, "s1")
    assert (found["version"] if found else None) == best


def test_every_guard_status_has_one_severity():
    assert {s: severity(s) for s in ("fail", "collapsed", "warn", "allowed", "recovered", "pass")} == {
        "fail": "alarm", "collapsed": "alarm", "warn": "warning", "allowed": "warning",
        "recovered": "warning", "pass": "pass"}
    with pytest.raises(ValueError, match="unknown guard status 'odd'"):
        severity("odd")


def logged_runs(uri: str, n: int) -> list[dict]:
    """n runs with a (stub) logged model, as register() gets them from a training."""
    import mlflow
    mlflow.set_tracking_uri(uri)  # conftest restores it after the test
    runs = []
    for _ in range(n):
        with mlflow.start_run() as active:
            mlflow.log_text("flavors: {}", "model/MLmodel")
        runs.append({"tracking_uri": uri, "run_id": active.info.run_id,
                     "model_uri": f"runs:/{active.info.run_id}/model"})
    return runs


RACER = """import json, sys, time
from pathlib import Path
from mlflow.tracking import MlflowClient
from textclf.tracking import registry
run, tags, stall = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "stall"
stalled, go = Path(sys.argv[4]), Path(sys.argv[5])
set_alias = MlflowClient.set_registered_model_alias
def slow_set(self, name, alias, version):
    if alias == "champion" and stall and not stalled.exists():
        stalled.touch()  # stall between deciding and writing, as a loaded machine may
        for _ in range(600):
            if go.exists():
                break
            time.sleep(0.1)
    return set_alias(self, name, alias, version)
MlflowClient.set_registered_model_alias = slow_set
print(json.dumps(registry.register(run, "racing", tags)))"""


def test_two_racing_evaluates_leave_the_better_version_champion(tmp_path):
    """Evaluate A (macro-F1 0.70) decides, then stalls before writing the alias; evaluate B
    (0.90) registers, decides and writes meanwhile; then A writes. The champion must end on B."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = logged_runs(uri, 2)
    env = {**venv_env(), "PYTHONPATH": str(REPO / "src")}
    stalled, go = tmp_path / "a-stalled", tmp_path / "a-go"

    def racer(run, f1, how):
        tags = {**PASS, "test_macro_f1": f1}
        return subprocess.Popen([sys.executable, "-c", RACER, json.dumps(run), json.dumps(tags), how,
                                 str(stalled), str(go)], env=env, stdout=subprocess.PIPE, text=True)
    a = racer(runs[0], "0.70", "stall")
    for _ in range(600):
        if stalled.exists() or a.poll() is not None:
            break
        time.sleep(0.1)
    assert stalled.exists(), "evaluate A never reached the alias write"
    assert racer(runs[1], "0.90", "run").wait(120) == 0  # B: registers, decides, writes
    go.touch()  # A writes what it decided before B existed
    assert a.wait(120) == 0
    client = MlflowClient(uri)
    assert client.get_model_version_by_alias("racing", "champion").version == 2
    assert json.loads(a.stdout.read())["champion"] == 2


def test_split_hash_is_the_set_of_documents_and_their_labels():
    docs = [("b", "sport"), ("a", "tech")]
    assert split_hash(docs) == split_hash(docs[::-1]) != split_hash([("a", "tech"), ("c", "sport")])
    assert split_hash(docs) != split_hash([("b", "sport"), ("a", "sport")])  # one document relabelled
    assert split_hash(docs).startswith(SPLIT_HASH_PREFIX)


def test_a_champion_hashed_without_labels_counts_as_another_split(tmp_path, caplog):
    """A version registered before labels were hashed: its bare md5 could name a split with
    other ground truth, so a new version is never compared with it, and the log says why."""
    old, new = logged_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", 2)
    assert register(old, "m", {**PASS, SPLIT_TAG: "0cc175b9c0f1b6a831c399e269772661"})["promoted"]
    with caplog.at_level(logging.INFO, logger="textclf.tracking.registry"):
        decision = register(new, "m", {**PASS, "test_macro_f1": "0.99", SPLIT_TAG: split_hash([("a", "x")])})
    assert (decision["promoted"], decision["champion"]) == (False, 1)
    assert "test-split hash made without labels" in decision["reason"]
    assert "made without labels" in caplog.text


def test_a_champion_whose_silent_class_guard_warned_is_named_so(tmp_path, caplog):
    """Issue 50: a run that never predicted 15 of 57 classes became champion with the reason
    "the best of the eligible versions" and nothing more. A silent_class warning does not block
    (a warning, not an alarm; macro-F1 counts each silent class as 0), but the decision, its log
    line, the champion's history and the version's tags name the classes."""
    old, new = logged_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", 2)
    split = split_hash([("a", "x")])
    assert "silent" not in register(old, "m", {**PASS, SPLIT_TAG: split, "guard.silent_class": "pass"})["reason"]
    silent = [f"class-{i:02d}" for i in range(12)]
    tags = version_tags({"accuracy": 0.7, "macro_f1": 0.9, "gap": {"accuracy": 0.0},
                         "guards": {"load_audit": "pass", "collapse": "pass", "silent_class": "warn"},
                         "silent_classes": [{"class": c, "support": 3, "predicted": 0} for c in silent]},
                        split, "abc", None)
    with caplog.at_level(logging.INFO, logger="textclf.tracking.registry"):
        decision = register(new, "m", tags)
    named = ("silent_class warned: it never recalls 12 class(es) on validation (class-00, class-01, "
             "class-02, class-03, class-04, class-05, class-06, class-07, class-08, class-09 and 2 more)")
    assert decision["promoted"] and decision["reason"].endswith(named), decision["reason"]
    assert [r.levelname for r in caplog.records if named in r.getMessage()] == ["WARNING"]
    assert decision["history"][-1]["why"].startswith("test macro-F1 0.9000: the best")
    assert "silent_class warned" in decision["history"][-1]["why"]
    blended = version_tags({"accuracy": 0.7, "macro_f1": 0.6, "gap": {"accuracy": -0.1}, "guards": {},
                            "baseline": {"accuracy": 0.8}, "blend": {"accuracy": 0.85, "macro_f1": 0.75}},
                           split, "abc", None)  # a blended export: the version serves the blend
    assert (blended["test_macro_f1"], blended["test_accuracy"], blended["gap_accuracy"]) == \
        ("0.750000", "0.850000", "+0.050000")
    version = MlflowClient(new["tracking_uri"]).get_model_version("m", "2")
    assert json.loads(version.tags["silent_classes"]) == silent


def evaluate_run(p, tmp, guards: dict) -> dict:
    (tmp / "guards.json").write_text(json.dumps({k: {"status": v, "message": ""} for k, v in guards.items()}))
    run_evaluate(p)
    return read_metrics(tmp / "metrics.json", tmp / "pc.json")


@pytest.mark.slow
def test_versions_aliases_gate_and_predict_from_champion(prepared):
    tmp, p = prepared
    run_baseline(p)
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    ok = {"load_audit": "pass", "optimizer_coverage": "pass", "collapse": "pass"}

    run_train(p)
    first = evaluate_run(p, tmp, ok)["registry"]
    assert (first["version"], first["champion"], first["promoted"]) == (1, 1, True)
    again = evaluate_run(p, tmp, ok)["registry"]  # an evaluate rerun registers nothing new
    assert again["version"] == 1 and len(client.search_model_versions("name = 'textclf'")) == 1

    run_train(p)  # a second training: its guards fail, so it never becomes champion
    second = evaluate_run(p, tmp, {**ok, "collapse": "collapsed"})
    reg = second["registry"]
    assert (reg["version"], reg["champion"], reg["promoted"]) == (2, 1, False)
    assert "guard alarms: collapse" in reg["reason"]
    assert int(client.get_model_version_by_alias("textclf", "challenger").version) == 2
    tags = client.get_model_version("textclf", "2").tags
    assert tags["guard.collapse"] == "collapsed" and tags["test_macro_f1"] == f"{second['macro_f1']:.6f}"
    assert {"git_commit", SPLIT_TAG, "test_accuracy", "gap_accuracy"} <= set(tags)

    text = "The central bank raised interest rates again."
    env = {**venv_env(), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}", "PYTHONPATH": str(REPO)}
    champion = subprocess.run([sys.executable, "-m", "textclf.predict", "models:/textclf@champion"],
                              input=text, capture_output=True, text=True, env=env, cwd=tmp)
    assert champion.returncode == 0, champion.stderr[-2000:]
    local = subprocess.run([sys.executable, "-m", "textclf.predict", "model"], input=text,
                           capture_output=True, text=True, env=env, cwd=tmp)
    assert champion.stdout.split("\t")[1] in second["per_class"]  # a label of this corpus
    assert champion.stdout.count("\n") == local.stdout.count("\n") == 1
    missing = subprocess.run([sys.executable, "-m", "textclf.predict", "models:/textclf@nope"],
                             input=text, capture_output=True, text=True, env=env, cwd=tmp)
    assert missing.returncode == 1 and "models:/textclf@nope" in missing.stderr
    assert "Traceback" not in missing.stderr
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/textclf@champion",
           "-h", "127.0.0.1", "-p", url.rsplit(":", 1)[1], "--env-manager", "local"]
    with server(cmd, tmp, f"{url}/ping", tmp / "serve.log", env=env):
        status, answer = invoke(url, [text])
    assert status == 200 and answer["predictions"][0]["label"] == champion.stdout.split("\t")[1]


def test_logging_a_dataset_another_training_inserted_at_the_same_moment_is_retried(tmp_path, monkeypatch):
    """Two queued trainings log the same tokens at once: the store's second insert fails on
    the dataset's key (seen with PostgreSQL under `dvc queue start -j 2`); log_datasets tries
    again and the run gets its dataset."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from textclf.tracking import runs
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)  # conftest restores it after the test
    (tmp_path / "t.parquet").write_bytes(b"tokens")
    with mlflow.start_run() as active:
        pass
    real, calls = MlflowClient.log_inputs, []

    def racing(self, run_id, datasets=None, models=None):
        calls.append(run_id)
        if len(calls) == 1:
            raise MlflowException('(psycopg.errors.UniqueViolation) duplicate key value violates '
                                  'unique constraint "dataset_pk"')
        return real(self, run_id, datasets=datasets)
    monkeypatch.setattr(MlflowClient, "log_inputs", racing)
    runs.log_datasets(active.info.run_id, {"tokens": str(tmp_path / "t.parquet")}, "training")
    assert len(calls) == 2
    inputs = MlflowClient(uri).get_run(active.info.run_id).inputs.dataset_inputs
    assert [d.dataset.name for d in inputs] == ["tokens"]


def test_the_sweep_leaves_the_runs_of_another_machine_with_the_same_hostname(tmp_path):
    """Cloned VMs, containers: one hostname, other pids. Only a run tagged with this machine
    (or, logged before the tag existed, with no machine) is judged by its pid here."""
    import mlflow

    from textclf.tracking.runs import machine_id, sweep_stale_runs
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("sweep", artifact_location=(tmp_path / "a").as_uri())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tags = {"textclf.host": socket.gethostname(), "textclf.pid": str(dead.pid)}
    mine = client.create_run(exp, tags={**tags, "textclf.machine": machine_id()}).info.run_id
    clone = client.create_run(exp, tags={**tags, "textclf.machine": "0123456789abcdef pid:[1]"}).info.run_id
    untagged = client.create_run(exp, tags=tags).info.run_id
    mlflow.set_tracking_uri(client.tracking_uri)  # conftest restores it after the test
    assert sorted(sweep_stale_runs(exp)) == sorted([mine, untagged])
    assert client.get_run(clone).info.status == "RUNNING"
    assert machine_id() and machine_id() != "0123456789abcdef pid:[1]"


def collide_once(monkeypatch, method: str, error: dict) -> list:
    """MlflowClient.<method>'s first call is a collision, as the server answers it: another
    training makes the same write (it goes through), then this one fails with `error`."""
    from mlflow.exceptions import RestException
    real, calls = getattr(MlflowClient, method), []

    def colliding(self, *args, **kwargs):
        calls.append(args)
        result = real(self, *args, **kwargs)
        if len(calls) == 1:
            raise RestException(error)
        return result
    monkeypatch.setattr(MlflowClient, method, colliding)
    return calls


def test_every_write_of_a_train_start_survives_a_training_making_it_at_the_same_moment(tmp_path, monkeypatch):
    """`dvc queue start -j 2` on a new server (issue 29, item 24): the experiment created, its
    tag, a stale run swept and the model's aliases, each made by two processes at once. The
    loser re-reads or writes again, and goes on."""
    from textclf.tracking.runs import EXPERIMENT, sweep_stale_runs, use_experiment
    from textclf.tracking.store import check_store
    unique = {"error_code": "BAD_REQUEST", "message": "(psycopg.errors.UniqueViolation) duplicate key value "
              'violates unique constraint "experiment_tag_pk"'}
    calls = {m: collide_once(monkeypatch, m, unique) for m in
             ("set_experiment_tag", "set_tag", "set_registered_model_alias")}
    calls["create_experiment"] = collide_once(monkeypatch, "create_experiment", {
        "error_code": "RESOURCE_ALREADY_EXISTS", "message": f"Experiment(name={EXPERIMENT}) already exists."})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    check_store(uri)
    exp_id = use_experiment(uri)
    client = MlflowClient(uri)
    assert "textclf.checked" in client.get_experiment(exp_id).tags
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = client.create_run(exp_id, tags={"textclf.host": socket.gethostname(), "textclf.pid": str(dead.pid)})
    assert sweep_stale_runs(exp_id) == [stale.info.run_id]
    assert "textclf.swept" in client.get_run(stale.info.run_id).data.tags
    decision = register(logged_runs(uri, 1)[0], "m", {**PASS, SPLIT_TAG: split_hash([("a", "x")])})
    assert (decision["version"], decision["champion"], decision["promoted"]) == (1, 1, True)
    assert {m: len(c) for m, c in calls.items()} == {"set_experiment_tag": 2, "set_tag": 2,
                                                     "set_registered_model_alias": 3, "create_experiment": 1}


def test_the_champion_answers_as_params_yaml_says_after_serving_settings_change(prepared):
    """Issue 55: coverage 0.8 (version 2, champion on a tie), back to 0.9: the same training's
    version 1 came back as challenger, "champion stays at 2: test macro-F1 0.3803 < version
    2's 0.3803", and models:/textclf@champion answered at 0.8. Of one training's versions the
    last evaluated competes: each evaluate leaves the champion answering as params.yaml says."""
    from textclf.inference.loading import load_predictor

    tmp, p = prepared
    run_baseline(p)
    run_train(p)
    decisions = []
    for coverage in (0.9, 0.8, 0.9):
        write_params(tmp / "params.yaml", serve={"format": "onnx", "coverage": coverage})
        decisions.append(evaluate_run(p, tmp, {"load_audit": "pass", "optimizer_coverage": "pass",
                                               "collapse": "pass"})["registry"])
        champion = load_predictor("models:/textclf@champion")
        assert champion.review is not None and champion.review.coverage == coverage, decisions[-1]
    assert [(d["version"], d["champion"], d["promoted"]) for d in decisions] == \
        [(1, 1, True), (2, 2, True), (1, 1, True)]
    assert "the same training run as version 2 (the champion)" in decisions[-1]["reason"]
    assert "<" not in decisions[-1]["reason"]


def test_two_equal_scores_are_never_written_with_a_less_than_sign():
    """A version that ties the champion's score loses on the tie rule, and says so."""
    from textclf.tracking.registry import why
    split = {SPLIT_TAG: SPLIT_HASH_PREFIX + "s1"}
    best = v(3, test_macro_f1="0.380300", **split)
    assert why(v(1, test_macro_f1="0.380300", **split), best, best, split[SPLIT_TAG]) == (
        "test macro-F1 0.3803, equal to version 3's: a tie goes to the newer version, which stays "
        "champion on this test split")
    assert why(v(1, test_macro_f1="0.380298", **split), best, best, split[SPLIT_TAG]) == (
        "test macro-F1 0.380298 < version 3's 0.380300 on this test split")


def test_with_no_champion_the_log_says_so_not_none(tmp_path, caplog):
    """A first version with a guard alarm leaves no champion: "no champion yet", never
    "champion stays at None" (issue 55, rough edges)."""
    (run,) = logged_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", 1)
    with caplog.at_level(logging.INFO, logger="textclf.tracking.registry"):
        decision = register(run, "m", {**PASS, "guard.collapse": "collapsed"})
    assert (decision["promoted"], decision["champion"]) == (False, None)
    assert "(challenger); no champion yet: " in caplog.text and "None" not in caplog.text
