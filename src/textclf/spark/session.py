"""The Spark side of `textclf.spark`: starting a session (or saying in one line why it cannot),
reading a table as --table reads one, Spark types, and the output folder through Hadoop's
file system (the one Spark writes with, local or s3a)."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa

from textclf.errors import UserError

CORRUPT = "_corrupt_record"  # Spark's column for a malformed CSV row or JSON line
MARKER = "_textclf_scored.json"  # written last: a folder without it is not a finished scoring
# The project's S3 settings (docs/team_setup.md) as Hadoop's s3a settings; s3:// is s3a too.
S3_ENDPOINT_ENVS = ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
# an answer column's Arrow type -> Spark DDL
SPARK_TYPES = {pa.string(): "string", pa.float64(): "double", pa.int64(): "bigint",
               pa.bool_(): "boolean", pa.list_(pa.string()): "array<string>"}


def check_java() -> None:
    """Spark's JVM: JAVA_HOME's, else `java` on PATH; pyspark's own failure is a 20-line trace."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH and JAVA_HOME unset"
        raise UserError(f"Spark cannot start: {where}. Install a Java runtime (17 or 21; Debian: "
                        "apt-get install default-jre-headless) or point JAVA_HOME at one.")


def spark_conf(batch_rows: int) -> dict[str, str]:
    """Session settings: the model gets `batch_rows` rows a call; the project's S3 endpoint,
    where set, for s3a:// and s3:// paths (credentials: the AWS_* variables, s3a's default)."""
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": str(batch_rows),
            # Spark 4's columnar input hands the UDF the Parquet reader's batches (a row group's
            # rows, up to 4 096) whatever maxRecordsPerBatch says: rows, so that it holds
            "spark.sql.execution.arrow.pythonUDF.columnarInput.enabled": "false"}
    endpoint = next((os.environ[e] for e in S3_ENDPOINT_ENVS if os.environ.get(e)), None)
    if endpoint:
        conf |= {"spark.hadoop.fs.s3a.endpoint": endpoint, "spark.hadoop.fs.s3a.path.style.access": "true"}
    conf["spark.hadoop.fs.s3.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
    return conf


def session(master: str | None, batch_rows: int):
    """A SparkSession; run as a script by spark-submit, spark-submit's master and settings."""
    check_java()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UserError("pyspark is not installed: pip install -e '.[spark]' "
                        "(docs/spark_scoring.md).") from None
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM already
    if not submitted and (master or "local").startswith("local"):
        # the Python workers of a local session run this interpreter, not the first python3 on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("textclf-spark")
    if master:
        builder = builder.master(master)
    for key, value in spark_conf(batch_rows).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as err:  # pyspark's PySparkRuntimeError, py4j's errors
        raise UserError(f"Spark could not start ({first_line(err)}); check --master and the "
                        "Spark settings (docs/spark_scoring.md).") from None


def read_table(spark, path: str, fmt: str, text: str):
    """The input as a DataFrame, as --table reads it: every CSV/TSV column a string, a header
    row, quoted fields over several lines in CSV, no quoting in TSV; JSON Lines' malformed
    lines kept in `_corrupt_record`. A missing path or a text column that is not text: one line."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    try:
        if fmt == "parquet":
            table = spark.read.parquet(path)
        elif fmt == "jsonl":  # a line that is not a JSON object: in CORRUPT, its fields null
            table = spark.read.options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT).json(path)
        else:
            quoted = fmt == "csv"
            options = dict(header=True, multiLine=quoted, sep="," if quoted else "\t",
                           quote='"' if quoted else "", escape='"', mode="PERMISSIVE")
            names = spark.read.options(**options).csv(path).columns
            # every column a string, and CORRUPT for a row with the wrong number of fields
            schema = ", ".join([f"`{n}` string" for n in names] + [f"{CORRUPT} string"])
            table = spark.read.options(**options, columnNameOfCorruptRecord=CORRUPT).schema(schema).csv(path)
    except AnalysisException as err:
        raise UserError(f"{path} could not be read as {fmt} ({first_line(err)}); pass a table Spark "
                        "can read, and --format where the name does not say it.") from None
    except Py4JJavaError as err:  # a file system Spark lacks: s3a:// without hadoop-aws
        raise UserError(f"{path} could not be read ({causes(err)[0]}); s3a:// needs hadoop-aws on "
                        "the classpath (docs/spark_scoring.md, S3).") from None
    kinds = dict(table.dtypes)
    if text in kinds and kinds[text] != "string":
        raise UserError(f"{path}: column {text!r} holds {kinds[text]}, not text; name the text column "
                        "with --text-column.")
    return table


def _fs(spark, path: str):
    jvm = spark.sparkContext._jvm
    where = jvm.org.apache.hadoop.fs.Path(path)
    try:
        return where.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), where
    except Exception as err:  # py4j's Py4JJavaError: no file system for the scheme, its jar missing
        raise UserError(f"Spark cannot reach {path} ({causes(err)[0]}); s3a:// needs "
                        "hadoop-aws on the classpath (docs/spark_scoring.md, S3).") from None


def out_exists(spark, out: str) -> bool:
    fs, where = _fs(spark, out)
    return bool(fs.exists(where))


def local_path(out: str) -> Path | None:
    """--out on this machine's file system (no scheme, or file:), else None (s3a://, hdfs://)."""
    parsed = urlparse(out)
    if len(parsed.scheme) <= 1:  # none, or a Windows drive letter
        return Path(out)
    return Path(parsed.path) if parsed.scheme == "file" else None


def check_local_out(out: str) -> None:
    """Before Spark starts (half a minute): a local --out that exists, or whose folder cannot
    take a new one, is refused in one line. Another file system is checked once Spark is up."""
    path = local_path(out)
    if path is None:
        return
    if path.exists():
        raise UserError(out_taken(out))
    parent = next(p for p in path.absolute().parents if p.exists())
    try:  # os.access says yes to root on a read-only mount: try it
        os.rmdir(tempfile.mkdtemp(prefix=".textclf-probe-", dir=parent))
    except OSError as err:
        raise UserError(f"--out {out} cannot be written ({parent}: {err.strerror}); name a folder "
                        "this user can create.") from None


def out_taken(out: str) -> str:
    return (f"--out {out} exists; remove it or name a new folder (a scored folder holds {MARKER}; "
            "one without it is a failed run's).")


def staging(out: str) -> str:
    """The folder this job writes to, beside --out and named for this job alone: what a failed
    job removes is then only ever its own."""
    return f"{out.rstrip('/')}.textclf-{uuid.uuid4().hex[:12]}.tmp"


def remove(spark, folder: str) -> None:
    """This job's staging folder, gone."""
    fs, where = _fs(spark, folder)
    fs.delete(where, True)


def publish(spark, staged: str, out: str) -> None:
    """The finished staging folder (its marker inside) renamed to --out: a folder that appeared
    at --out while this job ran (another job's) is left as it was, and so is this job's result."""
    fs, src = _fs(spark, staged)
    dst = _fs(spark, out)[1]
    if fs.exists(dst) or not fs.rename(src, dst):
        raise UserError(f"--out {out} appeared while this job ran (another job's?) and is left as it "
                        f"was; this job's result is complete in {staged}: move it, or remove it.")


def write_marker(spark, out: str, content: dict) -> None:
    fs, where = _fs(spark, out.rstrip("/") + "/" + MARKER)
    stream = fs.create(where, True)
    try:
        stream.write(bytearray(json.dumps(content, indent=2, sort_keys=True).encode()))
    finally:
        stream.close()


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def causes(err: BaseException) -> list[str]:
    """The "module.Error: text" lines of a JVM or Python worker trace inside `err`'s message,
    in order (the message's first line where there are none)."""
    found = re.findall(r"^[\s:]*((?:[\w.]+\.)?\w*(?:Error|Exception): .+)$", str(err), re.MULTILINE)
    return [c.strip() for c in found] or [first_line(err)]


class SparkJobFailed(UserError):
    """A job that failed on the executors: the Python error that ended it, in one line."""

    @classmethod
    def from_error(cls, err: BaseException, out: str) -> "SparkJobFailed":
        # the worker's traceback is inside the JVM's message: its last such line
        return cls(f"the Spark job failed and wrote nothing to {out}: {causes(err)[-1]}")
