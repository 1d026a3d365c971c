"""Training checkpoints, so that an interrupted training resumes where it stopped.

Accelerate's save_state/load_state hold the model (safetensors), optimizer, scheduler and
RNG states (read back with torch.load(weights_only=True)). What else rides in a checkpoint
(epoch rows, guard results, the epoch selector, the run id) is a `Stateful` object handed to
the checkpointer (`attach`), which saves each one's state_dict() with every checkpoint and,
on resume, loads it back with load_state_dict(): `trainer_state.json` holds the progress and
the states' JSON values, `states.safetensors` their tensors (the best epoch's weights).

    models/checkpoint/latest.json          {"key", "dir", "epoch", "step"}: the newest
    models/checkpoint/epoch-2-step-0/      a complete checkpoint; manifest.json: each file's
                                           size and md5, written last
    models/checkpoint/epoch-1-step-0/      the one before it, the fallback

A checkpoint is written to `<dir>.tmp`, renamed, and only then named in latest.json (an
atomic replace), so a kill during a save leaves the previous checkpoint in charge; a save
that fails (a full disk) removes its `.tmp` and stops the stage in one line, the previous
checkpoint still in charge. Before resuming, every file is checked against the manifest:
a damaged checkpoint (a copy cut short, garbage) is discarded in one line, and training
falls back to the one before it, else starts over; it never trains on garbage. One saved in
another FORMAT (by an older textclf) is discarded in one line too. A save first
deletes every checkpoint but the newest complete one, which stays as the fallback: the disk
holds two at most (the one being written counted), and after the save the newest two.
The key hashes everything that shapes training: a changed param or input never resumes.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from textclf.errors import UserError
from textclf.files import file_md5, read_json, write_json
from textclf.signals import interrupt_pending, raise_if_interrupted

log = logging.getLogger(__name__)
LATEST, STATE, TENSORS, MANIFEST = "latest.json", "trainer_state.json", "states.safetensors", "manifest.json"
NAME = re.compile(r"^epoch-(\d+)-step-(\d+)$")
FORMAT = 2  # of trainer_state.json; 1 (no "format"): the stage's state under "extra"


class Stateful(Protocol):
    """What rides in a checkpoint. state_dict() values are JSON values, or `dict[str, Tensor]`
    (weights: saved as safetensors); load_state_dict() gets back what state_dict() gave."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def training_key(settings: dict, data_files: dict[str, str | Path]) -> str:
    """md5 of the settings (JSON-able) and of each data file's md5."""
    files = {name: file_md5(path) for name, path in data_files.items()}
    return hashlib.md5(json.dumps([settings, files], sort_keys=True, default=str).encode()).hexdigest()


def manifest(folder: Path) -> dict[str, list]:
    """Every file of a checkpoint folder -> [size, md5]."""
    return {p.relative_to(folder).as_posix(): [p.stat().st_size, file_md5(p)]
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}


def damage(folder: Path) -> str | None:
    """What is wrong with a checkpoint folder, or None when every file is as it was saved
    and its trainer state reads."""
    try:
        saved = read_json(folder / MANIFEST)
    except (OSError, ValueError) as err:
        return f"its {MANIFEST} is missing or unreadable ({type(err).__name__})"
    for name, (size, md5) in saved.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} were saved (cut short?)"
        if file_md5(path) != md5:
            return f"{name} is not what was saved (md5 differs)"
    if STATE not in saved:
        return f"it has no {STATE}"
    return None


def _newest_first(folder: Path) -> list[Path]:
    """Complete checkpoint folders (renamed from .tmp), newest first."""
    children = folder.iterdir() if folder.is_dir() else []
    found = [(int(m[1]), int(m[2]), p) for p in children if p.is_dir() and (m := NAME.match(p.name))]
    return [p for *_, p in sorted(found, reverse=True)]


@dataclass
class Progress:
    epoch: int = 0  # epochs completed
    step: int = 0  # optimizer steps already taken in epoch `epoch + 1`
    loss_sum: float = 0.0  # their summed loss, so the epoch's mean loss comes out the same


States = dict[str, dict[str, Any]]  # state dicts by name


def _is_tensors(value: object) -> bool:
    return isinstance(value, dict) and bool(value) and all(isinstance(v, torch.Tensor) for v in value.values())


def split_states(states: States) -> tuple[States, dict[str, torch.Tensor]]:
    """-> (the JSON values, the tensors named "name/key/tensor")."""
    values: States = {}
    tensors: dict[str, torch.Tensor] = {}
    for name, state in states.items():
        values[name] = {key: value for key, value in state.items() if not _is_tensors(value)}
        tensors.update({f"{name}/{key}/{k}": t for key, value in state.items() if _is_tensors(value)
                        for k, t in value.items()})
    return values, tensors


def join_states(values: States, tensors: dict[str, torch.Tensor]) -> States:
    """split_states undone."""
    states = {name: dict(state) for name, state in values.items()}
    for full, tensor in tensors.items():
        name, key, k = full.split("/", 2)
        states[name].setdefault(key, {})[k] = tensor
    return states


class Checkpointer:
    """Saves after every epoch, every `every` optimizer steps (0: never mid-epoch), and at
    the first safe point after SIGINT/SIGTERM (then raises Interrupted)."""

    def __init__(self, folder: str | Path, key: str, every: int = 0, main: bool = True):
        self.folder, self.key, self.every = Path(folder), key, every
        self.main = main  # only the main process deletes and writes states (every rank reads)
        self.states: dict[str, Stateful] = {}
        self.resume: Progress | None = None
        self.found: Path | None = None  # the folder `resume` came from

    def find(self) -> Progress | None:
        """The newest undamaged checkpoint to resume from, or None. Damaged ones are
        discarded, naming the damage; one made with another key discards them all."""
        for candidate in _newest_first(self.folder):
            problem = damage(candidate)
            if problem:
                log.warning("discarding checkpoint %s: %s", candidate, problem)
                if self.main:
                    shutil.rmtree(candidate, ignore_errors=True)
                continue
            state = read_json(candidate / STATE)
            if state.get("format", 1) != FORMAT:
                log.warning("discarding checkpoint %s: another version of textclf saved it (checkpoint "
                            "format %s; this one reads %d)", self.folder, state.get("format", 1), FORMAT)
                break
            if state.get("key") != self.key:
                log.info("discarding checkpoint %s: it was made with other params or data", self.folder)
                break
            self.resume = Progress(state["epoch"], state["step"], state["loss_sum"])
            self.found = candidate
            log.info("resuming from checkpoint %s (epoch %d done, step %d of the next)",
                     candidate, state["epoch"], state["step"])
            return self.resume
        self.clear()  # nothing to resume: leftovers of saves that never completed, or stale
        return None

    def attach(self, **states: Stateful) -> None:
        """Save each object's state with every checkpoint, under its name; when find() found a
        checkpoint, load that checkpoint's state into each now (every rank)."""
        if self.found is not None:
            tensors = {}  # only these objects': a selector's weights are the model's size
            if (self.found / TENSORS).is_file():
                with safe_open(str(self.found / TENSORS), framework="pt") as file:
                    tensors = {k: file.get_tensor(k) for k in file.keys() if k.split("/", 1)[0] in states}
            saved = join_states(read_json(self.found / STATE)["states"], tensors)
            for name, obj in states.items():
                obj.load_state_dict(saved[name])
        self.states.update(states)

    def restore(self, accelerator) -> Progress:
        """After accelerator.prepare: load the found checkpoint's model, optimizer, scheduler
        and RNG states -> its progress."""
        if self.resume is None:
            return Progress()
        accelerator.load_state(str(self.found))
        return self.resume

    def save(self, accelerator, progress: Progress) -> None:
        name = f"epoch-{progress.epoch}-step-{progress.step}"
        final, tmp = self.folder / name, self.folder / f"{name}.tmp"
        if accelerator.is_main_process:
            self._keep_only(name, *[p.name for p in _newest_first(self.folder) if p.name != name][:1])
        accelerator.wait_for_everyone()
        try:
            accelerator.save_state(str(tmp))  # every rank writes its RNG state
            accelerator.wait_for_everyone()
            if not accelerator.is_main_process:
                return
            values, tensors = split_states({part: obj.state_dict() for part, obj in self.states.items()})
            if tensors:
                save_file(tensors, str(tmp / TENSORS))
            write_json(tmp / STATE, {"format": FORMAT, "key": self.key, "epoch": progress.epoch,
                                     "step": progress.step, "loss_sum": progress.loss_sum, "states": values})
            write_json(tmp / MANIFEST, manifest(tmp))  # last: a folder without it is incomplete
        except (OSError, RuntimeError, SafetensorError) as err:  # torch.save: RuntimeError
            shutil.rmtree(tmp, ignore_errors=True)
            previous = _newest_first(self.folder)
            raise UserError(f"could not save the checkpoint {final} ({str(err).strip().splitlines()[-1]}); "
                            + (f"the previous one, {previous[0].name}, stays in charge" if previous
                               else "no earlier checkpoint exists")
                            + f": free space under {self.folder}, then rerun the same command to "
                            "resume.") from err
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        write_json(self.folder / LATEST, {"key": self.key, "dir": name, "epoch": progress.epoch,
                                          "step": progress.step})
        log.info("checkpoint saved: %s", final)

    def _keep_only(self, *names: str) -> None:
        """Delete every checkpoint folder not named (older ones, leftovers of killed saves)."""
        for old in self.folder.iterdir() if self.folder.is_dir() else []:
            if old.is_dir() and old.name not in names:
                shutil.rmtree(old, ignore_errors=True)

    def after_step(self, accelerator, epoch: int, step: int, loss_sum) -> None:
        """Called by the loop after optimizer step `step` of `epoch` (1-based)."""
        stop = _agreed(accelerator, interrupt_pending())
        if (self.every and step % self.every == 0) or stop:
            # every rank resumes from this one sum, and the epoch's loss is the mean over ranks
            # of their sums: so save the mean of the sums so far, not rank 0's
            mean = float(accelerator.reduce(loss_sum, "mean"))  # one process: loss_sum itself
            self.save(accelerator, Progress(epoch - 1, step, mean))
        if stop:
            raise_if_interrupted(signal.SIGTERM)

    def during_validation(self, accelerator, epoch: int, step: int, loss_sum) -> None:
        """Called before each batch of epoch `epoch`'s validation, its steps all taken (the last
        `step`, their summed loss `loss_sum`): a signal stops the pass there, saving those steps,
        and the resumed epoch validates again. The signal waited for the pass's end, minutes on a
        large validation split (issue 60)."""
        if _agreed(accelerator, interrupt_pending()):
            self.save(accelerator, Progress(epoch - 1, step, float(accelerator.reduce(loss_sum, "mean"))))
            raise_if_interrupted(signal.SIGTERM)

    def after_epoch(self, accelerator, epoch: int) -> None:
        stop = _agreed(accelerator, interrupt_pending())
        self.save(accelerator, Progress(epoch, 0, 0.0))
        if stop:
            raise_if_interrupted(signal.SIGTERM)

    def clear(self) -> None:
        if self.main:
            shutil.rmtree(self.folder, ignore_errors=True)


def _agreed(accelerator, stop: bool) -> bool:
    """Whether any rank was signalled: all ranks must save and stop at the same step, or
    one would wait forever in the next collective. One process needs no collective."""
    if accelerator.num_processes == 1:
        return stop
    flag = torch.tensor([float(stop)], device=accelerator.device)
    return bool(accelerator.reduce(flag, "sum").item() > 0)
