"""A stage script's frame: its argument parser, its logging, and `run_stage`, the entry point
that turns interrupts and the errors a user can fix into one clear line and an exit status."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable

from textclf.errors import DEBUG_ENV, UserError, expected, one_line, store_error
from textclf.processes import LAUNCH_ID, exit_with_parent
from textclf.signals import Interrupted, exit_on_signals, interrupt_on_signals

log = logging.getLogger("textclf")


def stage_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    return parser


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("accelerate").setLevel(logging.WARNING)  # a line per file of each checkpoint


RESUME = "rerun the same command (or `dvc repro`) to resume"  # a stage's: what to do once interrupted


def run_stage(main: Callable[[], None], after_interrupt: str = RESUME) -> None:
    """Entry point of a stage script. An expected error is logged as one line, exit status 1,
    without a traceback (with it under TEXTCLF_DEBUG=1); anything else is a bug and raises
    with its traceback. SIGINT/SIGTERM become Interrupted (exit 130/143), logged with
    `after_interrupt` (what is true of this command: a tool DVC does not run says its own);
    once main has ended, a signal exits at once (signals.exit_on_signals)."""
    interrupt_on_signals()
    exit_with_parent()
    try:
        main()
    except BaseException as err:
        exit_on_signals()
        sys.exit(_exit_status(err, after_interrupt))
    exit_on_signals()


def _exit_status(err: BaseException, after_interrupt: str = RESUME) -> int:
    """Log what ended a stage in one line and return its exit status; re-raise a bug (and a
    SystemExit of main's own, argparse's for one)."""
    if isinstance(err, Interrupted):
        # a rank stopped by its launcher (torchrun's SIGTERM after another rank failed, or the
        # user's signal passed on) only warns: the launcher says the run's one error line
        say = log.warning if os.environ.get(LAUNCH_ID) else log.error
        say("interrupted by %s; %s", err, err.after or after_interrupt)
        return 128 + err.signum
    if not isinstance(err, Exception) or not expected(err):
        raise err
    if os.environ.get(DEBUG_ENV) == "1":
        log.exception("the traceback, as %s=1 asks:", DEBUG_ENV, exc_info=err)
    if isinstance(err, UserError):
        log.error("%s", err)
    else:
        log.error("%s%s", "MLflow tracking store error: " if store_error(err) else "", one_line(err))
    return 1
