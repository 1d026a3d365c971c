"""One training's context on each rank (`Training`): what train's steps read, built once by
the stage's run (train.run) and handed to the steps that need it whole (train.targets)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from accelerate import Accelerator

from textclf.config import Params
from textclf.model.batching import Split
from textclf.train.checkpoint import Checkpointer
from textclf.train.paths import TrainPaths
from textclf.train.records import Tracker

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class Training:
    """What one training holds, on every rank: its paths, params and data, the tokenizer, and
    what its steps share: the accelerator, the checkpointer (with the checkpoint it found to
    resume) and the tracker (rank 0's RunLog, NoTracking on the others)."""
    paths: TrainPaths
    params: Params
    splits: dict[str, Split]
    labels: list[str]
    tokenizer: PreTrainedTokenizerBase
    accelerator: Accelerator
    checkpointer: Checkpointer
    tracker: Tracker
