"""The Optuna study of a sweep: where it is stored, the checks that keep one study one search
(its space, objective and fixed params are stored with it), who may work on it, and the
ask -> queue -> run -> judge -> tell loop."""
from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path

import optuna
from optuna.trial import TrialState

from textclf.errors import UserError
from textclf.config import SweepParams
from textclf.sweep.space import Dim
from textclf.sweep.trials import adopt, judge_all, restored_child
from textclf.tracking.dvc_exps import dvc, queue, run_queued, states_of

log = logging.getLogger(__name__)
SETTINGS = "textclf_sweep"  # the study's user attribute: the search it is


def storage_url(cfg: SweepParams, root: Path) -> str:
    return cfg.storage or f"sqlite:///{root / '.sweep' / 'optuna.db'}"


def single_worker_lock(url: str, study: str, root: Path):
    """A SQLite study takes one worker (SQLite is not for parallel writers: "database is
    locked"): an flock held while the sweep runs -> its open file."""
    if not url.startswith("sqlite"):
        return None
    path = root / ".sweep" / f"{study}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UserError(f"another sweep of study {study!r} is running on this machine; a SQLite "
                        "study takes one worker. Wait for it, or give sweep.storage a PostgreSQL "
                        "URL and start more with --join.") from None
    return handle


def settings_of(cfg: SweepParams, dims: list[Dim], fixed: list[str]) -> dict:
    return {"space": {d.name: [d.kind, list(d.values)] for d in dims}, "objective": cfg.objective,
            "fixed": sorted(fixed), "n_trials": cfg.n_trials}


def open_study(cfg: SweepParams, dims: list[Dim], fixed: list[str], url: str, join: bool) -> optuna.Study:
    """Create the study, or load it (a resume, or --join from another machine); one that exists
    with another space, objective or fixed params fails in one line."""
    if join and url.startswith("sqlite"):
        raise UserError("--join needs a study other machines reach: set sweep.storage to the team's "
                        "PostgreSQL (postgresql://…, docs/sweeps.md); a SQLite study runs on one machine.")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    direction = "maximize" if cfg.objective == "val_macro_f1" else "minimize"
    try:
        study = optuna.load_study(study_name=cfg.study, storage=url)
    except KeyError:
        if join:
            raise UserError(f"no study {cfg.study!r} in {url.split('@')[-1]} to join; start it "
                            "without --join on one machine first.") from None
        study = optuna.create_study(study_name=cfg.study, storage=url, direction=direction, load_if_exists=True)
    # seeded by the trials the study holds: a resumed sweep (or a joining machine) draws on from
    # there, where sweep.seed alone restarted the stream and re-ran trial 0's very parameters
    study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + len(study.trials), constant_liar=True)
    wanted, stored = settings_of(cfg, dims, fixed), study.user_attrs.get(SETTINGS)
    if stored is None:
        study.set_user_attr(SETTINGS, wanted)
    elif stored != wanted:
        changed = [k for k in wanted if wanted[k] != stored.get(k)]
        raise UserError(f"study {cfg.study!r} exists with another {', '.join(changed)} "
                        f"({stored}); name a new sweep.study, or put its settings back.")
    return study


def counted(study: optuna.Study) -> list:
    """The trials that are some of the n_trials: complete, running, or failed with a reason (a
    guard alarm, a failed experiment). One interrupted, or asked past n_trials, failed with none."""
    return [t for t in study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.RUNNING)
            or (t.state == TrialState.FAIL and "reason" in t.user_attrs)]


def left_running(study: optuna.Study, status: str | None = None) -> tuple[list, dict[str, str]]:
    """Trials this machine ran whose sweep died (a SIGKILL, a lost session), against `dvc queue
    status` (asked when there are any) -> (those DVC's queue still has queued, running or
    finished: taken over, to be waited for and scored; {experiment: state} of them). The others
    (Failed, or no longer in the queue) are not counted, so the same command runs them again.
    The queue's workers outlive the sweep: a trial is dead only when DVC says so."""
    host, live = socket.gethostname(), []
    dead = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get("host") == host and t.user_attrs.get("pid")
            and not Path(f"/proc/{t.user_attrs['pid']}").exists()]
    if not dead:
        return [], {}
    states = states_of(status or dvc("queue", "status"), {t.user_attrs.get("experiment", ""): task(t) for t in dead})
    for t in dead:
        name = t.user_attrs.get("experiment")
        state = states.get(name, "gone")
        if state in ("Queued", "Running", "Success"):
            trial = optuna.trial.Trial(study, t._trial_id)  # Optuna's handle on a trial by its id
            trial.set_user_attr("pid", os.getpid())  # this sweep's now
            live.append(trial)
            log.warning("trial %d (%s) was left by a sweep that died; DVC's queue has it %s: %s",
                        t.number, name, state, "scoring it" if state == "Success" else "waiting for it")
        else:
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)  # no reason: not counted
            log.warning("trial %d (%s) was left running by a sweep that died, and DVC's queue %s: run again",
                        t.number, name, "no longer lists it" if state == "gone" else f"has it {state}")
    taken = {t.user_attrs["experiment"] for t in live}
    return live, {n: s for n, s in states.items() if n in taken}


def task(trial) -> str:
    """A trial's task in DVC's queue: its id; its experiment name for a study from before ids were kept."""
    return trial.user_attrs.get("task", trial.user_attrs.get("experiment", ""))


def ask(study: optuna.Study, cfg: SweepParams, dims: list[Dim]):
    """A new trial, or None when n_trials are taken (another machine may have asked meanwhile)."""
    trial = study.ask({d.name: d.distribution() for d in dims})
    earlier = [t for t in counted(study) if t.number < trial.number]
    if len(earlier) >= cfg.n_trials:
        study.tell(trial, state=TrialState.FAIL)  # no reason: not counted
        return None
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())
    trial.set_user_attr("experiment", f"{cfg.study}-t{trial.number}")
    return trial


def run_batch(study: optuna.Study, cfg: SweepParams, dims: list[Dim], fixed: list[str],
              client, exp_id: str, parent_id: str) -> int:
    """Ask up to `parallel` trials, run them as queued DVC experiments, tell each outcome ->
    how many ran (0: the study has its n_trials)."""
    batch: list[optuna.trial.Trial] = []
    while len(batch) < cfg.parallel and len(counted(study)) < cfg.n_trials:
        trial = ask(study, cfg, dims)
        if trial is None:
            break
        trial.set_user_attr("task", queue(trial.user_attrs["experiment"],
                                          [d.override(trial.params[d.name]) for d in dims] + fixed))
        batch.append(trial)
    finish(study, cfg, batch, client, exp_id, parent_id)
    return len(batch)


def finish(study: optuna.Study, cfg: SweepParams, batch: list, client, exp_id: str, parent_id: str,
           states: dict[str, str] | None = None) -> None:
    """Wait for the batch's experiments (unless `states` says none is queued or running), then
    tell each outcome."""
    if not batch:
        return
    names = [t.user_attrs["experiment"] for t in batch]
    try:
        if states is None or {"Queued", "Running"} & set(states.values()):
            states = run_queued({t.user_attrs["experiment"]: task(t) for t in batch}, cfg.parallel)
    except BaseException:  # Ctrl-C, SIGTERM: what runs is stopped, and not counted
        for trial, name in zip(batch, names):
            dvc_quiet("queue", "kill", name)
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)  # no reason: not counted
        raise
    outcomes = judge_all(client, exp_id, {n: states.get(n, "unknown") for n in names}, cfg.objective)
    for trial, name in zip(batch, names):
        tell(study, trial, outcomes[name], client, exp_id, parent_id, cfg)


def tell(study: optuna.Study, trial, outcome, client, exp_id: str, parent_id: str, cfg: SweepParams) -> None:
    trial.set_user_attr("warnings", outcome.warnings)
    trial.set_user_attr("chance", outcome.chance)
    run_id = outcome.run_id
    if outcome.restored_from:  # its training run belongs to the trial it was restored from
        trial.set_user_attr("restored_from", {"experiment": outcome.restored_from, "run_id": outcome.run_id})
        run_id = restored_child(client, exp_id, parent_id, cfg.study, trial.number,
                                trial.user_attrs["experiment"], outcome, cfg.objective)
    elif run_id:
        adopt(client, run_id, parent_id, cfg.study, trial.number)
    trial.set_user_attr("run_id", run_id)
    if outcome.value is None:
        trial.set_user_attr("reason", outcome.reason)
        study.tell(trial, state=TrialState.FAIL)
        log.warning("trial %d failed: %s", trial.number, outcome.reason)
        return
    study.tell(trial, outcome.value)
    notes = [f"warnings: {', '.join(outcome.warnings)}"] if outcome.warnings else []
    if outcome.restored_from:
        notes.append(f"restored from DVC's run-cache: the training of {outcome.restored_from}, run {outcome.run_id}")
    log.info("trial %d: %s = %.4f %s%s", trial.number, cfg.objective, outcome.value, trial.params,
             f" ({'; '.join(notes)})" if notes else "")


def dvc_quiet(*args: str) -> None:
    try:
        dvc(*args)
    except UserError as err:  # already finished or never started: nothing to stop
        log.info("%s", err)
