"""Stage train: token ids + split -> fine-tuned model folder, training curve, MLflow run.

The model folder holds safetensors weights, the tokenizer, the label map (in
config.json) and params.json, the params that built it.
"""
from __future__ import annotations

import csv
import dataclasses
import logging
from pathlib import Path

import mlflow
import pandas as pd
from accelerate.utils import set_seed

from textclf.config import flatten, load_params
from textclf.io import setup_logging, stage_parser, write_json
from textclf.modeling import build_classifier, load_tokenizer
from textclf.tracking import lineage_tags, use_experiment
from textclf.training import Split, fit, make_accelerator

log = logging.getLogger("train")
LOGGED_SECTIONS = ("ingest", "tokenize", "split", "model", "train")
CURVE_FIELDS = ["epoch", "train_loss", "val_accuracy", "val_macro_f1"]


def load_splits(tokens_path: str, splits_path: str) -> tuple[dict[str, Split], list[str]]:
    frame = pd.read_parquet(tokens_path).merge(
        pd.read_parquet(splits_path)[["doc_id", "split"]], on="doc_id", validate="one_to_one")
    labels = sorted(frame["label"].unique())
    index = {label: i for i, label in enumerate(labels)}
    splits = {name: Split([list(map(int, ids)) for ids in part["input_ids"]],
                          [index[l] for l in part["label"]])
              for name, part in frame.groupby("split")}
    return splits, labels


class CurveWriter:
    """Per-epoch rows to a CSV (DVC plots) and to MLflow, as they come."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            csv.writer(fh).writerow(CURVE_FIELDS)

    def __call__(self, row: dict) -> None:
        with self.path.open("a", newline="") as fh:
            csv.writer(fh).writerow([row[k] for k in CURVE_FIELDS])
        mlflow.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=row["epoch"])


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True, help="output model folder")
    parser.add_argument("--curve", required=True, help="output CSV: per-epoch loss and validation scores")
    parser.add_argument("--run-file", required=True, help="output JSON naming the MLflow run")
    args = parser.parse_args(argv)
    setup_logging()
    params = load_params(args.params)
    cfg, model_cfg = params["train"], params["model"]
    splits, labels = load_splits(args.tokens, args.splits)
    tokenizer = load_tokenizer(model_cfg.name)
    set_seed(cfg.seed)  # before the head is initialised
    accelerator = make_accelerator()
    model = build_classifier(model_cfg.name, labels)
    experiment_id = use_experiment()
    with mlflow.start_run(experiment_id=experiment_id) as run:  # ends FAILED on an exception
        log.info("MLflow run %s on %s", run.info.run_id, accelerator.device)
        logged = {s: params[s] for s in LOGGED_SECTIONS}
        mlflow.log_params(flatten(logged))
        mlflow.set_tags(lineage_tags({"tokens": args.tokens, "splits": args.splits}))
        model = fit(model, splits["train"], splits["validation"], cfg, tokenizer.pad_token_id,
                    accelerator, CurveWriter(args.curve))
        if accelerator.is_main_process:
            out = Path(args.model_dir)
            model.save(out)
            tokenizer.save_pretrained(out)
            write_json(out / "params.json", {s: dataclasses.asdict(p) for s, p in logged.items()})
            mlflow.log_artifacts(str(out), artifact_path="model")
            write_json(args.run_file, {"run_id": run.info.run_id, "experiment_id": experiment_id,
                                       "tracking_uri": mlflow.get_tracking_uri()})


if __name__ == "__main__":
    main()
