"""What a user can fix, told apart from a bug: `UserError`, the errors the world causes (a path,
a full disk, the tracking store) and their one line, and an environment variable checked as a
param is."""
from __future__ import annotations

import os


class UserError(ValueError):
    """A mistake the user can fix (a bad param, a missing file, a failed guard): a stage
    reports it in one line that names the cause and the fix. Any other exception is a bug
    and keeps its traceback. A ValueError, so that callers catching bad input still do."""


DEBUG_ENV = "TEXTCLF_DEBUG"  # =1: user errors keep their traceback too


def store_error(err: BaseException) -> bool:
    """An MLflow or SQLAlchemy error, told by its module so that stages which never log
    (ingest, split) need not import either library."""
    return any(c.__module__.split(".")[0] in ("mlflow", "sqlalchemy") for c in type(err).__mro__)


def one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename:
        return (f"cannot use {err.filename}: {err.strerror or err}. Check that the path exists, "
                "is of the right kind (file or folder) and is writable.")
    text = str(getattr(err, "message", "") or err).strip().splitlines()
    return text[0] if text else type(err).__name__


def expected(err: BaseException) -> bool:
    """A UserError, an OSError (a path that cannot be read or written, a full disk) or a
    tracking-store error: the world, not the code, is at fault."""
    return isinstance(err, (UserError, OSError)) or store_error(err)


def positive_int_env(env: str, default: int = 0) -> int:
    """An environment variable that must be a positive integer -> its value, or `default`
    when it is unset or empty (0: the caller leaves the choice to its library)."""
    value = os.environ.get(env, "")
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        unset = f"default {default}" if default else "unset: the library's choice"
        raise UserError(f"{env}={value!r} must be a positive integer ({unset}).")
    return int(value)
