"""How a params.yaml section is built: checked on construction (its fields' `Literal[...]`
choices and `ranged` intervals, then its own cross-field rules) and parsed from YAML (types
coerced, unknown keys named). The sections themselves are in textclf.config."""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Literal, TypeVar, get_args, get_origin, get_type_hints

from textclf.errors import UserError

INF = float("inf")
T = TypeVar("T")


def ranged(default: T, low: float = -INF, high: float = INF, low_open: bool = False,
           high_open: bool = False, note: str = "") -> T:
    """A numeric field with its valid interval (and a note on what else bounds it)."""
    return field(default=default, metadata={"range": (low, high, low_open, high_open), "note": note})


def _describe(low: float, high: float, low_open: bool, high_open: bool) -> str:
    if high == INF:
        return f"{'>' if low_open else '>='} {low:g}"
    if low == -INF:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def _check_range(where: str, value: Any, spec: tuple[float, float, bool, bool], note: str) -> None:
    low, high, low_open, high_open = spec
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if below or above:
        raise UserError(f"params.yaml: {where}={value!r} is out of range: it must be {_describe(*spec)}"
                        f"{f' ({note})' if note else ''}; set it in params.yaml or with `-S {where}=...`.")


@dataclass(frozen=True)
class Section:
    """A frozen params section at `where` (e.g. ingest.near_duplicates): every construction,
    from params.yaml or in code, checks each field, then `check`."""
    where: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in dataclasses.fields(self):
            key, value, choices = f"{self.where}.{f.name}", getattr(self, f.name), get_args(hints[f.name])
            if get_origin(hints[f.name]) is Literal and value not in choices:
                raise UserError(f"params.yaml: {key}={value!r} must be one of {list(choices)}.")
            if "range" in f.metadata:
                _check_range(key, value, f.metadata["range"], f.metadata["note"])
        self.check()

    def check(self) -> None:
        """The section's rules across fields (none by default)."""


S = TypeVar("S", bound=Section)


def hint(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else f" Known keys: {', '.join(sorted(known))}."


def _coerce(section: str, name: str, value: Any, default: Any, choices: tuple = ()) -> Any:
    """Check a value against the type of its default. YAML reads `5e-5` as a string
    (YAML 1.1 needs `5.0e-5`), so numeric strings are accepted for float fields. YAML 1.1
    (PyYAML) reads a bare `off` as false, while DVC's `-S` writes it bare (YAML 1.2 keeps it
    a word): a choice field that offers "off" takes false as "off"."""
    where = f"params.yaml: {section}.{name}={value!r}"
    if isinstance(default, str) and isinstance(value, bool):
        if value is False and "off" in choices:
            return "off"
        words = f"one of {list(choices)}" if choices else "a string"
        raise UserError(f"{where} was read as a YAML boolean; write {words}, quoted if YAML would read it "
                        f"as true or false.")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UserError(f"{where} must be true or false.")
        return value
    if isinstance(default, float):
        # the example is the field's default, valid whatever its range (2.0e-5 is no threshold)
        example = f"{default:.1e}" if default and abs(default) < 1e-3 else f"{default!r}"
        if isinstance(value, bool):
            raise UserError(f"{where} must be a number, e.g. {example}.")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UserError(f"{where} must be a number, e.g. {example}.") from None
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{where} must be an integer.")
        return value
    if isinstance(default, Section):
        return parse(type(default), f"{section}.{name}", value)
    if not isinstance(value, type(default)):
        raise UserError(f"{where} must be a {type(default).__name__}.")
    return value


def parse(cls: type[S], where: str, raw: Any) -> S:
    """A section from its raw YAML mapping (None: all defaults); an unknown key fails, naming
    the closest known one."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError(f"params.yaml: section {where!r} must be a mapping, got {raw!r}.")
    names = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in names:
            raise UserError(f"params.yaml: unknown key {where}.{key}." + hint(key, names))
    defaults, hints = cls(), get_type_hints(cls)
    return cls(**{k: _coerce(where, k, v, getattr(defaults, k), get_args(hints[k])) for k, v in raw.items()})
