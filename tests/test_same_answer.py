"""One text, one answer (issue 51): a text's label, prediction set, needs_review flag and
probabilities are the same alone, in a batch, shuffled, beside long texts, over REST (one
request per text and one with all), from `python -m textclf.predict` and from `predict --table`
at two batch sizes and chunk sizes, and (slow tier) on Spark, for every format evaluate can
serve. The served review is NOT the default (`review`, recorded by the export stage): a path
that dropped the folder's decisions, or used the defaults, answers other sets and flags. The
model is the TINY RANDOM BERT's (conftest): plumbing, not accuracy."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from stages import export
from textclf import predict
from textclf.config import ServeParams
from textclf.inference import table_scores
from textclf.inference.frames import PROB_PREFIX, SAME_ANSWER_ATOL
from textclf.errors import UserError
from textclf.inference.loading import folder_predictor, load_predictor
from textclf.inference.serving import check_review, log_pyfunc
from textclf.model import calibration
from textclf.model.export import format_folder
from textclf.model.exported import read_export
from textclf.spark import __main__ as spark_cli

from conftest import REPO, free_port, server, write_params
from test_serving import invoke
from test_spark import needs_spark

FORMATS = ["onnx-int8", "onnx", "torch"]  # serve.format's default and each format evaluate falls back to
COLUMNS = ("label", "probability", "labels", "set_size", "needs_review")


def words(path: Path, n: int | None) -> str:
    return " ".join(path.read_text(encoding="utf-8").split()[:n])


DOCS = sorted((REPO / "data" / "sample").glob("*/*.txt"))
# 1 word to a whole document (past max_length 64: truncated), so every batch pads most rows
TEXTS = [words(d, n) for d, n in zip(DOCS[::7], (1, 60, 3, None, 8, 2, 30, 14, None, 5, 20, 1))]
LONG = [words(DOCS[3], None) + " " + words(DOCS[4], None), words(DOCS[11], None)]  # the neighbours


@dataclass(frozen=True)
class Served:
    fmt: str
    review: dict  # serve.coverage and serve.review_below, as the export stage recorded them
    folder: Path  # what a user passes to predict: models/export, or models/model for torch
    flags: list[str]  # what that folder needs to answer as served (models/model records no review)
    uri: str  # the logged model: REST, the pyfunc, Spark


@pytest.fixture(scope="module")
def review(tiny_trained) -> dict:
    """serve.* that split the texts: coverage 0.3 (the tiny model's sets hold 1 or 2 labels, at
    0.9 nearly all 5) and review_below between the texts' middle two top probabilities, so
    that some answers are flagged and some not; neither is ServeParams' default."""
    top = np.sort(load_predictor(str(tiny_trained[0] / "model")).predict(TEXTS)["probability"].to_numpy())
    review = {"coverage": 0.3, "review_below": float(top[len(top) // 2 - 1:len(top) // 2 + 1].mean())}
    assert review != {"coverage": ServeParams.coverage, "review_below": ServeParams.review_below}
    return review


@pytest.fixture(scope="module", params=FORMATS)
def served(request, tmp_path_factory, tiny_trained, review) -> Served:
    """The tiny model exported by the export stage in one format with `review` as serve.*, and
    that format logged as evaluate logs what it serves (format_folder's copy; PyTorch: the
    model folder and model_config), in a store of its own."""
    fmt, (trained, _) = request.param, tiny_trained
    tmp = tmp_path_factory.mktemp(fmt)
    params = write_params(tmp / "params.yaml", serve={"format": fmt, **review})
    export.main(["--params", str(params), "--tokens", str(trained / "t.parquet"), "--splits", str(trained / "sp.parquet"),
                 "--model-dir", str(trained / "model"), "--out", str(tmp / "export")])
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")  # conftest restores it after the test
    with mlflow.start_run():
        if fmt == "torch":
            uri = log_pyfunc(trained / "model", TEXTS[:3], review=review).model_uri
        else:
            kept = read_export(tmp / "export")["format"]  # int8, or float32 where the export's check kept it
            uri = log_pyfunc(trained / "model", TEXTS[:3], format_folder(tmp / "export", kept, tmp / "logged"),
                             review=review).model_uri
    local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp / "local"))  # no store needed then
    flags = ["--coverage", str(review["coverage"]), "--review-below", str(review["review_below"])]
    return Served(fmt, review, trained / "model" if fmt == "torch" else tmp / "export",
                  flags if fmt == "torch" else [], local)


def assert_same(got: pd.DataFrame, expected: pd.DataFrame, what: str, atol: float = SAME_ANSWER_ATOL) -> None:
    """Every label, set, set size and flag equal, every probability within atol."""
    got = got.reset_index(drop=True)
    for name in COLUMNS:
        assert name in got.columns, (what, name, list(got.columns))
    assert got["label"].tolist() == expected["label"].tolist(), what
    assert [list(s) for s in got["labels"]] == [list(s) for s in expected["labels"]], what
    assert got["set_size"].astype(int).tolist() == expected["set_size"].tolist(), what
    assert got["needs_review"].astype(bool).tolist() == expected["needs_review"].tolist(), what
    names = ["probability", *expected.filter(like=PROB_PREFIX).columns]
    diff = np.abs(got[names].to_numpy(float) - expected[names].to_numpy(float)).max()
    assert diff <= atol, f"{what}: probabilities differ by up to {diff:.3g}"


def alone(served: Served) -> pd.DataFrame:
    """The reference: each text scored alone by the logged model, through the one loader."""
    predictor = load_predictor(served.uri)
    assert predictor.review.to_config() == served.review
    return pd.concat([predictor.predict([t]) for t in TEXTS], ignore_index=True)


def test_a_text_gets_one_answer_in_any_batch_and_from_any_loader(served, tmp_path):
    """One batch of all the texts, batches of 5 shuffled, each text between two long ones; the
    folder a user has (with the flags models/model needs) and the logged pyfunc."""
    expected = alone(served)
    # answers that a wrong review would change: flagged and not, sets of several sizes
    assert 0 < expected["needs_review"].sum() < len(TEXTS) and expected["set_size"].nunique() > 1, expected
    assert_same(load_predictor(served.uri).predict(TEXTS), expected, "one batch")
    predictor = load_predictor(served.uri, batch_size=5)
    order = random.Random(0).sample(range(len(TEXTS)), len(TEXTS))
    shuffled = predictor.predict([TEXTS[i] for i in order])
    assert_same(shuffled.iloc[np.argsort(order)], expected, "shuffled")
    padded = pd.concat([predictor.predict([LONG[0], t, LONG[1]]).iloc[[1]] for t in TEXTS])
    assert_same(padded, expected, "between two long texts")
    folder = load_predictor(str(served.folder), 3, *(served.review.values() if served.flags else ()))
    assert_same(folder.predict(TEXTS), expected, f"{served.folder} {' '.join(served.flags)}")
    pyfunc = mlflow.pyfunc.load_model(served.uri).predict(pd.DataFrame({"text": TEXTS}))
    assert_same(pyfunc, expected, "the pyfunc")


def printed(stdout: str) -> pd.DataFrame:
    """predict's lines (source, label, probability, set, flag) as answered_frame's columns."""
    rows = [line.split("\t") for line in stdout.splitlines()]
    assert [len(r) for r in rows] == [5] * len(TEXTS), stdout
    sets = [json.loads(r[3]) for r in rows]
    return pd.DataFrame({"label": [r[1] for r in rows], "probability": [float(r[2]) for r in rows], "labels": sets,
                         "set_size": [len(s) for s in sets], "needs_review": [r[4] == "true" for r in rows]})


def test_predict_and_table_give_each_text_its_answer_alone(served, tmp_path, monkeypatch):
    """`python -m textclf.predict` (4 decimals printed) and --table on the folder a user has and
    on the logged model, at two batch sizes and two chunk sizes."""
    expected = alone(served)
    files = []
    for i, text in enumerate(TEXTS):
        files.append(str(tmp_path / f"{i}.txt"))
        Path(files[-1]).write_text(text, encoding="utf-8")
    for model in (str(served.folder), served.uri):
        flags = served.flags if model == str(served.folder) else []
        cli = subprocess.run([sys.executable, "-m", "textclf.predict", model, *files, *flags, "--batch-size", "5"],
                             capture_output=True, text=True, cwd=tmp_path)
        assert cli.returncode == 0, cli.stderr[-3000:]
        assert_same(printed(cli.stdout), expected[[*COLUMNS]], f"python -m textclf.predict {model}",
                    atol=5e-5 + SAME_ANSWER_ATOL)  # printed to 4 decimals
    pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS}).to_parquet(tmp_path / "in.parquet")
    for model, batch, chunk in ((str(served.folder), 32, 4096), (served.uri, 7, 5), (str(served.folder), 3, 4)):
        monkeypatch.setattr(table_scores, "CHUNK_ROWS", chunk)
        out = tmp_path / f"out-{batch}.parquet"
        flags = served.flags if model == str(served.folder) else []
        predict.main([model, "--table", str(tmp_path / "in.parquet"), "--out", str(out),
                      "--batch-size", str(batch), "--id-column", "id", *flags])
        table = pd.read_parquet(out)
        assert table["skip_reason"].isna().all()
        assert_same(table, expected, f"--table {model} --batch-size {batch}, {chunk} rows a chunk")


def test_rest_answers_each_text_alone_and_all_at_once_the_same(served, tmp_path):
    """`mlflow models serve` of the logged model: one request per text, then one with them all."""
    expected = alone(served)
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", served.uri, "-h", "127.0.0.1",
           "-p", url.rsplit(":", 1)[1], "--env-manager", "local"]
    with server(cmd, tmp_path, f"{url}/ping", tmp_path / "serve.log"):
        one_by_one = [invoke(url, [t]) for t in TEXTS]
        together = invoke(url, TEXTS)
    assert {status for status, _ in [*one_by_one, together]} == {200}
    assert_same(pd.DataFrame([a["predictions"][0] for _, a in one_by_one]), expected, "REST, a request per text")
    assert_same(pd.DataFrame(together[1]["predictions"]), expected, "REST, one request")


@pytest.mark.slow
@needs_spark
def test_spark_answers_each_text_as_it_is_answered_alone(served, tmp_path):
    """`python -m textclf.spark` with the logged model at 4 and 1 000 rows a batch."""
    expected = alone(served)
    pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS}).to_parquet(tmp_path / "in.parquet")
    for rows in (4, 1000):
        out = tmp_path / f"spark-{rows}"
        spark_cli.main([served.uri, str(tmp_path / "in.parquet"), "--out", str(out), "--master", "local[2]",
                        "--batch-rows", str(rows), "--id-column", "id"])
        table = pd.read_parquet(out).sort_values("id")
        assert_same(table, expected, f"Spark, --batch-rows {rows}")


def test_the_export_records_the_review_and_the_logged_model_carries_one_record(served):
    """export.json's `review` is serve.*; the logged copy keeps it, and its MLmodel holds no
    second one (model_config only for a PyTorch model, whose folder records none)."""
    import yaml

    local = Path(served.uri)
    config = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"].get("config")
    if served.fmt == "torch":
        assert config == served.review
        return
    assert read_export(served.folder)["review"] == served.review
    logged = next(p.parent for p in local.rglob("export.json"))
    assert read_export(logged)["review"] == served.review and config is None


def test_a_training_folder_answers_with_the_default_review_and_says_so(tiny_trained, caplog):
    """models/model records no review: the same columns as every path, at ServeParams'
    defaults, said in one line; each flag overrides its own value."""
    folder = tiny_trained[0] / "model"
    with caplog.at_level("WARNING"):
        predictor = load_predictor(str(folder))
    assert predictor.review.to_config() == {"coverage": ServeParams.coverage, "review_below": ServeParams.review_below}
    assert f"{folder} records no review" in caplog.text and len(caplog.records) == 1
    assert set(COLUMNS) <= set(predictor.predict(TEXTS[:2]).columns)
    caplog.clear()
    with caplog.at_level("WARNING"):  # a flag is no default: the line named both, "the defaults"
        assert load_predictor(str(folder), coverage=0.3).review.to_config() == {
            "coverage": 0.3, "review_below": ServeParams.review_below}
        assert f"answering with serve.review_below {ServeParams.review_below}, the default; --review-below overrides" \
            in caplog.text and "serve.coverage" not in caplog.text
        caplog.clear()
        load_predictor(str(folder), coverage=0.3, review_below=0.2)
    assert not caplog.records


def test_the_folders_review_wins_and_a_disagreeing_one_is_refused(served, tiny_trained):
    if served.fmt == "torch":
        pytest.skip("a PyTorch model folder records no review: its logged model's model_config is the record")
    other = {"coverage": 0.95, "review_below": 0.1}
    assert folder_predictor(served.folder, logged=other).review.to_config() == served.review
    with pytest.raises(UserError, match=r"records the review .* not serve.\*'s .*rerun `dvc repro export`"):
        check_review(served.folder, other)
    with pytest.raises(UserError, match="records the review"):
        log_pyfunc(tiny_trained[0] / "model", TEXTS[:1], served.folder, review=other)


TOO_FEW = {"coverage": 0.95, "review_below": 0.0}  # 19 validation documents needed; the tiny split has fewer


@pytest.fixture(scope="module")
def too_few(tmp_path_factory, tiny_trained) -> Served:
    """The tiny model exported (ONNX float32) at serve.coverage 0.95, more than its validation
    split guarantees (issue 54), and logged as evaluate logs it."""
    trained = tiny_trained[0]
    assert (pd.read_parquet(trained / "sp.parquet")["split"] == "validation").sum() < 19
    tmp = tmp_path_factory.mktemp("too-few")
    params = write_params(tmp / "params.yaml", serve={"format": "onnx", **TOO_FEW})
    export.main(["--params", str(params), "--tokens", str(trained / "t.parquet"), "--splits", str(trained / "sp.parquet"),
                 "--model-dir", str(trained / "model"), "--out", str(tmp / "export")])
    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlflow.db'}")  # conftest restores it after the test
    with mlflow.start_run():
        uri = log_pyfunc(trained / "model", TEXTS[:3], format_folder(tmp / "export", "onnx", tmp / "logged"),
                         review=TOO_FEW).model_uri
    local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp / "local"))
    return Served("onnx", TOO_FEW, tmp / "export", [], local)


def every_class_flagged(frame: pd.DataFrame, labels: list[str], what: str) -> None:
    """No threshold can be guaranteed: every class in every set, every text needs_review (even
    at review_below 0, which alone flags none)."""
    assert all(sorted(s) == sorted(labels) for s in frame["labels"]), what
    assert (frame["set_size"].astype(int) == len(labels)).all() and frame["needs_review"].astype(bool).all(), what


def test_too_few_validation_documents_give_every_class_and_a_flag_on_every_path(too_few, tmp_path, caplog,
                                                                              monkeypatch):
    """The folder, the logged pyfunc, `python -m textclf.predict`, --table and REST: one answer."""
    monkeypatch.setattr(calibration, "SAID", set())  # said once a process: this test's first load says it
    with caplog.at_level("WARNING"):
        expected = alone(too_few)
    assert "needs at least 19 validation documents" in caplog.text and "every answer needs_review" in caplog.text
    labels = load_predictor(too_few.uri).labels
    every_class_flagged(expected, labels, "alone")
    assert_same(load_predictor(str(too_few.folder)).predict(TEXTS), expected, "the export folder")
    assert_same(mlflow.pyfunc.load_model(too_few.uri).predict(pd.DataFrame({"text": TEXTS})), expected, "the pyfunc")
    files = []
    for i, text in enumerate(TEXTS):
        files.append(str(tmp_path / f"{i}.txt"))
        Path(files[-1]).write_text(text, encoding="utf-8")
    cli = subprocess.run([sys.executable, "-m", "textclf.predict", str(too_few.folder), *files],
                         capture_output=True, text=True, cwd=tmp_path)
    assert cli.returncode == 0 and "Traceback" not in cli.stderr, cli.stderr[-3000:]
    assert_same(printed(cli.stdout), expected[[*COLUMNS]], "predict", atol=5e-5 + SAME_ANSWER_ATOL)
    pd.DataFrame({"text": TEXTS}).to_parquet(tmp_path / "in.parquet")
    predict.main([too_few.uri, "--table", str(tmp_path / "in.parquet"), "--out", str(tmp_path / "out.parquet")])
    assert_same(pd.read_parquet(tmp_path / "out.parquet"), expected, "--table")
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", too_few.uri, "-h", "127.0.0.1",
           "-p", url.rsplit(":", 1)[1], "--env-manager", "local"]
    with server(cmd, tmp_path, f"{url}/ping", tmp_path / "serve.log"):
        status, answer = invoke(url, TEXTS)
    assert status == 200
    assert_same(pd.DataFrame(answer["predictions"]), expected, "REST")


@pytest.mark.slow
@needs_spark
def test_too_few_validation_documents_give_spark_the_same_answer(too_few, tmp_path):
    expected = alone(too_few)
    pd.DataFrame({"id": range(len(TEXTS)), "text": TEXTS}).to_parquet(tmp_path / "in.parquet")
    spark_cli.main([too_few.uri, str(tmp_path / "in.parquet"), "--out", str(tmp_path / "spark"),
                    "--master", "local[2]", "--id-column", "id"])
    table = pd.read_parquet(tmp_path / "spark").sort_values("id")
    every_class_flagged(table, load_predictor(too_few.uri).labels, "Spark")
    assert_same(table, expected, "Spark")
