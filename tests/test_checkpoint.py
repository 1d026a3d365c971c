"""Damaged checkpoints: a file cut short, garbage in place of a file, or a missing manifest
is found before resuming; the checkpoint is discarded in one warning naming the file, and
training falls back to an older complete checkpoint, else starts over. A real Accelerate
save (model, optimizer, scheduler, RNG states) of a small linear model: no training needed."""
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from torch import nn

from textclf.files import read_json
from textclf.files import write_json
from textclf.train.checkpoint import MANIFEST, STATE, TENSORS, Checkpointer, Progress, damage, manifest
from textclf.train import loop
from textclf.train.selection import EpochSelector

KEY = "k1"


class Rows:
    """A state that rides in the checkpoint: JSON values and tensors."""

    def __init__(self):
        self.rows, self.w = [], torch.ones(2)

    def state_dict(self):
        return {"rows": list(self.rows), "tensors": {"w": self.w}}

    def load_state_dict(self, state):
        self.rows, self.w = state["rows"], state["tensors"]["w"]


def prepared_linear():
    """-> (accelerator, model, optimizer) of a small linear model, prepared."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    accelerator = Accelerator(cpu=True)
    model, optimizer, _ = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model, optimizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A checkpoint folder after two saves: epoch-1-step-0 and epoch-2-step-0, both complete
    (a save keeps the previous checkpoint, for the fallback)."""
    folder = tmp_path_factory.mktemp("ckpt") / "ckpt"
    accelerator, model, optimizer = prepared_linear()
    ckpt, rows = Checkpointer(folder, KEY), Rows()
    ckpt.attach(rows=rows)
    rows.rows = [1]
    ckpt.save(accelerator, Progress(1, 0, 0.0))
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    rows.rows, rows.w = [1, 2], torch.zeros(2)
    ckpt.save(accelerator, Progress(2, 0, 0.0))
    return folder


def test_a_save_keeps_the_previous_checkpoint_and_deletes_older_ones(tmp_path):
    """Two checkpoints at most between saves: the newest and the one before it (the fallback
    when the newest is damaged); a leftover .tmp of a killed save goes too."""
    accelerator, _, _ = prepared_linear()
    ckpt = Checkpointer(tmp_path / "ckpt", KEY)
    kept = []
    for epoch, step in [(1, 0), (1, 2), (2, 0)]:
        if epoch == 2:
            (tmp_path / "ckpt" / "epoch-1-step-3.tmp").mkdir()  # a save killed midway
        ckpt.save(accelerator, Progress(epoch, step))
        kept.append(sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.is_dir()))
    assert kept == [["epoch-1-step-0"], ["epoch-1-step-0", "epoch-1-step-2"],
                    ["epoch-1-step-2", "epoch-2-step-0"]]
    assert all(damage(tmp_path / "ckpt" / name) is None for name in kept[-1])


def test_a_saved_checkpoint_lists_every_file_in_its_manifest(saved):
    files = {p.name for p in (saved / "epoch-2-step-0").iterdir()}
    assert {STATE, TENSORS, MANIFEST, "model.safetensors", "optimizer.bin"} <= files
    assert damage(saved / "epoch-2-step-0") is None
    assert Checkpointer(saved, KEY).find().epoch == 2  # undamaged: the newest


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garbage(path: Path) -> None:  # the same size, other bytes
    path.write_bytes(bytes(255 - b for b in path.read_bytes()))


@pytest.mark.parametrize("how", [cut_short, garbage])
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin", "scheduler.bin",
                                  "random_states_0.pkl", STATE, TENSORS, MANIFEST])
def test_a_damaged_checkpoint_is_discarded_for_the_previous_one(saved, tmp_path, caplog, name, how):
    folder = shutil.copytree(saved, tmp_path / "ckpt")
    how(folder / "epoch-2-step-0" / name)
    caplog.set_level(logging.INFO, logger="textclf.train.checkpoint")
    ckpt, rows = Checkpointer(folder, KEY), Rows()
    found = ckpt.find()
    ckpt.attach(rows=rows)
    assert found is not None and (found.epoch, rows.rows) == (1, [1])
    assert ckpt.found == folder / "epoch-1-step-0" and rows.w.tolist() == [1, 1]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "discarding checkpoint" in warned[0] and "epoch-2-step-0" in warned[0]
    assert name in warned[0] or (name == MANIFEST and MANIFEST in warned[0])
    assert not (folder / "epoch-2-step-0").exists()


def test_with_no_complete_checkpoint_training_starts_over(saved, tmp_path, caplog):
    folder = shutil.copytree(saved, tmp_path / "ckpt")
    cut_short(folder / "epoch-2-step-0" / "model.safetensors")
    (folder / "epoch-1-step-0" / STATE).write_text("{not json")
    (folder / "epoch-3-step-0.tmp").mkdir()  # a save that never completed
    assert Checkpointer(folder, KEY).find() is None
    assert not folder.exists()  # nothing left to trip over next time


def test_another_key_discards_every_checkpoint(saved, tmp_path):
    folder = shutil.copytree(saved, tmp_path / "ckpt")
    assert Checkpointer(folder, "other params").find() is None and not folder.exists()


def test_the_epoch_selector_resumes_with_the_best_epochs_weights(tmp_path):
    """select: best keeps epoch 1's weights while epoch 2 trains on: a resume gets both its
    bookkeeping (JSON) and those weights (safetensors) back."""
    accelerator, model, _ = prepared_linear()
    selector, ckpt = EpochSelector("best", patience=2), Checkpointer(tmp_path / "ckpt", KEY)
    ckpt.attach(selector=selector)
    selector.update({"epoch": 1, "val_macro_f1": 0.8, "val_loss": 0.5}, model)
    with torch.no_grad():
        model.weight.add_(1.0)
    selector.update({"epoch": 2, "val_macro_f1": 0.6, "val_loss": 0.9}, model)
    ckpt.save(accelerator, Progress(2, 0, 0.0))
    resumed, found = EpochSelector("best", patience=2), Checkpointer(tmp_path / "ckpt", KEY)
    assert found.find().epoch == 2
    found.attach(selector=resumed)
    assert {k: v for k, v in resumed.state_dict().items() if k != "weights"} == {
        k: v for k, v in selector.state_dict().items() if k != "weights"}
    assert resumed.kept_epoch == 1 and resumed.weights.keys() == selector.weights.keys()
    assert all(torch.equal(resumed.weights[k], selector.weights[k]) for k in selector.weights)


def test_a_checkpoint_of_the_older_format_is_discarded_in_one_line(saved, tmp_path, caplog):
    """Format 1 kept the stage's state under "extra" and had no "format": undamaged (its
    manifest matches), the same key, and still nothing to resume."""
    folder = shutil.copytree(saved, tmp_path / "ckpt")
    for checkpoint in ("epoch-1-step-0", "epoch-2-step-0"):
        old = folder / checkpoint
        state = read_json(old / STATE)
        write_json(old / STATE, {**{k: state[k] for k in ("key", "epoch", "step", "loss_sum")}, "extra": {}})
        write_json(old / MANIFEST, manifest(old))
    caplog.set_level(logging.INFO, logger="textclf.train.checkpoint")
    assert Checkpointer(folder, KEY).find() is None and not folder.exists()
    (line,) = [r.getMessage() for r in caplog.records]
    assert "discarding checkpoint" in line and "checkpoint format 1; this one reads 2" in line


def save_on_rank(rank: int, folder: str, port: int) -> None:
    """One of 2 gloo ranks: a step checkpoint of an epoch whose summed loss differs per rank."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2")
    accelerator, _, _ = prepared_linear()
    Checkpointer(folder, KEY, every=1, main=rank == 0).after_step(accelerator, 1, 1, torch.tensor(1.0 + 2 * rank))


def test_two_ranks_save_the_mean_of_their_losses(tmp_path):
    """Each rank resumes from the saved loss_sum and the epoch's loss is the mean over ranks of
    their sums: with rank 0's alone saved (1.0 of 1.0 and 3.0), a resumed epoch's train_loss
    came out 1.0 / steps lower than the uninterrupted one's. Saved: the mean, 2.0."""
    from conftest import free_port  # here, not at the top: each rank imports this module
    torch.multiprocessing.spawn(save_on_rank, (str(tmp_path / "ckpt"), free_port()), nprocs=2)
    assert read_json(tmp_path / "ckpt" / "epoch-0-step-1" / STATE)["loss_sum"] == 2.0


class Killed(Exception):
    """Stands for a kill right after a mid-epoch checkpoint."""


class Bag(nn.Module):
    """The smallest model the loop accepts: (input_ids, attention_mask) -> (B, C) logits."""

    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.EmbeddingBag(50, 8), nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        return self.out(self.emb(input_ids * attention_mask))


class KilledAfter(Checkpointer):
    def __init__(self, folder: Path, at: tuple[int, int]):
        super().__init__(folder, KEY, every=3)
        self.at = at  # (epoch, step)

    def after_step(self, accelerator, epoch, step, loss_sum):
        super().after_step(accelerator, epoch, step, loss_sum)
        if (epoch, step) == self.at:
            raise Killed


def test_a_resumed_epochs_progress_bar_counts_each_step_once(tmp_path, monkeypatch):
    """The bar of an epoch resumed at step 3 of 10 starts at 3 and ends at 10/10: it counted
    the skipped batches again (3 + 10 = 13 of 10), its rate and ETA with them."""
    from tqdm.auto import tqdm

    from textclf.config import TrainParams
    from textclf.model.batching import Split

    bars = []  # (desc, initial, n, total, the bar's last text) of every bar, at its close

    class Recorded(tqdm):
        def close(self):
            if not self.disable and not getattr(self, "recorded", False):
                self.recorded = True
                bars.append((self.desc, self.initial, self.n, self.total, str(self)))
            super().close()

    monkeypatch.setattr(loop, "tqdm", Recorded)
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(50)]
    labels = rng.integers(0, 3, size=50).tolist()
    train, val = Split(ids[:40], labels[:40]), Split(ids[40:], labels[40:])  # 10 steps an epoch
    cfg = TrainParams(epochs=2, batch_size=4, warmup_ratio=0.0)

    def run(ckpt: Checkpointer) -> None:
        torch.manual_seed(0)
        model = Bag()
        loop.fit(loop.TrainJob(model, torch.optim.SGD(model.parameters(), lr=0.1), train, val, cfg, 0,
                               loop.make_accelerator(), checkpointer=ckpt))

    with pytest.raises(Killed):
        run(KilledAfter(tmp_path / "ckpt", at=(1, 3)))
    bars.clear()
    resumed = Checkpointer(tmp_path / "ckpt", KEY, every=3)
    assert resumed.find().step == 3
    run(resumed)
    assert [b[:4] for b in bars] == [("epoch 1/2", 3, 10, 10), ("epoch 2/2", 0, 10, 10)]
    assert " 10/10 " in bars[0][4] and "100%" in bars[0][4]
