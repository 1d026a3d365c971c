"""The train stage's paths as frozen values: from its arguments, from its command in dvc.yaml, and back."""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from textclf.errors import UserError


@dataclass(frozen=True, kw_only=True)
class TrainInputs:
    """What a training reads: the token ids, the split table, the params, and the checkpoint
    folder it resumes from (the paths its checkpoint key and its resume depend on)."""
    tokens: str
    splits: str
    params: str = "params.yaml"
    checkpoint_dir: str = "models/checkpoint"  # not a DVC output (stages/train.py says why)


@dataclass(frozen=True, kw_only=True)
class TrainPaths(TrainInputs):
    """What a training reads and writes: its DVC outputs, and the dvc.lock it logs as its lineage."""
    model_dir: str
    curve: str
    guards: str
    movement: str
    run_file: str
    val_predictions: str = ""  # the kept model's validation predictions (parquet); "": not written
    features: str = ""  # the features stage's output (train.head_init probe); "": computed here
    lock: str = "dvc.lock"

    def argv(self) -> list[str]:
        """The stage's arguments that give these paths."""
        return [word for f in dataclasses.fields(self) for word in (flag(f.name), getattr(self, f.name))]


def flag(name: str) -> str:
    """A field's command-line flag: model_dir -> --model-dir."""
    return "--" + name.replace("_", "-")


def stage_inputs(dvc_yaml: str | Path) -> TrainInputs:
    """The train stage's inputs as its command in dvc.yaml gives them (each path is written
    once, there); a flag it leaves out takes the stage's default."""
    words = shlex.split(yaml.safe_load(Path(dvc_yaml).read_text())["stages"]["train"]["cmd"])
    fields = dataclasses.fields(TrainInputs)
    missing = [flag(f.name) for f in fields if f.default is dataclasses.MISSING and flag(f.name) not in words]
    if missing:
        raise UserError(f"{dvc_yaml}: the train stage's command gives no {' or '.join(missing)}: name the "
                        "stage's inputs there, as the project's dvc.yaml does.")
    return TrainInputs(**{f.name: words[words.index(flag(f.name)) + 1] for f in fields if flag(f.name) in words})
