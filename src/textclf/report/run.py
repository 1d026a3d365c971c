"""The report stage's work: read the stage outputs, build the sections, write report.md and
report.html, and log them into the training run."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import yaml

from textclf.io import read_json
from textclf.report import figures
from textclf.report.document import Figure, Heading, to_html, to_markdown
from textclf.report.sections import (baseline_section, calibration_section, data_section,
                                     data_version_section, headline, lineage_section, mistakes_section,
                                     results_section)
from textclf.tracking.runs import add_to_run, dataset_sources, lock_hashes, log_datasets
from textclf.tracking.store import training_run

log = logging.getLogger("report")


def build(args, run: dict) -> tuple[list, bytes]:
    """-> (report blocks, confusion PNG)."""
    metrics = read_json(args.metrics)
    lock_file = Path(args.lock)
    datasets = dataset_sources(run) | {args.corpus}  # the run page shows these as datasets
    hashes = lock_hashes(yaml.safe_load(lock_file.read_text()) if lock_file.is_file() else {},
                     running="report", datasets=datasets)
    predictions = pd.read_parquet(args.predictions)
    curve = pd.read_csv(args.curve)
    collapsed = curve.loc[curve["collapsed"] == 1, "epoch"].tolist()
    blocks = [Heading("Training report", 1)] + headline(metrics, collapsed)
    blocks += data_section(read_json(args.ingest_report), read_json(args.token_stats),
                           read_json(args.split_counts), pd.read_csv(args.histogram))
    blocks += results_section(curve, metrics)
    blocks += baseline_section(metrics)
    blocks += data_version_section(read_json(args.data_diff), metrics.get("registry"),
                                   read_json(args.split_counts))
    confusion = figures.confusion_heatmap(metrics["confusion"])
    blocks += [Figure("confusion matrix", confusion)]
    blocks += mistakes_section(predictions, pd.read_parquet(args.corpus))
    blocks += calibration_section(predictions)
    blocks += lineage_section(read_json(Path(args.model_dir) / "params.json"), run, hashes)
    return blocks, confusion


def run(args) -> None:
    """The stage, from its parsed arguments."""
    training = training_run(args.run_file)  # fail in one line, before the work
    blocks, confusion = build(args, training)
    Path(args.out_md).write_text(to_markdown(blocks), encoding="utf-8")
    Path(args.out_html).write_text(to_html(blocks, "Training report"), encoding="utf-8")
    Path(args.confusion_png).write_bytes(confusion)
    if args.corpus not in dataset_sources(training):
        log_datasets(training["run_id"], {"corpus": args.corpus}, "source")
    logged = [args.out_html, args.out_md, args.confusion_png, args.ingest_report]
    add_to_run(training, artifact_path="report", artifacts=logged)
    log.info("wrote %s and %s; logged them to MLflow run %s", args.out_md, args.out_html, training["run_id"])
