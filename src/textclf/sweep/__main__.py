"""Find good hyperparameters: a guarded Optuna search whose trials are DVC experiments.

    python -m textclf.sweep [-S tokenize.max_length=64 ...]   # the `sweep` section of params.yaml
    python -m textclf.sweep --join                            # another machine, a PostgreSQL study

Each trial is `dvc exp run --queue` of the whole pipeline with the sampled params (and any -S),
`parallel` at a time (`dvc queue start -j`); Optuna picks the next ones from the finished ones.
A trial whose kept model has a guard alarm failed, with the guard's reason; the score is the
validation objective at the kept epoch, never a test score. Inspect a trial with `dvc exp show`,
take one with `dvc exp apply NAME && dvc exp run -S evaluate.register=true` (trials
register no model version; a plain `dvc repro` after the apply would not either). The same command resumes an interrupted sweep.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from mlflow.tracking import MlflowClient

from textclf.errors import UserError
from textclf.stage import run_stage, setup_logging
from textclf.config import load_params, params_file
from textclf.sweep.space import parse_space
from textclf.sweep.study import finish, left_running, open_study, run_batch, single_worker_lock, storage_url
from textclf.sweep.summary import headline, write
from textclf.sweep.trials import parent_run
from textclf.tracking.runs import project_root, tracking_uri, use_experiment

log = logging.getLogger("textclf.sweep")


def fixed_params(overrides: list[str], dims) -> list[str]:
    """-S values every trial gets; one the space samples, or not key=value, is refused. Trials
    register no model version (evaluate.register=false) unless -S says otherwise: the registry
    picks a champion by test score, and twelve trials to pick from would select on the test set."""
    names = {d.name for d in dims}
    for item in overrides:
        key, eq, _ = item.partition("=")
        if not eq or not key:
            raise UserError(f"-S {item!r}: give key=value, as for dvc exp run -S.")
        if key in names:
            raise UserError(f"-S {item!r}: {key} is in sweep.space; the sampler sets it.")
    given = {o.partition("=")[0] for o in overrides}
    return overrides + ([] if "evaluate.register" in given else ["evaluate.register=false"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("-S", "--set-param", dest="overrides", action="append", default=[],
                        help="a param every trial gets, as for dvc exp run -S (repeatable)")
    parser.add_argument("--join", action="store_true", help="work on a study another machine started")
    parser.add_argument("--out", default="reports/sweep.json", help="the summary (and .md beside it)")
    args = parser.parse_args(argv)
    setup_logging()
    with params_file(args.params):  # the space's refusals name the file read
        params = load_params(args.params)
        cfg, dims = params.sweep, parse_space(params)  # every refusal before any training
    fixed = fixed_params(args.overrides, dims)
    root = project_root()
    url = storage_url(cfg, root)
    held = single_worker_lock(url, cfg.study, root)  # held until the process ends
    study = open_study(cfg, dims, fixed, url, args.join)
    left, states = left_running(study)
    exp_id = use_experiment(tracking_uri())
    client = MlflowClient(tracking_uri())
    parent_id = parent_run(client, exp_id, cfg.study)
    log.info("sweep %s: %d trials, %d at a time, %s (%s); MLflow parent run %s", cfg.study, cfg.n_trials,
             cfg.parallel, cfg.objective, url.split("@")[-1], parent_id)
    finish(study, cfg, left, client, exp_id, parent_id, states)  # a dead sweep's trials DVC still has
    while run_batch(study, cfg, dims, fixed, client, exp_id, parent_id):
        write(study, cfg.objective, Path(args.out), client, parent_id)
    found = write(study, cfg.objective, Path(args.out), client, parent_id)
    client.set_terminated(parent_id)
    if held:
        held.close()
    (log.warning if found["learned"] is False else log.info)("%s", headline(found))


if __name__ == "__main__":
    run_stage(main, "rerun the same command to resume the sweep (the study keeps its trials)")
