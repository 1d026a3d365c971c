"""A finished trial judged from its training run in MLflow: the validation objective at the
kept epoch, unless a guard raised an alarm (then the trial failed, with the guard's reason,
and is never the best); the training run becomes a child of the study's parent run. A trial
whose training DVC restored from its run-cache is judged from the run that trained it."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from textclf.severity import ALARM, WARNING, with_severity
from textclf.sweep.chance import SPLIT_COUNTS, chance
from textclf.tracking.dvc_exps import committed_file, experiments, revisions, shown

PARENT_TAG, TRIAL_TAG, STUDY_TAG = "mlflow.parentRunId", "sweep.trial", "sweep.study"
RESTORED_TAG, TRAINING_TAG = "sweep.restored_from", "sweep.training_run"


@dataclass
class Outcome:
    """What a trial came to: a value (complete) or the reason it failed; the warnings."""
    value: float | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    run_id: str = ""
    restored_from: str = ""  # the experiment whose training DVC's run-cache restored
    chance: dict | None = None  # what a predictor that never reads the texts scores (sweep.chance)


def training_run(client: MlflowClient, exp_id: str, name: str):
    """The newest training run of the DVC experiment `name` (its run name and dvc.exp_name tag)."""
    runs = client.search_runs([exp_id], filter_string=f"tags.`dvc.exp_name` = '{name}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def restored_run(client: MlflowClient, name: str, metrics: dict | None):
    """-> (the run that trained what DVC restored into `name`, its id). When a trial's params
    match an earlier experiment's, `dvc exp run` restores train from the run-cache: no training
    runs, so no run carries the trial's name, and its outputs (evaluate's metrics.json, in
    `dvc exp show`) name the earlier training run."""
    run_id = ((metrics or {}).get("mlflow") or {}).get("run_id", "")
    try:
        return (client.get_run(run_id) if run_id else None), run_id
    except MlflowException:  # a teammate's run-cache (dvc pull --run-cache), another store's run
        return None, run_id


def judge(client: MlflowClient, exp_id: str, name: str, state: str, objective: str,
          metrics: dict | None = None) -> Outcome:
    """A queued experiment's end state, its training run (or the one DVC restored it from, which
    `metrics`, its metrics.json, names) -> the trial's outcome."""
    run, restored_from = training_run(client, exp_id, name), ""
    if run is None and state == "Success":
        run, run_id = restored_run(client, name, metrics)
        if run is None and run_id:
            return Outcome(reason=f"DVC restored the experiment {name}'s training from its run-cache "
                                  f"(run {run_id}), and that run is not in this tracking store")
        restored_from = run and run.data.tags.get("dvc.exp_name", run.info.run_id)
    if run is None:
        return Outcome(reason=f"the experiment {name} has no training run in the tracking store "
                              f"({state}; dvc queue logs {name})")
    outcome = _judge_run(client, run, name, state, objective)
    outcome.restored_from = restored_from or ""
    return outcome


def _judge_run(client: MlflowClient, run, name: str, state: str, objective: str) -> Outcome:
    guards = {k.removeprefix("guard."): v for k, v in run.data.tags.items() if k.startswith("guard.")}
    warnings = [f"{g}={guards[g]}" for g in with_severity(guards, WARNING)]
    alarms = with_severity(guards, ALARM)
    if alarms:  # a guard that fails the train stage (weight_movement, load_audit) fails the experiment too
        return Outcome(reason="guard alarm: " + ", ".join(f"{g}={guards[g]}" for g in alarms),
                       warnings=warnings, run_id=run.info.run_id)
    if state != "Success":
        return Outcome(reason=f"the experiment {name} failed (dvc queue logs {name})",
                       warnings=warnings, run_id=run.info.run_id)
    kept = int(run.data.metrics.get("kept_epoch", 0))
    values = [m.value for m in client.get_metric_history(run.info.run_id, objective) if m.step == kept]
    if not values:
        return Outcome(reason=f"no {objective} at the kept epoch {kept} in run {run.info.run_id}",
                       warnings=warnings, run_id=run.info.run_id)
    return Outcome(value=values[-1], warnings=warnings, run_id=run.info.run_id)


def judge_all(client: MlflowClient, exp_id: str, states: dict[str, str], objective: str) -> dict[str, Outcome]:
    """{experiment: end state} -> {experiment: outcome}, each complete one with its chance bar
    (its commit's validation class counts; `dvc exp show` once for all)."""
    listed = shown()
    found, metrics, out = revisions(listed), experiments(listed), {}
    for name, state in states.items():
        entry = found.get(name) or {}
        out[name] = judge(client, exp_id, name, state, objective, metrics.get(name))
        counts = entry.get("rev") and committed_file(entry["rev"], SPLIT_COUNTS)
        if out[name].value is not None and counts:
            params = ((entry.get("data") or {}).get("params") or {}).get("params.yaml", {}).get("data") or {}
            out[name].chance = chance(objective, json.loads(counts),
                                      (params.get("train") or {}).get("class_weights", "none"))
    return out


def adopt(client: MlflowClient, run_id: str, parent_id: str, study: str, number: int) -> None:
    """Make the trial's training run a child of the study's run, with its trial number."""
    for key, value in ((PARENT_TAG, parent_id), (STUDY_TAG, study), (TRIAL_TAG, str(number))):
        client.set_tag(run_id, key, value)


def restored_child(client: MlflowClient, exp_id: str, parent_id: str, study: str, number: int,
                   experiment: str, outcome: Outcome, objective: str) -> str:
    """A restored trial's own child run of the study's run -> its id. The training run it was
    restored from stays where it is (another study's child, or this study's earlier trial):
    this one names it (tags sweep.restored_from, sweep.training_run) and holds the score."""
    run = client.create_run(exp_id, run_name=f"{experiment} (restored from {outcome.restored_from})",
                            tags={PARENT_TAG: parent_id, STUDY_TAG: study, TRIAL_TAG: str(number),
                                  "dvc.exp_name": experiment, RESTORED_TAG: outcome.restored_from,
                                  TRAINING_TAG: outcome.run_id})
    if outcome.value is not None:
        client.log_metric(run.info.run_id, objective, outcome.value)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def parent_run(client: MlflowClient, exp_id: str, study: str) -> str:
    """The study's parent run (created on the first sweep of it, found on a resume or --join)."""
    found = client.search_runs([exp_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}' and "
                                                        "tags.`sweep.parent` = 'true'", max_results=1)
    if found:
        return found[0].info.run_id
    run = client.create_run(exp_id, run_name=f"sweep-{study}",
                            tags={STUDY_TAG: study, "sweep.parent": "true"})
    return run.info.run_id
