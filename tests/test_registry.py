"""The model registry: versions, the challenger and champion aliases, the promotion gate,
and predicting from and serving `models:/textclf@champion`. Real SQLite store; the encoder is the tiny
RANDOM BERT from conftest (wiring, not accuracy)."""
import json
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from textclf.registry import SPLIT_TAG, promotion, split_hash

from conftest import REPO, free_port, run_baseline, run_evaluate, run_train, server, venv_env
from test_serving import invoke

PASS = {"guard.load_audit": "pass", "guard.collapse": "pass", SPLIT_TAG: "s1", "test_macro_f1": "0.8"}


@pytest.mark.parametrize("new, champion, promote, why", [
    (PASS, None, True, "first version"),
    ({**PASS, "guard.collapse": "collapsed"}, None, False, "guards not passed: collapse"),
    ({**PASS, "test_macro_f1": "0.81"}, {**PASS, "version": "3"}, True, "0.8100 >= champion version 3's 0.8000"),
    (PASS, {**PASS, "version": "3"}, True, ">="),  # equal is enough
    ({**PASS, "test_macro_f1": "0.79"}, {**PASS, "version": "3"}, False, "0.7900 < champion version 3's"),
    ({**PASS, "test_macro_f1": "0.99", SPLIT_TAG: "s2"}, {**PASS, "version": "3"}, False,
     "another test split"),
])
def test_promotion_gate(new, champion, promote, why):
    decided, reason = promotion(new, champion)
    assert decided == promote and why in reason


def test_split_hash_is_the_set_of_documents():
    assert split_hash(["b", "a"]) == split_hash(["a", "b"]) != split_hash(["a", "c"])


def evaluate_run(p, tmp, guards: dict) -> dict:
    (tmp / "guards.json").write_text(json.dumps({k: {"status": v, "message": ""} for k, v in guards.items()}))
    run_evaluate(p)
    return json.loads((tmp / "metrics.json").read_text())


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
    assert "guards not passed: collapse" in reg["reason"]
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
