"""One meaning for every guard status, read by the report, the registry's promotion gate
and the guard benchmark (no torch here: the report imports it).

alarm: the kept model is broken (a guard failed the run, or the kept epoch predicts one
class). It never becomes champion, and the report opens with it.
warning: the run went somewhere unusual (a learning rate far above the usual range, an
encoder left random on purpose, an epoch that collapsed before the kept one recovered), but
the kept model is sound; it competes for champion on its test score like any other, and
the report lists it as a note.
pass: nothing to say.
"""
from __future__ import annotations

from textclf.errors import UserError

ALARM, WARNING, PASS = "alarm", "warning", "pass"
SEVERITY = {"fail": ALARM, "collapsed": ALARM, "warn": WARNING, "allowed": WARNING,
            "recovered": WARNING, "pass": PASS}


def severity(status: str) -> str:
    """A guard status -> alarm | warning | pass."""
    if status not in SEVERITY:
        raise UserError(f"unknown guard status {status!r}; known: {', '.join(SEVERITY)}.")
    return SEVERITY[status]


def with_severity(statuses: dict[str, str], kind: str) -> list[str]:
    """The guards (name -> status) whose status is of this kind, in their order."""
    return [name for name, status in statuses.items() if severity(status) == kind]
