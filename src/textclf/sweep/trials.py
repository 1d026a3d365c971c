"""A finished trial judged from its training run in MLflow: the validation objective at the
kept epoch, unless a guard raised an alarm (then the trial failed, with the guard's reason,
and is never the best); the training run becomes a child of the study's parent run."""
from __future__ import annotations

from dataclasses import dataclass, field

from mlflow.tracking import MlflowClient

from textclf.severity import ALARM, WARNING, with_severity

PARENT_TAG, TRIAL_TAG, STUDY_TAG = "mlflow.parentRunId", "sweep.trial", "sweep.study"


@dataclass
class Outcome:
    """What a trial came to: a value (complete) or the reason it failed; the warnings."""
    value: float | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    run_id: str = ""


def training_run(client: MlflowClient, exp_id: str, name: str):
    """The newest training run of the DVC experiment `name` (its run name and dvc.exp_name tag)."""
    runs = client.search_runs([exp_id], filter_string=f"tags.`dvc.exp_name` = '{name}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def judge(client: MlflowClient, exp_id: str, name: str, state: str, objective: str) -> Outcome:
    """A queued experiment's end state and its training run -> the trial's outcome."""
    run = training_run(client, exp_id, name)
    if run is None:
        return Outcome(reason=f"the experiment {name} has no training run in the tracking store "
                              f"({state}; dvc queue logs {name})")
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


def adopt(client: MlflowClient, run_id: str, parent_id: str, study: str, number: int) -> None:
    """Make the trial's training run a child of the study's run, with its trial number."""
    for key, value in ((PARENT_TAG, parent_id), (STUDY_TAG, study), (TRIAL_TAG, str(number))):
        client.set_tag(run_id, key, value)


def parent_run(client: MlflowClient, exp_id: str, study: str) -> str:
    """The study's parent run (created on the first sweep of it, found on a resume or --join)."""
    found = client.search_runs([exp_id], filter_string=f"tags.`{STUDY_TAG}` = '{study}' and "
                                                        "tags.`sweep.parent` = 'true'", max_results=1)
    if found:
        return found[0].info.run_id
    run = client.create_run(exp_id, run_name=f"sweep-{study}",
                            tags={STUDY_TAG: study, "sweep.parent": "true"})
    return run.info.run_id
