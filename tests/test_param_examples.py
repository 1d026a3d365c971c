"""A params error's "e.g." is a value the check accepts: following the advice must work."""
from __future__ import annotations

import dataclasses
import re

import pytest

from textclf.errors import UserError
from textclf.config import Params, TokenizeParams, load_params
from textclf.data.tokenizing import windows
from textclf.section import Section


@pytest.mark.parametrize("max_length", [16, 32, 34, 256])
def test_the_stride_suggested_fits_the_window(max_length):
    """tokenize.stride=32 with max_length=32 once proposed 32 itself."""
    with pytest.raises(UserError, match=r"lower tokenize\.stride \(e\.g\. \d+\)") as err:
        TokenizeParams(truncation="chunks", max_length=max_length, stride=max_length)
    stride = int(re.search(r"e\.g\. (\d+)", str(err.value)).group(1))
    assert stride != 32 or max_length == 256
    TokenizeParams(truncation="chunks", max_length=max_length, stride=stride)  # accepted
    budget = max_length - 2
    with pytest.raises(UserError, match=r"e\.g\. \d+") as err:
        windows(list(range(3 * budget)), budget, budget)
    windows(list(range(3 * budget)), budget, int(re.search(r"e\.g\. (\d+)", str(err.value)).group(1)))


def float_fields(cls: type[Section]):
    """The yaml path (section.key) of every float field, nested sections included."""
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, Section):
            yield from float_fields(type(default))
        elif isinstance(default, float):
            yield f"{cls.where}.{f.name}"


def nest(path: str, leaf: object) -> dict:
    tree = leaf
    for key in reversed(path.split(".")):
        tree = {key: tree}
    return tree


def test_a_float_param_that_is_no_number_suggests_a_number_in_its_range(tmp_path):
    """`must be a number, e.g. 2.0e-5` was said of ingest.near_duplicates.threshold too, whose
    range is [0.5, 1]: the example is the field's default, written as YAML reads a float."""
    paths = [p for s in dataclasses.fields(Params) for p in float_fields(type(getattr(Params(), s.name)))]
    assert "ingest.near_duplicates.threshold" in paths and "train.lr_encoder" in paths
    file = tmp_path / "params.yaml"
    for path in paths:
        file.write_text(yaml_of(nest(path, "not-a-number")))
        with pytest.raises(UserError, match=f"{re.escape(path)}=.* must be a number, e.g. ") as err:
            load_params(file)
        example = re.search(r"e\.g\. (\S+)\.$", str(err.value)).group(1)
        file.write_text(yaml_of(nest(path, example), raw=True))
        load_params(file)  # the example itself is accepted, read as YAML reads it


def yaml_of(tree: dict, raw: bool = False, indent: int = 0) -> str:
    """A nested mapping as YAML text; `raw` leaves the leaf unquoted (as a user types it)."""
    lines = []
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(f"{' ' * indent}{key}:\n{yaml_of(value, raw, indent + 2)}")
        else:
            lines.append(f"{' ' * indent}{key}: {value if raw else repr(value)}")
    return "\n".join(lines) + ("\n" if indent == 0 else "")
