"""The train stage as `python -m stages.train` runs it, sending itself a real signal at an
exact point, for the recovery tests: the tiny model trains too fast to aim a signal from
outside. Usage: python tests/signalled_train.py SIGNAL EPOCH STEP -- <train stage args>.
STEP 0: right after epoch EPOCH's checkpoint is saved; STEP > 0: right after optimizer
step STEP of epoch EPOCH, before the stage's own after-step checkpoint logic runs; STEP -1:
before the first batch of epoch EPOCH's validation."""
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stages import train  # noqa: E402
from textclf.train.checkpoint import Checkpointer  # noqa: E402
from textclf.stage import run_stage  # noqa: E402


def at(points: set[tuple[int, int]], action) -> None:
    """Call action(epoch, step) at each point (epoch, step) of the training: step 0 right after
    the epoch's checkpoint is saved, step > 0 right after that optimizer step, before the
    stage's own after-step checkpoint logic runs, step -1 before each batch of the epoch's
    validation. (tests/paused_train.py uses it too.)"""
    after_step, after_epoch, during = Checkpointer.after_step, Checkpointer.after_epoch, Checkpointer.during_validation

    def on_step(self, accelerator, e, s, loss_sum):
        if s and (e, s) in points:
            action(e, s)
        after_step(self, accelerator, e, s, loss_sum)

    def on_epoch(self, accelerator, e):
        after_epoch(self, accelerator, e)
        if (e, 0) in points:
            action(e, 0)

    def on_validation(self, accelerator, e, s, loss_sum):
        if (e, -1) in points:
            action(e, -1)
        during(self, accelerator, e, s, loss_sum)

    Checkpointer.after_step, Checkpointer.after_epoch, Checkpointer.during_validation = on_step, on_epoch, on_validation


def aim(sig: signal.Signals, epoch: int, step: int) -> None:
    at({(epoch, step)}, lambda e, s: os.kill(os.getpid(), sig))


if __name__ == "__main__":
    name, epoch, step, sep, *args = sys.argv[1:]
    assert sep == "--", sys.argv
    aim(signal.Signals[name], int(epoch), int(step))
    sys.argv = [sys.argv[0], *args]
    run_stage(train.main)
