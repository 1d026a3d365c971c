"""The report stage's work: read the stage outputs, build the sections, write report.md and
report.html, and log them into the training run."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from textclf.files import read_json
from textclf.evaluate.metrics_file import read_metrics
from textclf.report.document import Heading, to_html, to_markdown
from textclf.report.confidence import confidence_section, warning_note
from textclf.report.labels import label_metrics, label_noise_note, labels_section
from textclf.report.results import baseline_section, confusion_png, confusion_section, results_section
from textclf.report.sections import (data_section, data_version_section, dropped_classes, headline,
                                     lineage_section, lost_alert, mistakes_section, serving_section)
from textclf.tracking.runs import add_to_run, dataset_sources, lock_hashes, log_datasets
from textclf.tracking.store import training_run

log = logging.getLogger("report")


@dataclass(frozen=True)
class ReportPaths:
    """What the report stage reads and writes, as its command line names them."""
    ingest_report: str
    token_stats: str
    split_counts: str
    histogram: str
    curve: str
    metrics: str
    per_class_json: str  # evaluate's per-class JSON, beside `metrics`
    data_diff: str
    predictions: str
    corpus: str  # a dataset of the run, by this path
    model_dir: str
    run_file: str
    out_md: str
    out_html: str
    confusion_png: str
    lock: str  # dvc.lock, read for the lineage table
    # stage labels' table and summary (dvc.yaml passes both); None: no label-issues section
    label_issues: str | None = None
    label_summary: str | None = None


def build(paths: ReportPaths, run: dict, datasets: set[str]) -> tuple[list, bytes]:
    """The run and the sources of its datasets -> (report blocks, confusion PNG)."""
    metrics = read_metrics(paths.metrics, paths.per_class_json)
    lock_file = Path(paths.lock)
    datasets = datasets | {paths.corpus}  # the run page shows these as datasets
    hashes = lock_hashes(yaml.safe_load(lock_file.read_text()) if lock_file.is_file() else {},
                     running="report", datasets=datasets)
    predictions = pd.read_parquet(paths.predictions)
    curve = pd.read_csv(paths.curve)
    collapsed = curve.loc[curve["collapsed"] == 1, "epoch"].tolist()
    ingest = read_json(paths.ingest_report)
    labels = read_json(paths.label_summary) if paths.label_summary else None
    blocks = [Heading("Training report", 1)] + headline(metrics, collapsed)
    blocks += label_noise_note(labels) if labels else []
    blocks += warning_note(metrics)  # a temperature that made test ECE worse
    blocks += dropped_classes(ingest)
    blocks += lost_alert(ingest)  # ingest dropped more than a few percent of what it saw
    blocks += data_section(ingest, read_json(paths.token_stats),
                           read_json(paths.split_counts), pd.read_csv(paths.histogram))
    confusion = confusion_png(metrics["confusion"])
    blocks += results_section(curve, metrics)
    blocks += confusion_section(metrics["confusion"], confusion)
    blocks += baseline_section(metrics)
    blocks += serving_section(metrics)
    blocks += data_version_section(read_json(paths.data_diff), metrics.get("registry"),
                                   read_json(paths.split_counts))
    corpus = pd.read_parquet(paths.corpus)
    blocks += mistakes_section(predictions, corpus)
    if labels:
        blocks += labels_section(labels, pd.read_parquet(paths.label_issues), corpus)
    blocks += confidence_section(metrics, predictions)
    blocks += lineage_section(read_json(Path(paths.model_dir) / "params.json"), run, hashes)
    return blocks, confusion


def ingest_tags(ingest: dict) -> dict[str, str]:
    """The classes ingest dropped (ingest.small_classes: drop), as a tag of the training run:
    its page names them (a tag holds 8 000 characters; the logged ingest_report.json, all)."""
    dropped = ingest.get("dropped_classes")
    return {"ingest.dropped_classes": json.dumps(dropped, ensure_ascii=False)[:8000]} if dropped else {}


def run(paths: ReportPaths) -> None:
    """The stage."""
    training = training_run(paths.run_file)  # fail in one line, before the work
    sources = dataset_sources(training)
    blocks, confusion = build(paths, training, sources)
    Path(paths.out_md).write_text(to_markdown(blocks), encoding="utf-8")
    Path(paths.out_html).write_text(to_html(blocks, "Training report"), encoding="utf-8")
    Path(paths.confusion_png).write_bytes(confusion)
    if paths.corpus not in sources:
        log_datasets(training["run_id"], {"corpus": paths.corpus}, "source")
    logged: tuple[str, ...] = (paths.out_html, paths.out_md, paths.confusion_png, paths.ingest_report)
    if paths.label_issues and paths.label_summary:
        logged += (paths.label_issues, paths.label_summary)
    add_to_run(training, metrics=label_metrics(read_json(paths.label_summary)) if paths.label_summary else {},
               tags=ingest_tags(read_json(paths.ingest_report)), artifact_path="report", artifacts=logged)
    log.info("wrote %s and %s; logged them to MLflow run %s", paths.out_md, paths.out_html, training["run_id"])
