"""Stage train: token ids + split -> fine-tuned model folder, training curve, guard
results, weight movement and one MLflow run.

Guards run in order: pretrained-load audit, optimizer coverage, learning-rate sanity,
the collapse detector at each validation, and the weight-movement audit at the end.
A failing guard records its result (reports/guards.json, MLflow tag) and fails the stage.

A checkpoint is saved after every epoch (and every train.checkpoint_every steps) in
--checkpoint-dir, a folder DVC does not manage (a `persist` output would turn off DVC's
run-cache for this stage). A rerun after Ctrl-C, SIGTERM or SIGKILL resumes from it into
the same MLflow run; SIGINT/SIGTERM save one at the next step and end the run KILLED.
"""
from __future__ import annotations

import sys

from textclf.stage import run_stage, setup_logging, stage_parser
from textclf.train.paths import TrainPaths
from textclf.train.run import run


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--model-dir", required=True, help="output model folder")
    parser.add_argument("--curve", required=True, help="output CSV: per-epoch loss and validation scores")
    parser.add_argument("--guards", required=True, help="output JSON: guard results")
    parser.add_argument("--movement", required=True, help="output CSV: relative weight change per layer")
    parser.add_argument("--run-file", required=True, help="output JSON naming the MLflow run")
    parser.add_argument("--val-predictions", default=TrainPaths.val_predictions,
                        help="output parquet: the kept model's per-document validation predictions "
                             "(out of sample: the labels stage judges validation labels with them)")
    parser.add_argument("--features", default=TrainPaths.features,
                        help="the features stage's output, which train.head_init probe fits the head on "
                             "(default: computed by this stage, not kept)")
    parser.add_argument("--lock", default=TrainPaths.lock, help="dvc.lock, logged to the run as its lineage")
    parser.add_argument("--checkpoint-dir", default=TrainPaths.checkpoint_dir,
                        help="training checkpoints, to resume an interrupted training")
    paths = TrainPaths(**vars(parser.parse_args(argv)))
    setup_logging()
    run(paths, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    run_stage(main)
