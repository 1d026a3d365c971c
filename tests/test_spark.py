"""Scoring a table on Spark (`python -m textclf.spark`): a local Spark session runs the logged
model through `mlflow.pyfunc.spark_udf`, and every row must equal `predict --table`'s. The
models are the TINY RANDOM BERT's (conftest): plumbing, not accuracy. Spark needs the `spark`
extra and a Java runtime (.ci/run installs both); without them these tests skip, saying why."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import mlflow
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from textclf import predict
from textclf.errors import UserError
from textclf.inference import serving, table_scores
from textclf.inference.rows import table_answers
from textclf.inference.serving import TABLE_ENV, log_pyfunc
from textclf.model.export import export_model
from textclf.spark import __main__ as spark_cli
from textclf.spark.session import MARKER, SparkJobFailed, spark_conf

from conftest import REPO
from test_multilabel import tiny_multilabel  # noqa: F401  (a fixture)

JAVA = bool(os.environ.get("JAVA_HOME") or shutil.which("java"))
needs_spark = pytest.mark.skipif(
    importlib.util.find_spec("pyspark") is None or not JAVA,
    reason="Spark scoring needs pyspark (pip install -e '.[spark]') and a Java runtime "
           "(apt-get install default-jre-headless); .ci/run installs both")
TEXTS = ["The central bank raised interest rates again to cool inflation.",
         "The striker scored twice as the home side won the cup final.",
         "A new phone with a faster chip and a better camera goes on sale.",
         "Parliament votes on the budget after a long night of debate.",
         "The film festival opens with a premiere of a quiet drama."]
# 3 row groups of 8 rows (batches of 4 on both sides), a null, empties and a long text among them
ROWS = [TEXTS[i % 5] * (1 + i % 3) for i in range(24)]
ROWS[1], ROWS[6], ROWS[13], ROWS[22] = None, "", "  \n", None
REASONS = ["missing_text" if t is None else "empty_text" if not t.strip() else None for t in ROWS]


@pytest.fixture(scope="module")
def int8_champion(tmp_path_factory, tiny_trained):
    """The tiny model exported to ONNX int8, logged with serve.*'s review and registered as
    tiny@champion in a store of its own -> (store URI, its folder)."""
    folder, _ = tiny_trained
    tmp = tmp_path_factory.mktemp("int8")
    export_model(folder / "model", tmp / "export", "onnx-int8")
    store = f"sqlite:///{tmp / 'mlflow.db'}"
    mlflow.set_tracking_uri(store)
    with mlflow.start_run() as run:
        info = log_pyfunc(folder / "model", TEXTS, export_dir=tmp / "export",
                          review={"coverage": 0.9, "review_below": 0.5})
    version = mlflow.register_model(info.model_uri, "tiny")
    mlflow.MlflowClient().set_registered_model_alias("tiny", "champion", version.version)
    assert run.info.run_id
    return store, tmp


def write_rows(path, texts=ROWS) -> None:
    ids = [f"doc-{(7 * i) % len(texts)}" for i in range(len(texts))]  # not sorted
    pq.write_table(pa.table({"id": ids, "text": texts, "n": list(range(len(texts)))}), path, row_group_size=8)


def as_table(model: str, table, out, monkeypatch, *options: str) -> dict[str, list]:
    monkeypatch.setattr(table_scores, "CHUNK_ROWS", 4)
    predict.main([model, "--table", str(table), "--out", str(out), *options])
    return pq.read_table(out).to_pydict()


def on_spark(model: str, table, out, *options: str) -> dict[str, list]:
    spark_cli.main([model, str(table), "--out", str(out), "--master", "local[2]", "--batch-rows", "4", *options])
    assert (out / "_SUCCESS").is_file() and (out / MARKER).is_file()
    return pq.read_table(out).to_pydict()  # part files in order: the input's order


@pytest.mark.slow
@needs_spark
def test_a_registered_int8_champion_scores_every_row_as_table_does(int8_champion, tmp_path, monkeypatch, caplog):
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    write_rows(tmp_path / "in.parquet")
    caplog.set_level("INFO")
    spark = on_spark("models:/tiny@champion", tmp_path / "in.parquet", tmp_path / "spark")
    local = as_table("models:/tiny@champion", tmp_path / "in.parquet", tmp_path / "t.parquet", monkeypatch)
    assert list(spark) == list(local)  # the same columns: input, answer, sets, review, skip_reason
    assert {"labels", "set_size", "needs_review"} <= set(spark)
    assert spark == local  # row by row, bit for bit: the same batches through the same model
    assert spark["skip_reason"] == REASONS
    marker = json.loads((tmp_path / "spark" / MARKER).read_text())
    assert marker["rows"] == {"scored": 20, "missing_text": 2, "empty_text": 2}
    # the version the alias named when the job started, not the alias (which may move meanwhile)
    assert (marker["model"], marker["requested"]) == ("models:/tiny/1", "models:/tiny@champion")
    assert "scored 20 of 24 rows" in caplog.text
    assert [p.name for p in tmp_path.iterdir() if ".textclf-" in p.name] == []  # no staging folder left


@pytest.mark.slow
@needs_spark
def test_a_folder_that_appears_at_out_while_the_job_runs_is_left_as_it_was(int8_champion, tmp_path, monkeypatch):
    """Another job's finished output lands at --out after the check: it is not deleted, and
    this job's complete result stays in its staging folder, named."""
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    write_rows(tmp_path / "in.parquet")
    out, answered = tmp_path / "spark", spark_cli.answered

    def another_job_finishes_first(*args):
        out.mkdir()
        (out / MARKER).write_text("theirs")
        return answered(*args)

    monkeypatch.setattr(spark_cli, "answered", another_job_finishes_first)
    with pytest.raises(UserError, match=r"appeared while this job ran .* complete in (\S+\.tmp)") as err:
        on_spark("models:/tiny@champion", tmp_path / "in.parquet", out)
    assert (out / MARKER).read_text() == "theirs" and sorted(p.name for p in out.iterdir()) == [MARKER]
    staged = next(p for p in tmp_path.iterdir() if p.name.startswith("spark.textclf-"))
    assert str(staged) in str(err.value) and (staged / MARKER).is_file()


@pytest.mark.slow
@needs_spark
def test_a_multilabel_model_answers_label_lists_as_table_does(tiny_multilabel, tmp_path, monkeypatch):  # noqa: F811
    folder, run = tiny_multilabel
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    uri = json.loads((folder / "metrics.json").read_text())["serving"]["model_uri"]
    texts = ["The minister said the budget vote was close.", None, "The striker scored twice in the final."] * 3
    write_rows(tmp_path / "in.parquet", texts)
    spark = on_spark(uri, tmp_path / "in.parquet", tmp_path / "spark", "--id-column", "id")
    local = as_table(uri, tmp_path / "in.parquet", tmp_path / "t.parquet", monkeypatch, "--id-column", "id")
    assert spark == local
    assert all(isinstance(s, list) for s, r in zip(spark["labels"], spark["skip_reason"]) if r is None)


@pytest.mark.slow
@needs_spark
def test_csv_and_json_lines_are_read_with_tables_rules(int8_champion, tmp_path, monkeypatch):
    """An empty CSV cell, a quoted one over two lines, rows with too many or too few fields; a
    line that is not a JSON object, a missing field: the same rows, reasons and numbers."""
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    (tmp_path / "in.csv").write_text(f'id,text\n1,{TEXTS[0]}\n2,\n3,"{TEXTS[1]}\nand more"\n4,a,b\n5\n'
                                     f'6,"{TEXTS[2]} ""quoted"""\n7,"  "\n8,{TEXTS[3]}\n9,{TEXTS[4]}\n')
    lines = [{"id": "1", "text": TEXTS[0]}, "not json", {"id": "3"}, {"id": "4", "text": ""},
             [1, 2], {"id": "6", "text": TEXTS[1]}, {"id": "7", "text": TEXTS[2], "extra": "x"}]
    (tmp_path / "in.jsonl").write_text("\n".join(line if isinstance(line, str) else json.dumps(line)
                                                 for line in lines) + "\n")
    for name, reasons in (("in.csv", [None, "empty_text", None, "malformed_line", "malformed_line", None,
                                      "empty_text", None, None]),
                          ("in.jsonl", [None, "malformed_line", "missing_text", "empty_text", "malformed_line",
                                        None, None])):
        spark = on_spark("models:/tiny@champion", tmp_path / name, tmp_path / f"{name}.spark")
        local = as_table("models:/tiny@champion", tmp_path / name, tmp_path / f"{name}.parquet", monkeypatch)
        assert spark == local, name
        assert spark["skip_reason"] == reasons, name


@pytest.mark.slow
@needs_spark
def test_a_job_that_fails_on_the_executors_leaves_no_folder_and_says_why(int8_champion, tmp_path, monkeypatch):
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    # a setting that only the executors see, refused there as the model loads
    monkeypatch.setattr(spark_cli, "executor_env", lambda cpus: {TABLE_ENV: "1", "TEXTCLF_ONNX_THREADS": "0"})
    write_rows(tmp_path / "in.parquet")
    with pytest.raises(SparkJobFailed, match=r"wrote nothing to .*TEXTCLF_ONNX_THREADS='0' must be a positive"):
        on_spark("models:/tiny@champion", tmp_path / "in.parquet", tmp_path / "spark")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]  # neither --out nor its staging


@pytest.mark.slow
@needs_spark
def test_a_marker_that_cannot_be_written_leaves_no_staging_folder(int8_champion, tmp_path, monkeypatch):
    """Issue 60, item 10: a failure after the write (the count, the marker) left the job's
    staging folder behind; it goes, as after a failed write."""
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    write_rows(tmp_path / "in.parquet")

    def no_marker(spark, out, content):
        raise OSError("No space left on device")

    monkeypatch.setattr(spark_cli, "write_marker", no_marker)
    with pytest.raises(SparkJobFailed, match="wrote nothing to .*No space left on device"):
        on_spark("models:/tiny@champion", tmp_path / "in.parquet", tmp_path / "spark")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]  # neither --out nor its staging


@pytest.mark.slow
@needs_spark
def test_bad_inputs_are_one_line_each(int8_champion, tmp_path, monkeypatch):
    store, _ = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    write_rows(tmp_path / "in.parquet")
    run = ["models:/tiny@champion", str(tmp_path / "in.parquet"), "--master", "local[1]", "--out"]
    with pytest.raises(UserError, match="has no column 'body'"):
        spark_cli.main([*run, str(tmp_path / "a"), "--text-column", "body"])
    with pytest.raises(UserError, match="column 'n' holds bigint, not text"):
        spark_cli.main([*run, str(tmp_path / "b"), "--text-column", "n"])
    (tmp_path / "c").mkdir()
    with pytest.raises(UserError, match="exists; remove it"):
        spark_cli.main([*run, str(tmp_path / "c")])
    with pytest.raises(UserError, match="Spark cannot reach nosuch://bucket/out"):
        spark_cli.main([*run, "nosuch://bucket/out"])
    with pytest.raises(UserError, match=r"nosuch://bucket/in.parquet could not be read \(.*nosuch"):
        spark_cli.main(["models:/tiny@champion", "nosuch://bucket/in.parquet", "--out", str(tmp_path / "e")])
    with pytest.raises(UserError, match="could not be read as parquet"):
        spark_cli.main(["models:/tiny@champion", str(tmp_path / "none.parquet"), "--master", "local[1]",
                        "--out", str(tmp_path / "d")])
    assert not any((tmp_path / d).exists() for d in "abd")


def test_a_local_out_that_exists_or_cannot_be_written_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """Checked before the model is fetched and Spark starts (half a minute), not after the job."""
    monkeypatch.setattr(spark_cli, "pinned", lambda model: pytest.fail("the model was fetched first"))
    (tmp_path / "taken").mkdir()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match="--out .*taken exists; remove it"):
        spark_cli.main(["models:/tiny@champion", "in.parquet", "--out", str(tmp_path / "taken")])
    with pytest.raises(UserError, match=r"--out .*a-file/out cannot be written \(.*a-file: Not a directory\)"):
        spark_cli.main(["models:/tiny@champion", "in.parquet", "--out", str(tmp_path / "a-file" / "out")])
    with pytest.raises(UserError, match="cannot be written"):
        spark_cli.main(["models:/tiny@champion", "in.parquet", "--out", "file:///proc/textclf-out"])


def test_a_model_that_does_not_resolve_or_predates_table_mode_is_refused_before_spark(
        int8_champion, tmp_path, monkeypatch):
    store, tmp = int8_champion
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    out = str(tmp_path / "out")
    with pytest.raises(UserError, match="models:/tiny@nobody"):
        spark_cli.main(["models:/tiny@nobody", "in.parquet", "--out", out])
    with pytest.raises(UserError, match="is not an MLflow model"):
        spark_cli.main([str(tmp / "export"), "in.parquet", "--out", out])
    old = tmp_path / "old"
    shutil.copytree(spark_cli.pyfunc_folder("models:/tiny@champion"), old)
    mlmodel = (old / "MLmodel").read_text()
    (old / "MLmodel").write_text(mlmodel.replace(f"  {serving.TABLE_MODE}: 1\n", ""))
    with pytest.raises(UserError, match="cannot answer a table's rows on Spark"):
        spark_cli.main([str(old), "in.parquet", "--out", out])


def test_no_java_is_one_line(int8_champion, tmp_path):
    store, _ = int8_champion
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "nojava"), "MLFLOW_TRACKING_URI": store}
    proc = subprocess.run([sys.executable, "-m", "textclf.spark", "models:/tiny@champion", "in.parquet",
                           "--out", str(tmp_path / "o")], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"Spark cannot start: JAVA_HOME={tmp_path / 'nojava'} has no bin/java. Install a Java runtime "
        "(17 or 21; Debian: apt-get install default-jre-headless) or point JAVA_HOME at one.")


def test_table_mode_answers_every_row_with_placeholders_its_skip_reason_voids(tiny_trained, monkeypatch):
    """What each executor's model answers: --table's reasons, and values Spark can type."""
    folder, _ = tiny_trained
    from textclf.inference.onnx_predictor import OnnxPredictor

    predictor = OnnxPredictor(folder / "export")
    texts = [TEXTS[0], float("nan"), "", 3, TEXTS[1]]  # pandas 3 reads a null string as NaN
    answers = table_answers(texts, predictor)
    assert answers["skip_reason"].tolist() == ["", "missing_text", "empty_text", "non_string", ""]
    assert answers["label"].tolist()[1:4] == ["", "", ""] and answers["probability"].tolist()[1:4] == [0.0] * 3
    expected = predictor.predict([TEXTS[0], TEXTS[1]])
    assert answers.iloc[[0, 4]].drop(columns="skip_reason").reset_index(drop=True).equals(expected)
    model = serving.TextClassifier()
    model.predictor = predictor
    with pytest.raises(serving.RequestRefused, match="are not strings"):  # the REST server still refuses
        model.predict(None, pd.DataFrame({"text": texts[:3]}))
    monkeypatch.setenv(TABLE_ENV, "1")
    assert model.predict(None, pd.DataFrame({"text": texts[:3]}))["skip_reason"].tolist()[1:] == [
        "missing_text", "empty_text"]


def test_the_projects_s3_endpoint_reaches_spark_as_s3a_settings(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://127.0.0.1:9000")
    conf = spark_conf(4096)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "4096"
    monkeypatch.delenv("MLFLOW_S3_ENDPOINT_URL")
    assert "spark.hadoop.fs.s3a.endpoint" not in spark_conf(10)
