"""Score a table on Apache Spark with a logged model: MLflow's `spark_udf` on every executor.

    python -m textclf.spark models:/textclf@champion in.parquet --out preds/ --master 'local[2]'
    spark-submit --master spark://head:7077 scripts/spark_score.py models:/textclf@champion \\
        s3a://bucket/tickets/ --format parquet --out s3a://bucket/preds/

Reads Parquet, CSV, TSV or JSON Lines from any path Spark reads and writes a folder of Parquet
partitions with `--table`'s columns (docs/spark_scoring.md): the input's columns (or the
--id-column), the model's answer, and `skip_reason` for the rows it cannot score, kept. The
folder is complete only when it holds `_textclf_scored.json`, written after Spark's committer
wrote `_SUCCESS`. The job writes to a staging folder of its own beside --out and renames it to
--out at the end, so a failed job removes only what it wrote. An alias (`@champion`) is resolved
to its version once, before the job: every row is scored by that version, and the marker names
it. pyspark is an optional extra
(`pip install -e '.[spark]'`) and a Java runtime; nothing else imports it.
"""
from __future__ import annotations

import argparse
import logging
import os
import time

from textclf.errors import UserError
from textclf.stage import run_stage, setup_logging
from textclf.inference.loading import load_predictor
from textclf.inference.model_uri import pinned, pyfunc_folder
from textclf.inference.serving import TABLE_ENV, TABLE_MODE
from textclf.inference.table_scores import CHUNK_ROWS, answer_schema, check_columns
from textclf.spark.session import (CORRUPT, SPARK_TYPES, SparkJobFailed, check_local_out, out_exists, out_taken,
                                   publish, read_table, remove, session, staging, write_marker)

log = logging.getLogger("textclf.spark")
FORMATS = {".parquet": "parquet", ".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
THREAD_ENVS = ("TEXTCLF_ONNX_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an MLflow model: models:/textclf@champion, runs:/<id>/model_onnx, "
                                 "or the folder holding its MLmodel")
    p.add_argument("input", help="a table or a folder of them, any path Spark reads (s3a://…)")
    p.add_argument("--out", required=True, help="the folder the Parquet partitions go to (must not exist)")
    p.add_argument("--format", choices=sorted(set(FORMATS.values())),
                   help="the input's format (default: from its suffix)")
    p.add_argument("--text-column", default="text")
    p.add_argument("--id-column", default="", help="keep only this input column (default: all)")
    p.add_argument("--master", help="Spark's master (default: spark-submit's, else local[*])")
    p.add_argument("--batch-rows", type=int, default=CHUNK_ROWS,
                   help=f"rows per call of the model (Arrow batch), as --table's chunks (default {CHUNK_ROWS})")
    p.add_argument("--env-manager", default="local", choices=["local", "virtualenv", "uv", "conda"],
                   help="the executors' Python: this one (local), or one built from the model's requirements")
    args = p.parse_args(argv)
    if args.batch_rows < 1:
        raise UserError(f"--batch-rows={args.batch_rows}; use a positive number.")
    if args.format is None:
        suffix = os.path.splitext(args.input.rstrip("/"))[1].lower()
        if suffix not in FORMATS:
            raise UserError(f"{args.input}: cannot tell its format from the name; pass --format, one of "
                            f"{', '.join(sorted(set(FORMATS.values())))}.")
        args.format = FORMATS[suffix]
    return args


def logged_model(model: str):
    """The model's local pyfunc folder (downloaded once, on the driver) and its predictor,
    refused in one line where it is not a pyfunc or was logged before table mode."""
    folder = pyfunc_folder(model)
    import yaml

    metadata = yaml.safe_load((folder / "MLmodel").read_text()).get("metadata") or {}
    if TABLE_MODE not in metadata:
        raise UserError(f"{model} was logged by a textclf that cannot answer a table's rows on Spark "
                        "(it refuses a batch with one empty text); log it again with this textclf "
                        "(`dvc repro --force evaluate` logs the served model anew) and score that one.")
    return folder, load_predictor(str(folder))


def executor_env(task_cpus: str) -> dict[str, str]:
    """Environment for the model on every executor: table mode, and as many threads for ONNX
    Runtime (and torch) as a task has cores (spark.task.cpus, 1 by default): Spark runs a task,
    in its own Python worker, per task slot, and ONNX Runtime's default (every core) would put
    that many threads on each core. The user's own values win."""
    return {TABLE_ENV: "1", **{name: os.environ.get(name) or task_cpus for name in THREAD_ENVS}}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging()
    started = time.monotonic()
    check_local_out(args.out)  # before Spark starts (half a minute), as a bad URI is
    args.version = pinned(args.model)
    if args.version != args.model:
        log.info("%s is %s now: every row is scored by that version", args.model, args.version)
    folder, predictor = logged_model(args.version)
    answers = answer_schema(predictor)
    spark = session(args.master, args.batch_rows)
    log.info("Spark %s (%s) up %.1f s after the start, the model fetched and loaded first",
             spark.version, spark.sparkContext.master, time.monotonic() - started)
    try:
        score(spark, args, str(folder), answers)
    finally:
        spark.stop()


def score(spark, args: argparse.Namespace, model_folder: str, answers) -> None:
    import mlflow

    if out_exists(spark, args.out):  # checked before Spark started where --out is local
        raise UserError(out_taken(args.out))
    table = read_table(spark, args.input, args.format, args.text_column)
    columns = [c for c in table.columns if c != CORRUPT]
    keep = check_columns(args.input, columns, args.text_column, args.id_column)
    fields = [f"{f.name} {SPARK_TYPES[f.type]}" for f in answers] + ["skip_reason string"]
    udf = mlflow.pyfunc.spark_udf(spark, model_folder, result_type=", ".join(fields),
                                  env_manager=args.env_manager,
                                  extra_env=executor_env(spark.conf.get("spark.task.cpus", "1")))
    scored = answered(table, udf, keep, [f.name for f in answers], args.text_column, args.format)
    started, staged = time.monotonic(), staging(args.out)
    try:  # the write, its count and its marker: a failure in any leaves no staging folder behind
        scored.write.parquet(staged)
        counts = {r["skip_reason"] or "scored": r["count"]
                  for r in spark.read.parquet(staged).groupBy("skip_reason").count().collect()}
        write_marker(spark, staged, {"model": args.version, "requested": args.model, "input": args.input,
                                     "rows": counts})
    except Exception as err:  # py4j's and pyspark's own; only this job's folder is removed
        remove(spark, staged)
        raise SparkJobFailed.from_error(err, args.out) from None
    publish(spark, staged, args.out)
    skips = ", ".join(f"{r} {n}" for r, n in sorted(counts.items()) if r != "scored") or "none"
    log.info("scored %d of %d rows of %s into %s in %.1f s; skipped: %s", counts.get("scored", 0),
             sum(counts.values()), args.input, args.out, time.monotonic() - started, skips)


def answered(table, udf, keep: list[str], names: list[str], text_column: str, fmt: str):
    """The output DataFrame: the kept columns, the answer's fields and skip_reason, as --table
    writes them. What the reader knows (a malformed line, a null text) is decided here; the
    model sees '' for those rows, which it skips, as --table skips them (a null would fail
    MLflow's schema check)."""
    from pyspark.sql import functions as F

    text = F.col(text_column)
    malformed = F.col(CORRUPT).isNotNull() if CORRUPT in table.columns else F.lit(False)
    answer = udf(F.struct(F.when(~malformed & text.isNotNull(), text).otherwise(F.lit("")).alias("text")))
    # a CSV cell is never null but in a malformed row: Spark reads an empty one as null
    csv = fmt in ("csv", "tsv")
    null_text = "empty_text" if csv else "missing_text"
    ok = F.col("_a.skip_reason") == ""  # table mode's '' for a scored row
    reason = (F.when(malformed, F.lit("malformed_line")).when(text.isNull(), F.lit(null_text))
              .when(~ok, F.col("_a.skip_reason")))
    return table.withColumn("_a", answer).select(
        # a malformed line's columns are null, as in --table; an empty CSV cell is ''
        *[F.when(~malformed, F.coalesce(F.col(c), F.lit("")) if csv else F.col(c)).alias(c) for c in keep],
        *[F.when(ok, F.col(f"_a.{name}")).alias(name) for name in names], reason.alias("skip_reason"))


if __name__ == "__main__":
    run_stage(main)
