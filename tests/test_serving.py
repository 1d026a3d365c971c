"""The logged MLflow pyfunc, the predict CLI and the Predictor give the same answers;
`mlflow models predict` and `mlflow models serve` work offline on 127.0.0.1.
The encoder is the tiny RANDOM BERT from conftest: these tests check wiring, not accuracy."""
import ast
import importlib
import importlib.metadata
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from textclf import serve
from textclf.inference.loading import load_predictor
from textclf.inference.model_uri import model_folder
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor

from conftest import REPO, free_port, server, venv_env

TEXTS = ["The central bank raised interest rates again to cool inflation.",
         "The striker scored twice as the home side won the cup final.",
         "A new phone with a faster chip and a better camera goes on sale."]


@pytest.fixture
def trained(tiny_trained, monkeypatch):
    """The shared tiny training (read-only), its store as the tracking URI."""
    tmp, run = tiny_trained
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    mlflow.set_tracking_uri(run["tracking_uri"])  # conftest restores it after the test
    return tmp, run


@pytest.fixture(params=["torch", "onnx"])
def served(trained, request):
    """(folder, the logged pyfunc's URI, a predictor giving what it must answer) for the
    PyTorch model train logs and the ONNX export evaluate checked and logged."""
    tmp, run = trained
    if request.param == "torch":
        return tmp, run["model_uri"], Predictor(tmp / "model")
    serving = json.loads((tmp / "metrics.json").read_text())["serving"]
    assert serving["format"] == "onnx", serving  # float32 agrees with PyTorch on the tiny model
    return tmp, serving["model_uri"], OnnxPredictor(tmp / "export")


def mlflow_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mlflow", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)


def test_pyfunc_matches_predictor_and_cli(trained, tmp_path):
    tmp, run = trained
    expected = load_predictor(str(tmp / "model")).predict(TEXTS)  # the one loader: serve.*'s defaults
    assert list(expected.columns[:2]) == ["label", "probability"]
    probs = expected.filter(like="prob_").to_numpy()
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert np.allclose(expected["probability"], probs.max(axis=1))

    loaded = mlflow.pyfunc.load_model(run["model_uri"])
    assert loaded.metadata.signature.inputs.input_names() == ["text"]
    got = loaded.predict(pd.DataFrame({"text": TEXTS}))
    pd.testing.assert_frame_equal(got, expected, atol=1e-5)

    files = []
    for i, text in enumerate(TEXTS):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_text(text, encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "textclf.predict", str(tmp / "model"), *map(str, files)],
                         capture_output=True, text=True, check=True)
    rows = [line.split("\t") for line in cli.stdout.splitlines()]
    assert [r[1] for r in rows] == expected["label"].tolist()
    assert np.allclose([float(r[2]) for r in rows], expected["probability"], atol=1e-4)
    piped = subprocess.run([sys.executable, "-m", "textclf.predict", str(tmp / "model")],
                           input="\n".join(TEXTS) + "\n\n", capture_output=True, text=True, check=True)
    assert [line.split("\t")[1] for line in piped.stdout.splitlines()] == expected["label"].tolist()


def test_the_signature_lists_every_column_the_model_returns(served):
    """Issue 55: the logged signature listed label, probability and prob_* but not labels,
    set_size and needs_review, which the model returns (what spark_udf and MLflow clients
    read): name, order and type of each column, for the PyTorch and the served ONNX model."""
    _, uri, _ = served
    loaded = mlflow.pyfunc.load_model(uri)
    got = loaded.predict(pd.DataFrame({"text": TEXTS}))
    outputs = {c.name: c.type for c in loaded.metadata.get_output_schema().inputs}
    assert {"labels", "set_size", "needs_review"} <= set(got.columns)
    assert list(outputs) == list(got.columns)
    assert repr(outputs["labels"]) == "Array(string)" and outputs["needs_review"].name == "boolean"
    assert outputs["set_size"].name == "long" and outputs["label"].name == "string"


def test_chunks_pyfunc_predictor_onnx_and_cli_pool_as_evaluate_did(tiny_chunked, tmp_path, monkeypatch, capsys):
    """A model trained with chunks (max pooling, conftest.tiny_chunked): the PyTorch and the
    ONNX pyfunc, both predictors and the predict CLI, given the test documents' texts, window
    them and pool each document's windows as evaluate did from the token store: evaluate's
    per-document probabilities, one row per document."""
    from textclf import predict
    from textclf.evaluate.champion import read_texts

    tmp, run = tiny_chunked
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    mlflow.set_tracking_uri(run["tracking_uri"])  # conftest restores it after the test
    evaluated = pd.read_parquet(tmp / "pred.parquet")
    texts = read_texts(str(tmp / "c.parquet"), evaluated["doc_id"].tolist())
    expected = evaluated.filter(like="prob_").to_numpy()
    metrics = json.loads((tmp / "metrics.json").read_text())
    for model in (Predictor(tmp / "model"), OnnxPredictor(tmp / "export"),
                  mlflow.pyfunc.load_model(run["model_uri"]), mlflow.pyfunc.load_model(metrics["serving"]["model_uri"])):
        got = model.predict(pd.DataFrame({"text": texts}) if hasattr(model, "metadata") else texts)
        assert len(got) == len(evaluated)
        assert np.abs(got.filter(like="prob_").to_numpy() - expected).max() < 1e-5, type(model)
        assert got["label"].tolist() == evaluated["predicted"].tolist()
    files = []
    for i, text in enumerate(texts[:3]):
        files.append(tmp_path / f"doc{i}.txt")
        files[-1].write_text(text, encoding="utf-8")
    predict.main([str(tmp / "model"), *map(str, files)])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [r[1] for r in rows] == evaluated["predicted"].tolist()[:3]
    assert np.allclose([float(r[2]) for r in rows], evaluated["probability"][:3], atol=1e-4)


def test_predict_cli_rejects_a_missing_file_and_a_non_model_folder(trained, tmp_path):
    tmp, _ = trained
    bad = subprocess.run([sys.executable, "-m", "textclf.predict", str(tmp / "model"), "nope.txt"],
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "nope.txt is not a file" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "textclf.predict", str(tmp_path)], input="x\n",
                         capture_output=True, text=True)
    assert bad.returncode == 1 and "not a model folder" in bad.stderr


def test_predict_cli_refuses_empty_input(trained, tmp_path):
    tmp, _ = trained
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\t\n", encoding="utf-8")
    cli = [sys.executable, "-m", "textclf.predict", str(tmp / "model")]
    bad = subprocess.run(cli + [str(blank)], capture_output=True, text=True)
    assert bad.returncode == 1 and f"{blank} is empty or whitespace-only" in bad.stderr
    assert bad.stdout == "" and "Traceback" not in bad.stderr
    bad = subprocess.run(cli, input="\n  \n", capture_output=True, text=True)
    assert bad.returncode == 1 and "stdin holds no text" in bad.stderr and bad.stdout == ""
    with pytest.raises(ValueError, match=r"inputs \[0\] are empty"):
        Predictor(tmp / "model").predict([""])


def test_predict_cli_decodes_stdin_as_it_decodes_files(trained, tmp_path):
    """Windows-1252 bytes (not UTF-8) on stdin: the rules files get, not a tokenizer TypeError."""
    tmp, _ = trained
    raw = b"caf\xe9 prices rose\n"
    (tmp_path / "cafe.txt").write_bytes(raw)
    cli = [sys.executable, "-m", "textclf.predict", str(tmp / "model")]
    from_file = subprocess.run(cli + [str(tmp_path / "cafe.txt")], capture_output=True, text=True)
    from_stdin = subprocess.run(cli, input=raw, capture_output=True)
    assert from_file.returncode == 0 and from_stdin.returncode == 0, from_stdin.stderr[-2000:]
    assert from_stdin.stdout.decode().split("\t")[1:] == from_file.stdout.split("\t")[1:]


def test_predict_refuses_binary_behind_a_utf16_bom(tmp_path, monkeypatch):
    """A UTF-16 BOM (here the start of UTF-32's) then NUL characters: binary, as NUL bytes are
    without a BOM, from a file and from stdin."""
    import io

    from textclf.predict import read_inputs

    data = b"\xff\xfe\x00\x00\x80\x81"
    (tmp_path / "blob.bin").write_bytes(data)
    with pytest.raises(ValueError, match=r"blob.bin is not text \(binary\)"):
        read_inputs([str(tmp_path / "blob.bin")])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    with pytest.raises(ValueError, match=r"stdin is not text \(binary\)"):
        read_inputs([])


def serve_refuses_to_start(argv: list[str], caplog) -> str:
    """textclf.serve stops before serving: exit 1 and one ERROR line, no traceback -> that line."""
    caplog.clear()
    with pytest.raises(SystemExit) as stopped:
        serve.main([*argv, "--port", str(free_port())])
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert stopped.value.code == 1 and len(errors) == 1, [r.getMessage()[:300] for r in errors]
    line = errors[0].getMessage()
    assert "\n" not in line and not errors[0].exc_info and "Traceback" not in caplog.text, caplog.text[-3000:]
    return line


def test_a_models_uri_with_the_tracking_server_down_fails_in_seconds_in_one_line(monkeypatch, caplog):
    """predict and serve: MLflow's own client retries a closed port for about 250 s."""
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with pytest.raises(ValueError) as caught:
        model_folder("models:/textclf@champion")
    message = str(caught.value)
    assert f"MLflow tracking server {uri} is unreachable" in message and "\n" not in message
    line = serve_refuses_to_start(["models:/textclf@champion"], caplog)
    assert f"MLflow tracking server {uri} is unreachable" in line
    assert time.monotonic() - started < 20


def test_textclf_serve_refuses_a_bad_model_at_start_up_in_one_line(trained, tmp_path, caplog):
    (tmp_path / "empty").mkdir()
    lines = {uri: serve_refuses_to_start([uri], caplog) for uri in
             ("models:/textclf@nosuch", str(tmp_path / "nope"), str(tmp_path / "empty"))}
    assert "models:/textclf@nosuch" in lines["models:/textclf@nosuch"]
    assert "no such folder" in lines[str(tmp_path / "nope")]
    assert "no MLmodel" in lines[str(tmp_path / "empty")]


def test_mlflow_models_predict_offline(trained, tmp_path):
    tmp, run = trained
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps({"dataframe_split": {"columns": ["text"], "data": [[t] for t in TEXTS]}}))
    out = tmp_path / "out.json"
    proc = mlflow_cli("models", "predict", "-m", run["model_uri"], "-i", str(inp), "-t", "json",
                      "-o", str(out), "--env-manager", "local", env=venv_env(), cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = pd.DataFrame(json.loads(out.read_text())["predictions"])
    expected = Predictor(tmp / "model").predict(TEXTS)
    assert got["label"].tolist() == expected["label"].tolist()
    assert np.allclose(got["probability"], expected["probability"], atol=1e-5)


LOAD = """import json, sys, mlflow.pyfunc, pandas as pd
model = mlflow.pyfunc.load_model(sys.argv[1])
out = model.predict(pd.DataFrame({"text": json.loads(sys.argv[2])}))
print(json.dumps({"modules": sorted(sys.modules), "textclf": sys.modules["textclf"].__file__,
                  "labels": out["label"].tolist(),
                  "probability": out["probability"].tolist()}))"""


def third_party_imports(module) -> set[str]:
    """Top-level names a module imports anywhere in it, textclf's own excepted."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    return {n.split(".")[0] for n in names} - {"textclf", "__future__"} - set(sys.stdlib_module_names)


def requirement_pins(model_uri: str, folder: Path) -> dict[str, str]:
    local = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=str(folder)))
    return dict(line.split("==") for line in (local / "requirements.txt").read_text().split())


def test_the_logged_model_requires_what_loading_imports(served, tmp_path):
    """Loading the pyfunc imports nothing from ingest (no rensa), the ONNX one no torch or
    transformers, every distribution the loaded textclf modules import is pinned, and every
    pin is one a package index serves."""
    tmp, model_uri, predictor = served
    proc = subprocess.run([sys.executable, "-c", LOAD, model_uri, json.dumps(TEXTS)],
                          capture_output=True, text=True, env=venv_env(), cwd=tmp, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = json.loads(proc.stdout.splitlines()[-1])["modules"]
    if isinstance(predictor, OnnxPredictor):
        assert not {"torch", "transformers", "onnx"} & set(modules)
    ours = [m for m in modules if m.split(".")[0] == "textclf"]
    assert "rensa" not in modules and not {"textclf.data.corpus", "textclf.data.near_dups",
                                           "textclf.data.sources", "textclf.train.loop"} & set(ours)
    owners = importlib.metadata.packages_distributions()
    imported = {name for m in ours for name in third_party_imports(importlib.import_module(m))}
    pins = requirement_pins(model_uri, tmp_path)
    pinned = {n.lower() for n in pins}
    # each imported name comes from a pinned distribution, and each pin is imported
    by_name = {name: {d.lower() for d in owners[name]} for name in imported}
    assert not [name for name, dists in by_name.items() if not dists & pinned], (by_name, pins)
    assert pinned <= set().union(*by_name.values()), f"pins nothing imports: {pins}"
    assert not [v for v in pins.values() if "+" in v], f"local version labels in {pins}"


@pytest.mark.slow
def test_the_logged_model_loads_in_a_fresh_venv_from_its_requirements(served, tmp_path):
    """pip installs the model's requirements.txt alone into a new venv (the same package
    index), and the model loads and predicts there as it does here."""
    tmp, model_uri, predictor = served
    local = Path(mlflow.artifacts.download_artifacts(model_uri, dst_path=str(tmp_path / "m")))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "-r",
                          local / "requirements.txt"], capture_output=True, text=True, timeout=1800)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([venv / "bin" / "python", "-c", LOAD, str(local), json.dumps(TEXTS)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["textclf"].startswith(str(local))  # the code shipped with the model, not ours
    expected = predictor.predict(TEXTS)
    assert got["labels"] == expected["label"].tolist()
    assert np.allclose(got["probability"], expected["probability"], atol=1e-5)


def post(url: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(f"{url}/invocations", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def invoke(url: str, rows: list, column: str = "text") -> tuple[int, dict]:
    return post(url, json.dumps({"dataframe_split": {"columns": [column], "data": [[t] for t in rows]}}).encode())


SECRET = "Zanzibar"  # in every refused request: no answer may echo it


def assert_refused_in_one_line(bad: dict) -> None:
    for name, (status, answer) in bad.items():  # a clear message, no stack trace, paths or input
        message = answer["message"]
        assert status == 400 and "stack_trace" not in answer and str(REPO) not in message, name
        assert "\n" not in message and SECRET not in message and "Failed to predict" not in message, (name, message)


def test_mlflow_models_serve_answers_rest(served, tmp_path):
    tmp, model_uri, predictor = served
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri, "-h", "127.0.0.1",
           "-p", url.rsplit(":", 1)[1], "--env-manager", "local"]
    with server(cmd, tmp, f"{url}/ping", tmp_path / "serve.log", env={"TEXTCLF_SERVE_MAX_ROWS": "5"}):
        status, answer = invoke(url, TEXTS)
        assert status == 200
        got = pd.DataFrame(answer["predictions"])
        bad = {"empty": invoke(url, [SECRET, "  "]), "not text": invoke(url, [SECRET, 7]),
               "too many": invoke(url, [SECRET] + TEXTS * 2)}
    assert_refused_in_one_line(bad)
    assert "inputs [1] are empty or whitespace-only" in bad["empty"][1]["message"]
    assert "inputs [1] are not strings" in bad["not text"][1]["message"]
    assert "has 7 rows; the limit is 5" in bad["too many"][1]["message"]
    expected = predictor.predict(TEXTS)
    assert got["label"].tolist() == expected["label"].tolist()
    assert np.allclose(got["probability"], expected["probability"], atol=1e-5)


def test_textclf_serve_refuses_malformed_requests_in_one_line(trained, tmp_path):
    """MLflow's own refusals (not JSON, not UTF-8, no `text` column, not the scoring format)
    quote the request over several lines; textclf.serve answers them in one line."""
    tmp, run = trained
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "textclf.serve", run["model_uri"], "--port", url.rsplit(":", 1)[1]]
    with server(cmd, tmp, f"{url}/ping", tmp_path / "serve.log"):
        status, answer = invoke(url, TEXTS)
        bad = {"not json": post(url, b'{"dataframe_split": {"columns": ["text"], "data": [["%s"' % SECRET.encode()),
               "not utf-8": post(url, b'{"inputs": ["caf\xe9 %s"]}' % SECRET.encode()),
               "no text column": invoke(url, [SECRET], column=SECRET),
               "no format key": post(url, json.dumps({SECRET: [SECRET]}).encode()),
               "empty": invoke(url, [SECRET, ""]),
               "nested 50 000 deep": post(url, b'{"inputs": %s"%s"%s}' % (b"[" * 50_000, SECRET.encode(),
                                                                        b"]" * 50_000))}
        healthy = invoke(url, TEXTS)[0]
    assert status == 200 and len(answer["predictions"]) == len(TEXTS)
    assert_refused_in_one_line(bad)
    assert bad["not json"][1]["message"].startswith("the request body is not valid JSON in UTF-8")
    assert bad["not utf-8"][1]["message"].startswith("the request body is not valid JSON in UTF-8")
    assert bad["no text column"][1]["message"].startswith("the request does not have the model's input")
    assert bad["no format key"][1]["message"].startswith("the request is not in the scoring format")
    assert "inputs [1] are empty" in bad["empty"][1]["message"]
    assert bad["nested 50 000 deep"][1]["message"].startswith("the request body nests too deep")
    assert healthy == 200 and "RecursionError" not in (tmp_path / "serve.log").read_text()


def test_textclf_serve_refuses_non_strings_in_the_inputs_format_as_in_the_others(trained, tmp_path):
    """MLflow makes strings of every `inputs` value (3 -> "3", null -> "None") before the model
    sees it, so {"inputs": [3]} was classified; textclf.serve refuses it as the model refuses a
    non-string sent as dataframe_split or dataframe_records: 400, one line, position and type."""
    tmp, run = trained
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "textclf.serve", run["model_uri"], "--port", url.rsplit(":", 1)[1]]
    cases = {"int": ([3], 0, "int"), "float": ([3.5], 0, "float"), "null": ([None], 0, "NoneType"),
             "bool": ([True], 0, "bool"), "second row": ([SECRET, 3], 1, "int"),
             "list": ([[SECRET]], 0, "list")}
    with server(cmd, tmp, f"{url}/ping", tmp_path / "serve.log"):
        answers = {name: {
            "inputs": post(url, json.dumps({"inputs": rows}).encode()),
            "instances": post(url, json.dumps({"instances": rows}).encode()),
            "inputs records": post(url, json.dumps({"inputs": [{"text": r} for r in rows]}).encode()),
            "dataframe_split": invoke(url, rows),
            "dataframe_records": post(url, json.dumps({"dataframe_records": [{"text": r} for r in rows]}).encode()),
        } for name, (rows, _, _) in cases.items()}
        answers["column"] = {"inputs": post(url, json.dumps({"inputs": {"text": [3]}}).encode()),
                             "inputs scalar": post(url, json.dumps({"inputs": {"text": 3}}).encode())}
        texts = {"inputs": post(url, json.dumps({"inputs": TEXTS}).encode()),
                 "column": post(url, json.dumps({"inputs": {"text": TEXTS}}).encode()),
                 "records": post(url, json.dumps({"inputs": [{"text": t} for t in TEXTS]}).encode()),
                 "dataframe_split": invoke(url, TEXTS)}
    for name, (rows, position, kind) in {**cases, "column": ([3], 0, "int")}.items():
        assert_refused_in_one_line(answers[name])
        for fmt, (status, answer) in answers[name].items():
            assert f"inputs [{position}] are not strings (got {kind})" in answer["message"], (name, fmt, answer)
    assert all(status == 200 for status, _ in texts.values()), texts  # strings still classify, alike
    assert len({json.dumps(answer["predictions"]) for _, answer in texts.values()}) == 1
