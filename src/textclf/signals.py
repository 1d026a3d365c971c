"""SIGINT and SIGTERM in a stage: `Interrupted`, raised at once or, inside
`deferred_interrupts` (a training loop between safe points), where the loop asks; once the
stage has ended, an exit without cleanup."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Any

log = logging.getLogger("textclf")


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM: the stage saves what it can, records the run as KILLED
    and exits 128 + signal number, as a shell reports a signal death."""

    def __init__(self, signum: int, after: str | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.after = after  # what to do now, where the stage's usual line is not true (a phase with no checkpoint)


# While `deferred` is set (a training loop between safe points), a signal is only noted;
# the loop calls raise_if_interrupted() where its state is consistent. A second signal
# while one is pending stops at once.
_signals: dict[str, Any] = {"deferred": False, "pending": None}  # pending: a signal number


def _on_signal(signum, frame) -> None:
    if _signals["deferred"] and _signals["pending"] is None:
        _signals["pending"] = signum
        log.warning("%s received: stopping at the next safe point (send it again to stop now)",
                    signal.Signals(signum).name)
        return
    raise Interrupted(signum)


def _leave_now(signum, frame) -> None:
    """A signal once the stage has ended, while the interpreter shuts down (atexit callbacks:
    torch's compile-time summary, MLflow's): the stage is leaving already, so it leaves at
    once. Raising Interrupted there printed an "Exception ignored in atexit callback"
    traceback below the stage's one-line error (torchrun's SIGTERM to a surviving rank)."""
    os._exit(128 + signum)


@contextlib.contextmanager
def deferred_interrupts():
    """Inside the block, SIGINT/SIGTERM wait for raise_if_interrupted()."""
    _signals["deferred"], _signals["pending"] = True, None
    try:
        yield
    finally:
        _signals["deferred"] = False
    raise_if_interrupted()


def interrupt_pending() -> bool:
    return _signals["pending"] is not None


def raise_if_interrupted(default: int | None = None) -> None:
    """Raise the pending signal as Interrupted; or `default` when none is pending here
    (another rank of a multi-process run was signalled)."""
    signum, _signals["pending"] = _signals["pending"], None
    signum = signum if signum is not None else default
    if signum is not None:
        raise Interrupted(signum)


def interrupt_on_signals() -> None:
    """While a stage runs: SIGINT/SIGTERM raise Interrupted (inside deferred_interrupts, at
    the loop's next safe point)."""
    _on_signals(_on_signal)


def exit_on_signals() -> None:
    """Once a stage has ended: SIGINT/SIGTERM exit at once (_leave_now)."""
    _on_signals(_leave_now)


def _on_signals(handler) -> None:
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
