"""A sweep's search space: params.yaml's `sweep.space`, checked against the params it names
before any training (a value each end of a range, or each choice, must be one the section
accepts), and the Optuna distribution of each dimension."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from textclf.errors import UserError
from textclf.config import SECTIONS, Params, parse_section
from textclf.section import hint

KINDS = ("log_uniform", "uniform", "int", "choice")
EXAMPLE = "train.lr_encoder: {log_uniform: [1.0e-6, 1.0e-2]}"


@dataclass(frozen=True)
class Dim:
    """One dimension: a param as `dvc exp run -S` names it, its kind, (low, high) or choices."""
    name: str
    kind: str
    values: tuple

    def distribution(self):
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.kind == "choice":
            return CategoricalDistribution(self.values)
        if self.kind == "int":
            return IntDistribution(*self.values)
        low, high = self.values
        return FloatDistribution(low, high, log=self.kind == "log_uniform")

    def override(self, value: Any) -> str:
        """-> `name=value` for `dvc exp run -S` (YAML: a float keeps its exponent's dot)."""
        if isinstance(value, bool):
            return f"{self.name}={str(value).lower()}"
        return f"{self.name}={float(value)!r}" if isinstance(value, float) else f"{self.name}={value}"


def _accepts(params: Params, name: str, value: Any) -> None:
    """Build the param's section with `value` in it: a value the section refuses fails here,
    in the section's own words."""
    section, *path = name.split(".")
    raw = copy.deepcopy(dataclasses.asdict(getattr(params, section)))
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    try:
        parse_section(section, raw)
    except UserError as err:  # the section's own words, with the fix that applies to a sweep
        why = str(err).removeprefix("params.yaml: ").split("; set it in params.yaml")[0].rstrip(".")
        raise UserError(f"params.yaml: sweep.space.{name} may sample {value!r}, which the param refuses ({why}): "
                        f"narrow sweep.space.{name}.") from None


def _known(params: Params, name: str) -> None:
    section, *path = name.split(".")
    if section not in SECTIONS or section == "sweep" or not path:
        raise UserError(f"params.yaml: sweep.space names {name!r}, not a param a trial can set "
                        f"(section.key, e.g. {EXAMPLE})." + hint(section, set(SECTIONS) - {"sweep"}))
    node: Any = dataclasses.asdict(getattr(params, section))
    for depth, key in enumerate(path):
        if not isinstance(node, dict) or key not in node:
            known = node if isinstance(node, dict) else {}
            raise UserError(f"params.yaml: sweep.space names {name!r}: "
                            f"{'.'.join([section, *path[:depth + 1]])} is no param." + hint(key, known))
        node = node[key]


def _dim(params: Params, name: str, spec: Any) -> Dim:
    where = f"params.yaml: sweep.space.{name}"
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise UserError(f"{where}={spec!r} must be one of {{{': ..., '.join(KINDS)}: ...}}, e.g. {EXAMPLE}.")
    kind, values = next(iter(spec.items()))
    if kind == "choice":
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: choice needs a non-empty list of values, got {values!r}.")
    else:
        numeric = (int,) if kind == "int" else (int, float)
        if (not isinstance(values, list) or len(values) != 2
                or not all(isinstance(v, numeric) and not isinstance(v, bool) for v in values)):
            raise UserError(f"{where}: {kind} needs [low, high], two {'integers' if kind == 'int' else 'numbers'}, "
                            f"got {values!r}.")
        if not values[0] < values[1]:
            raise UserError(f"{where}: the range {values} is empty; low must be below high.")
        if kind == "log_uniform" and values[0] <= 0:
            raise UserError(f"{where}: log_uniform needs low > 0, got {values[0]!r}.")
    for value in values:
        _accepts(params, name, value)
    return Dim(name, kind, tuple(values))


def parse_space(params: Params) -> list[Dim]:
    """params.sweep.space -> its dimensions, each checked, in params.yaml's order."""
    dims = []
    for name, spec in params.sweep.space.items():
        _known(params, name)
        dims.append(_dim(params, name, spec))
    return dims
