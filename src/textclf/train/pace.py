"""What a training will cost, said after its first few optimizer steps: the measured steps/s and
documents/s, and the estimated seconds of the whole run (its steps and validations); and, with
train.budget_minutes, how many steps fit the budget (StepPlan)."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

log = logging.getLogger(__name__)
WARMUP_STEPS = 1  # the first step allocates and fills caches: several times slower, not timed
TIMED_STEPS = 6  # then these are timed: a few seconds on a CPU, the estimate within a few %
# validation runs the forward pass alone, about a third of a training step's work per token
# (forward + backward ≈ 3 forwards), on every validation row once per epoch
FORWARD_SHARE = 1 / 3
AUTO_EPOCHS = 6  # train.epochs 0: at most this many, fewer where train.budget_minutes says
# train.budget_minutes: the plan measured again at these shares of the budget, from every step and
# validation so far. The first steps' pace misjudges a whole run where the batches' lengths vary
# (stdlib, 2026-12-07: 26 min 51 s estimated, about 16 min taken); REPACE_OFF: a plan within this share
# of the re-measured one stands (an estimate that held changes nothing)
REPACE_AT = (0.25, 0.5, 0.75)
REPACE_OFF = 0.1


def padded_tokens(batches: Iterable[list[int]], lengths: np.ndarray) -> int:
    """Token slots of `batches` (index lists) once padded to each batch's longest row: what a
    step costs grows with them, not with the step count (length-grouped batches differ 5-fold)."""
    return int(sum(len(b) * int(lengths[b].max()) for b in batches))


@dataclass
class Pace:
    """This process's remaining training, measured as it starts: `steps` optimizer steps (after
    the `done` a resumed training took before) over
    `tokens` padded token slots (their batches as this process sees them), `documents` training
    documents per epoch in `steps_per_epoch` steps, and `validations` passes over
    `validation_tokens` token slots. tick() after each step -> the estimate, once, when the timed
    steps are done (finish() at an epoch's end gives it from fewer, for a short run)."""
    steps: int
    done: int
    tokens: int
    documents: int
    steps_per_epoch: int
    validations: int
    validation_tokens: int
    clock: Callable[[], float] = time.perf_counter
    estimate: dict[str, float] | None = None
    per_token: float = 0.0  # measured seconds per padded token slot of a training step
    validated: int = 0  # passes over validation so far, and their seconds (end_epoch's)
    validation_spent: float = 0.0
    checks: int = 0  # REPACE_AT's shares measured again so far
    _seen: int = 0
    _timed_tokens: int = 0
    _start: float = 0.0

    def tick(self, batch_tokens: int, sync: Callable[[], object]) -> dict[str, float] | None:
        """After a step over `batch_tokens` padded slots; `sync` waits for the device (called
        only where the timer starts and stops) -> the estimate when it is first known."""
        if self.estimate is not None:
            return None
        self._seen += 1
        if self._seen == WARMUP_STEPS:
            sync()
            self._start = self.clock()
            return None
        self._timed_tokens += batch_tokens
        return self.finish(sync) if self._seen == WARMUP_STEPS + TIMED_STEPS else None

    def finish(self, sync: Callable[[], object]) -> dict[str, float] | None:
        """The estimate from the steps timed so far (none timed: none) -> it, once."""
        timed = self._seen - WARMUP_STEPS
        if self.estimate is not None or timed < 1:
            return None
        sync()
        seconds = self.clock() - self._start
        self.per_token = seconds / max(1, self._timed_tokens)
        return self.reestimate(timed / seconds)

    def reestimate(self, steps_per_s: float) -> dict[str, float]:
        """The estimate of the steps and validations left, at the measured pace -> it."""
        validation_s = self.validation_seconds() * self.validations
        self.estimate = {"train_steps_per_s": steps_per_s,
                         "train_documents_per_s": steps_per_s * self.documents / self.steps_per_epoch,
                         "estimated_train_seconds": self.per_token * self.tokens + validation_s,
                         "estimated_validation_seconds": validation_s}
        return self.estimate

    def step_seconds(self) -> float:
        """An average step's seconds (the steps left's padded tokens, measured pace)."""
        return self.per_token * self.tokens / max(1, self.steps)

    def validation_seconds(self) -> float:
        """One pass over validation (forward only), at the measured pace."""
        return self.per_token * FORWARD_SHARE * self.validation_tokens

    def plan_line(self, batch_size: int) -> str:
        """What is said before the first step."""
        return (f"training: {self.steps} optimizer steps left ({self.steps_per_epoch} an epoch of {self.documents} "
                f"documents, batch {batch_size}) and {self.validations} validations; their time is "
                f"estimated after {WARMUP_STEPS + TIMED_STEPS} steps")

    def estimate_line(self) -> str:
        """The estimate, in a line."""
        e = self.estimate or {}
        return (f"pace: {e['train_steps_per_s']:.2f} steps/s, {e['train_documents_per_s']:.1f} documents/s: the "
                f"whole training ({self.steps} steps, {self.validations} validations) should take about "
                f"{duration(e['estimated_train_seconds'])}, validation {duration(e['estimated_validation_seconds'])} "
                "of it (train.epochs × steps an epoch, or train.max_steps; train.patience may stop it sooner)")


def plan(first_epoch: Iterable[list[int]], lengths, total: int, done: int, documents: int,
         validation_lengths) -> Pace:
    """The training left: `total` optimizer steps of which `done` are taken, over `documents`
    training documents of token `lengths` (rows), batched as `first_epoch` (this process's
    batches of the first epoch left; its padded tokens scaled to the steps left), validated
    after each epoch on rows of `validation_lengths` tokens -> its Pace."""
    batches = list(first_epoch)
    per_epoch = len(batches)
    steps = total - done
    return Pace(steps=steps, done=done, tokens=int(padded_tokens(batches, np.asarray(lengths)) * steps / per_epoch),
                documents=documents, steps_per_epoch=per_epoch,
                validations=math.ceil(total / per_epoch) - done // per_epoch,
                validation_tokens=int(np.sum(validation_lengths)))


def duration(seconds: float) -> str:
    """4000 -> '1 h 07 min'; 75 -> '1 min 15 s'; 12.3 -> '12 s'."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


@dataclass
class StepPlan:
    """How many optimizer steps a training takes (`total`, `per_epoch` an epoch):
    train.max_steps, else train.epochs' steps, else (train.epochs 0) AUTO_EPOCHS' steps cut,
    once the pace is measured, to what train.budget_minutes holds (`budget_s`, 0: none;
    `decided` once cut). Rides in the checkpoint: a resumed training keeps the steps decided."""
    total: int
    per_epoch: int
    budget_s: float = 0.0
    decided: bool = True
    cap: int = 0  # the epochs' cap on total (0: total), which a plan measured again may grow to

    def state_dict(self) -> dict:
        return {"total": self.total, "decided": self.decided}

    def load_state_dict(self, state: dict) -> None:
        self.total, self.decided = state["total"], state["decided"]

    @property
    def epochs(self) -> int:
        return math.ceil(self.total / self.per_epoch)


def step_plan(epochs: int, max_steps: int, budget_minutes: float, per_epoch: int) -> StepPlan:
    """The params' plan before the first step (see StepPlan)."""
    cap = (epochs or AUTO_EPOCHS) * per_epoch
    total = cap if max_steps == 0 else min(max_steps, cap)
    budgeted = epochs == 0 and max_steps == 0 and budget_minutes > 0
    return StepPlan(total, per_epoch, budget_minutes * 60 if budgeted else 0.0, decided=not budgeted, cap=total)


def train_plan(cfg, per_epoch: int, processes: int) -> StepPlan:
    """train's StepPlan from its params (TrainParams). Several processes do not apply the
    budget: each would measure its own pace and could stop at another step. Said once; the
    epochs' cap trains instead."""
    steps = step_plan(cfg.epochs, cfg.max_steps, cfg.budget_minutes, per_epoch)
    if processes > 1 and not steps.decided:
        log.warning("train.budget_minutes=%g is not applied on %d processes: train.epochs 0 trains %d epochs; "
                    "set train.epochs or train.max_steps to choose", cfg.budget_minutes, processes, steps.epochs)
        steps.decided, steps.budget_s = True, 0.0
    return steps


def steps_within(seconds: float, taken: int, plan: StepPlan, step_s: float, validation_s: float,
                 validated: int = 0) -> int:
    """The most steps in all (at least `taken`, at most plan.total) whose steps left
    (`step_s` each) and validations (`validation_s` each: after every epoch, and after the
    last step; `validated` of them done) fit in `seconds`."""
    best = taken
    for epochs in range(1, plan.epochs + 1):
        room = (seconds - max(0, epochs - validated) * validation_s) / max(step_s, 1e-9)
        steps = min(epochs * plan.per_epoch, plan.total, taken + int(room))
        if steps > (epochs - 1) * plan.per_epoch:  # this many validations: a step of the epoch at least
            best = max(best, steps)
    return best


def cut_to_budget(plan: StepPlan, pace: Pace, taken: int, elapsed: float) -> str:
    """train.budget_minutes, once the pace is known, `taken` steps and `elapsed` seconds
    into the training: plan.total (and pace.steps) cut to what the rest of the budget holds
    -> the line that says so."""
    cap = plan.total
    plan.total = steps_within(plan.budget_s - elapsed, taken, plan, pace.step_seconds(), pace.validation_seconds())
    plan.decided = True
    left = plan.total - pace.done
    pace.tokens, pace.steps = int(pace.tokens * left / max(1, pace.steps)), left
    pace.validations = plan.epochs - pace.done // plan.per_epoch
    if pace.estimate is not None:
        pace.reestimate(pace.estimate["train_steps_per_s"])
    minutes = plan.budget_s / 60
    if plan.total == cap:
        return (f"train.budget_minutes={minutes:g}: all {cap} steps ({cap / plan.per_epoch:.3g} epochs) fit, "
                f"with {plan.epochs} validations")
    return (f"train.budget_minutes={minutes:g}: {plan.total} of {cap} steps fit ({plan.total / plan.per_epoch:.2f} "
            f"epochs of {plan.per_epoch}), with {plan.epochs} validations; the step count follows this machine's "
            f"pace: -S train.max_steps={plan.total} repeats this training anywhere")


def repace(plan: StepPlan, pace: Pace, taken: int, elapsed: float) -> str | None:
    """train.budget_minutes once `elapsed` seconds pass a share of it in REPACE_AT (`taken`
    steps in all): plan.total cut again, up to the epochs' cap, at the pace of every step and
    validation so far, where it moves by more than REPACE_OFF -> the line that says so, else
    None. A resumed training keeps its plan: its clock began at the resume, not the budget's."""
    if (not plan.budget_s or pace.done or pace.estimate is None or pace.checks >= len(REPACE_AT)
            or elapsed < REPACE_AT[pace.checks] * plan.budget_s):
        return None
    pace.checks += 1
    step_s = (elapsed - pace.validation_spent) / max(1, taken)
    validation_s = (pace.validation_spent / pace.validated if pace.validated else
                    pace.validation_seconds() * step_s / max(pace.step_seconds(), 1e-9))  # first: scaled alike
    cap = StepPlan(plan.cap or plan.total, plan.per_epoch)
    total = steps_within(plan.budget_s - elapsed, taken, cap, step_s, validation_s, pace.validated)
    if abs(total - plan.total) <= REPACE_OFF * plan.total:
        return None
    before, plan.total = plan.total, total
    return (f"train.budget_minutes={plan.budget_s / 60:g}: measured again after {taken} steps "
            f"({duration(elapsed)}, {1 / max(step_s, 1e-9):.2f} steps/s): {total} steps fit, not {before} "
            f"({total / plan.per_epoch:.2f} epochs of {plan.per_epoch}, {plan.epochs} validations); "
            f"-S train.max_steps={total} repeats this training anywhere")
