"""Batching, schedules, device selection and the step loop (fast)."""
import inspect
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from textclf.train import loop as training
from textclf.model.batching import (PAD_LABEL, Collator, LengthGroupedBatchSampler, Padding, RankShard, Split,
                              TokenDataset)
from textclf.inference.frames import sorted_batches
from textclf.config import EvaluateParams, TrainParams
from textclf.inference.pooling import pool_logits
from textclf.inference.proba import inference_device, mixed_precision_here, precision_for, predict_proba
from textclf.train.loop import (Callbacks, Span, TrainJob, fit, lr_factor, make_accelerator, make_scheduler,
                              make_train_loader, summed_loss, train_steps)
from textclf.train.pace import TIMED_STEPS, Pace
from textclf.train.selection import EpochSelector, validation_loss


def test_length_grouped_batches_cover_every_index_once_and_are_seeded():
    lengths = np.random.default_rng(0).integers(5, 500, size=1000).tolist()
    sampler = LengthGroupedBatchSampler(lengths, batch_size=16, seed=3)
    sampler.set_epoch(1)
    first = list(sampler)
    assert sorted(i for b in first for i in b) == list(range(1000)) and len(first) == len(sampler)
    assert first == list(sampler)  # same seed and epoch: same batches
    sampler.set_epoch(2)
    assert first != list(sampler)  # a new epoch reshuffles


@pytest.mark.parametrize("n, batch, world", [(21, 4, 2), (22, 6, 3), (9, 4, 4), (40, 8, 2)])
def test_rank_shards_cover_every_global_batch_once(n, batch, world):
    """Every process takes a share of every global batch, in the same step: the shares put
    together are the global batch, so every document trains once per epoch, as on 1 process."""
    whole = LengthGroupedBatchSampler(list(range(n)), batch, seed=1)
    shards = [RankShard(LengthGroupedBatchSampler(list(range(n)), batch, seed=1), r, world) for r in range(world)]
    for epoch in (1, 2):
        whole.set_epoch(epoch)
        for shard in shards:
            shard.set_epoch(epoch)
        steps = list(zip(*(list(s) for s in shards)))
        assert len(steps) == len(whole) == len(shards[0])
        for global_batch, parts in zip(whole, steps):
            real = [i for part in parts for i in part if not isinstance(i, Padding)]
            assert real == global_batch and all(parts)  # every process has something to run
    # a short batch (of 1) smaller than the processes (4): the 3 empty shares are padding of weight 0
    shares = [list(RankShard(LengthGroupedBatchSampler([5] * 9, 4, 0), r, 4)) for r in range(4)]
    assert sum(isinstance(i, Padding) for rank in shares for part in rank for i in part) == 3
    assert TokenDataset([[1], [2]], [0, 1])[Padding(1)] == ([2], PAD_LABEL)


def padding_fraction(batches, lengths):
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths) / padded


def test_grouping_by_length_cuts_padding():
    lengths = np.random.default_rng(0).integers(5, 500, size=1000).tolist()
    grouped = list(LengthGroupedBatchSampler(lengths, 16, seed=0))
    order = np.random.default_rng(0).permutation(1000)
    random_batches = [order[i:i + 16].tolist() for i in range(0, 1000, 16)]
    assert padding_fraction(grouped, lengths) < 0.1 < padding_fraction(random_batches, lengths)
    assert padding_fraction(sorted_batches(lengths, 16), lengths) < 0.05


def test_collator_pads_to_the_longest_in_the_batch():
    batch = Collator(pad_id=0)([([101, 7, 102], 1), ([101, 102], 0)])
    assert batch["input_ids"].tolist() == [[101, 7, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0]


def test_linear_warmup_then_decay_and_constant():
    linear, constant = lr_factor(100, 0.1, "linear"), lr_factor(100, 0.1, "constant")
    assert linear(0) == 0.1 and linear(9) == 1.0 and linear(55) == 0.5 and linear(100) == 0.0
    assert constant(9) == 1.0 and constant(99) == 1.0
    assert lr_factor(10, 0.0, "constant")(0) == 1.0  # no warmup


def test_device_selection_on_this_machine():
    accelerator = make_accelerator()
    if torch.cuda.is_available():
        expected = "bf16" if torch.cuda.is_bf16_supported() else "no"
        assert accelerator.device.type == "cuda" and accelerator.mixed_precision == expected
    else:
        assert accelerator.device.type in ("cpu", "mps") and accelerator.mixed_precision == "no"


def test_precision_auto_picks_bf16_only_on_cuda_with_bf16():
    assert precision_for("auto", cuda_available=True, bf16_supported=True) == "bf16"
    assert precision_for("auto", cuda_available=True, bf16_supported=False) == "no"
    assert precision_for("auto", cuda_available=False, bf16_supported=True) == "no"
    assert precision_for("auto", cuda_available=False, bf16_supported=False) == "no"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for CPUs; this machine trains on CUDA")
@pytest.mark.parametrize("native", [False, True])
def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(monkeypatch, caplog, native):
    """An AVX2-only CPU runs bf16 autocast 20x slower than float32: a user who asked bf16 to
    go faster is told. A CPU with AVX512-BF16 (or AMX) is not warned about; auto never is."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with caplog.at_level("WARNING", logger="textclf.inference.proba"):
        assert mixed_precision_here("bf16") == "bf16" and mixed_precision_here("auto") == "no"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ([] if native else [warned[0]]), warned
    assert native or "without native bf16 (no AVX512-BF16, no AMX)" in warned[0]


def test_precision_fp32_and_bf16_are_what_they_say_and_bad_ones_fail():
    for cuda, bf16 in ((True, True), (True, False), (False, False)):
        assert precision_for("fp32", cuda, bf16) == "no"
    assert precision_for("bf16", cuda_available=False, bf16_supported=False) == "bf16"  # CPU opt-in
    assert precision_for("bf16", cuda_available=True, bf16_supported=True) == "bf16"
    with pytest.raises(ValueError, match="no bf16: set train.precision"):
        precision_for("bf16", cuda_available=True, bf16_supported=False)
    with pytest.raises(ValueError, match="'fp16' must be one of auto, fp32, bf16"):
        precision_for("fp16", cuda_available=False, bf16_supported=False)
    with pytest.raises(ValueError, match=r"train.precision='half' must be one of \['auto', 'fp32', 'bf16'\]"):
        TrainParams(precision="half")
    with pytest.raises(ValueError, match="evaluate.precision"):
        EvaluateParams(precision="fp16")


def test_one_process_cannot_switch_training_precision_and_says_why():
    make_accelerator("fp32")  # this test process trains in fp32 (the CPU default)
    with pytest.raises(ValueError, match="already trained with another precision"):
        make_accelerator("bf16")
    assert make_accelerator("auto").mixed_precision == "no"


def test_inference_precision_is_free_of_the_training_one():
    """predict_proba needs no Accelerator: bf16 and fp32 inference in one process."""
    make_accelerator("fp32")
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    ids = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    device, mixed = inference_device("bf16")
    assert device.type == "cpu" and mixed == "bf16"
    bf16 = predict_proba(model, ids, 2, 0, device, mixed)  # (3, 3)
    fp32 = predict_proba(model, ids, 2, 0, *inference_device("auto"))
    assert bf16.shape == fp32.shape == (3, 3)
    assert np.allclose(bf16, fp32, atol=2e-2) and not np.array_equal(bf16, fp32)


CPU_BF16_RUN = """
import json, sys, torch
from textclf.model.batching import Split
from textclf.config import EvaluateParams, TrainParams
from textclf.train.loop import Span, TrainJob, make_accelerator, make_scheduler, make_train_loader, train_steps
ids = [[(7 * i + j) % 50 + 1 for j in range(3 + i % 9)] for i in range(32)]
train = Split(ids, [i % 3 for i in range(32)])
cfg = TrainParams(epochs=1, batch_size=4, warmup_ratio=0.0)
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = torch.nn.EmbeddingBag(51, 16), torch.nn.Linear(16, 3)
    def forward(self, ids, mask):
        return self.out(self.emb(ids * mask))  # (B, C)
torch.manual_seed(0)
net = Model()
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-2)
accelerator = make_accelerator(sys.argv[1])
loader = make_train_loader(train, cfg, pad_id=0)
scheduler = make_scheduler(optimizer, 8, cfg)
net, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
job = TrainJob(net, optimizer, train, train, cfg, 0, accelerator)  # train_steps never validates
loss, steps = train_steps(job, scheduler, loader, Span(max_steps=8))
print(json.dumps({"loss": loss.item() / steps, "mixed": accelerator.mixed_precision}))
"""


def cpu_run(precision: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CPU_BF16_RUN, precision], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_cpu_bf16_is_opt_in_seeded_and_changes_the_numbers():
    """Each in its own process: Accelerate keeps one precision per process."""
    bf16, again, fp32 = cpu_run("bf16"), cpu_run("bf16"), cpu_run("auto")
    assert bf16["mixed"] == "bf16" and fp32["mixed"] == "no"
    assert bf16["loss"] == again["loss"]  # same params => same numbers, also in bf16
    assert bf16["loss"] != fp32["loss"]  # autocast really ran: the Linear computed in bf16


class RecordingAccelerator:
    """Stands in for accelerate.Accelerator: constructing a real one would claim the GPU."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


def test_make_accelerator_asks_for_bf16_on_a_bf16_gpu(monkeypatch):
    monkeypatch.setattr(training, "Accelerator", RecordingAccelerator)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    kwargs = make_accelerator().kwargs
    assert kwargs["mixed_precision"] == "bf16"
    assert kwargs["dataloader_config"].non_blocking  # pinned batches, copied without a host wait
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert make_accelerator().kwargs["mixed_precision"] == "no"


def test_make_accelerator_on_cpu_never_asks_cuda_about_bf16(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("is_bf16_supported called without CUDA")
    monkeypatch.setattr(training, "Accelerator", RecordingAccelerator)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", boom)
    kwargs = make_accelerator().kwargs
    assert kwargs["mixed_precision"] == "no"
    assert not kwargs["dataloader_config"].non_blocking


def test_train_loader_pins_batches_only_on_cuda(monkeypatch):
    train, cfg = Split([[1, 2, 3], [4, 5]], [0, 1]), TrainParams(batch_size=2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not make_train_loader(train, cfg, pad_id=0).pin_memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert make_train_loader(train, cfg, pad_id=0).pin_memory  # constructed only, never iterated


class BagOfEmbeddings(nn.Module):
    """The smallest model the loop accepts: (input_ids, attention_mask) -> logits."""

    def __init__(self, vocab: int = 50, classes: int = 3):
        super().__init__()
        self.emb = nn.Embedding(vocab, 8)
        self.out = nn.Linear(8, classes)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()  # (B, T, 1)
        pooled = (self.emb(input_ids) * mask).sum(1) / mask.sum(1)  # (B, 8)
        return self.out(pooled)  # (B, C)


def test_train_steps_stops_after_max_steps_and_fit_pieces_compose():
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(40)]
    train = Split(ids, rng.integers(0, 3, size=40).tolist())
    cfg = TrainParams(epochs=1, batch_size=4, lr_encoder=1e-2, lr_head=1e-2, warmup_ratio=0.0)
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = make_train_loader(train, cfg, pad_id=0)
    assert len(loader) == 10
    scheduler = make_scheduler(optimizer, 3, cfg)
    accelerator = make_accelerator()
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    job = TrainJob(model, optimizer, train, train, cfg, 0, accelerator)  # train_steps never validates
    loss_sum, steps = train_steps(job, scheduler, loader, Span(max_steps=3))
    assert steps == 3 and scheduler.get_last_lr()[0] == 0.0  # linear decay ends at step 3
    assert 0 < loss_sum.item() / steps < 5
    _, steps = train_steps(job, scheduler, loader)
    assert steps == len(loader)  # no max_steps: one full pass


def test_fit_and_train_steps_take_one_job_not_its_parts():
    """fit took 13 parameters and train_steps 12, the same values threaded through both: a
    TrainJob is what a training is, and fit needs nothing else (on_epoch included)."""
    assert list(inspect.signature(fit).parameters) == ["job"]
    assert list(inspect.signature(train_steps).parameters) == ["job", "scheduler", "loader", "span"]
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(12)]
    train = Split(ids, rng.integers(0, 3, size=12).tolist())
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    kept = fit(TrainJob(model, torch.optim.SGD(model.parameters(), lr=0.1), train, train,
                        TrainParams(epochs=1, batch_size=4), 0, make_accelerator()))
    assert kept is model  # no callbacks, no checkpointer: the defaults train and keep the last epoch


def test_pace_estimates_the_run_from_the_timed_steps_tokens():
    """The first step is not timed; the next TIMED_STEPS give seconds per padded token, which
    prices the run's tokens, and validation's at a third of that (forward only)."""
    ticks = iter([10.0, 16.0])  # the timer starts after the warm-up step, stops 6 steps later
    pace = Pace(steps=100, done=0, tokens=10_000, documents=400, steps_per_epoch=50, validations=2,
                validation_tokens=3_000, clock=lambda: next(ticks))
    synced = []
    got = [pace.tick(100, lambda: synced.append(1)) for _ in range(1 + TIMED_STEPS)]
    assert got[:-1] == [None] * TIMED_STEPS and len(synced) == 2  # the device waited for twice only
    assert got[-1] == pytest.approx({"train_steps_per_s": 1.0, "train_documents_per_s": 8.0,
                                     "estimated_train_seconds": 100 + 20, "estimated_validation_seconds": 20})
    assert pace.tick(100, lambda: None) is None and pace.finish(lambda: None) is None  # said once
    assert "about 2 min 00 s" in pace.estimate_line()


@pytest.mark.parametrize("max_steps", [0, 3])
def test_fit_says_the_estimate_before_the_first_validation(max_steps, caplog):
    """fit plans the steps left, then hands the estimate to on_estimate before the first epoch
    ends; a training shorter than the timed steps gets it from those it took."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(60)]
    labels = rng.integers(0, 3, size=60).tolist()
    train, val = Split(ids[:40], labels[:40]), Split(ids[40:], labels[40:])  # 10 steps an epoch
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    events = []
    callbacks = Callbacks(on_epoch=lambda row, probs: events.append(("epoch", row["epoch"])),
                          on_estimate=lambda estimate, step: events.append(("estimate", estimate, step)))
    with caplog.at_level("INFO", logger="textclf.train.loop"):
        fit(TrainJob(model, torch.optim.SGD(model.parameters(), lr=0.1), train, val,
                     TrainParams(epochs=2, batch_size=4, max_steps=max_steps), 0, make_accelerator(), callbacks))
    assert events[0][0] == "estimate" and events[1] == ("epoch", 1)
    assert events[0][1]["estimated_train_seconds"] > 0 and events[0][2] == 0
    assert [e for e in events if e[0] == "estimate"] == [events[0]]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"training: {max_steps or 20} optimizer steps left" in said and "pace: " in said


def row(epoch: int, f1: float, loss: float) -> dict:
    return {"epoch": epoch, "val_macro_f1": f1, "val_loss": loss}


def test_epoch_selector_keeps_the_best_epoch_and_stops_on_patience():
    model = nn.Linear(2, 2)
    selector = EpochSelector("best", patience=2)
    weights = {}
    # epoch 3 ties epoch 2 on macro-F1 at a higher loss: epoch 2 stays the best
    for epoch, (f1, loss) in enumerate([(0.5, 1.0), (0.8, 0.6), (0.8, 0.7), (0.6, 0.9)], 1):
        with torch.no_grad():
            model.weight.fill_(epoch)
        weights[epoch] = model.weight.clone()
        selector.update(row(epoch, f1, loss), model)
        assert selector.should_stop() == (epoch == 4)  # 2 epochs past the best
    assert selector.restore(model) == 2 and torch.equal(model.weight, weights[2])
    resumed = EpochSelector("best", 2)
    resumed.load_state_dict(selector.state_dict())  # as from a checkpoint
    assert resumed.should_stop() and resumed.kept_epoch == 2
    last = EpochSelector("last")
    for epoch, f1 in enumerate([0.9, 0.1], 1):
        with torch.no_grad():
            model.weight.fill_(epoch)
        last.update(row(epoch, f1, 1.0), model)
    assert last.restore(model) == 2 and last.weights is None and model.weight.eq(2).all()


@pytest.mark.parametrize("metric, kept", [("macro_f1", 4), ("loss", 5)])
def test_a_tie_on_macro_f1_goes_to_the_lower_validation_loss(metric, kept):
    """The demo corpus: macro-F1 reaches 1.0 at epoch 2 and stays there while the loss keeps
    falling; the epoch kept is the surest one, not the first to reach 1.0."""
    selector = EpochSelector("best", metric=metric)
    for epoch, (f1, loss) in enumerate([(0.6, 1.5), (1.0, 1.2), (1.0, 0.8), (1.0, 0.5), (0.9, 0.4)], 1):
        selector.update(row(epoch, f1, loss), nn.Linear(1, 1))
    assert selector.kept_epoch == kept


def test_validation_loss_is_the_mean_cross_entropy():
    probs = np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]])
    assert validation_loss(probs, [0, 0, 1]) == pytest.approx(-(np.log(0.5) + np.log(0.9) + np.log(0.8)) / 3)


@pytest.mark.parametrize("select, patience", [("best", 0), ("best", 1), ("last", 0)])
def test_fit_returns_the_selected_epochs_weights(select, patience):
    """fit with a noisy lr: the returned weights are those of the best validation epoch
    (select: best) or the last one, and patience stops after that many epochs without gain."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(60)]
    labels = rng.integers(0, 3, size=60).tolist()
    train, val = Split(ids[:40], labels[:40]), Split(ids[40:], labels[40:])
    cfg = TrainParams(epochs=6, batch_size=4, lr_encoder=0.3, lr_head=0.3, warmup_ratio=0.0,
                      select=select, patience=patience)
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    seen = []  # ((val macro-F1, -val loss), weights) after each epoch

    def on_epoch(row, probs):
        seen.append(((row["val_macro_f1"], -row["val_loss"]), {k: v.clone() for k, v in model.state_dict().items()}))

    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    kept = fit(TrainJob(model, optimizer, train, val, cfg, 0, make_accelerator(), Callbacks(on_epoch=on_epoch),
                        selector=(selector := EpochSelector(select, patience))))
    scores = [s for s, _ in seen]
    best = scores.index(max(scores)) + 1
    expected = best if select == "best" else len(seen)
    assert selector.kept_epoch == expected
    for name, value in kept.state_dict().items():
        assert torch.equal(value, seen[expected - 1][1][name])
    if patience:
        stop = next((e for e in range(1, 7) if e - (scores[:e].index(max(scores[:e])) + 1) >= patience), 6)
        assert len(seen) == stop
    else:
        assert len(seen) == 6


@pytest.mark.parametrize("max_steps, epochs_run, last_steps", [(3, 1, 3), (10, 1, 10), (23, 3, 3), (0, 6, 10)])
def test_max_steps_ends_training_mid_epoch_and_the_schedule_with_it(max_steps, epochs_run, last_steps):
    """train.max_steps counts optimizer steps over all epochs: training stops after that
    many (validating the partial epoch), and the linear schedule reaches 0 exactly there."""
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in range(60)]
    labels = rng.integers(0, 3, size=60).tolist()
    train, val = Split(ids[:40], labels[:40]), Split(ids[40:], labels[40:])  # 10 steps an epoch
    cfg = TrainParams(epochs=6, batch_size=4, warmup_ratio=0.0, max_steps=max_steps)
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    rows = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    original = training.train_steps

    def counting(*args, **kwargs):
        loss, steps = original(*args, **kwargs)
        calls.append(steps)
        return loss, steps
    training.train_steps, saved = counting, training.train_steps
    try:
        fit(TrainJob(model, optimizer, train, val, cfg, 0, make_accelerator(),
                     Callbacks(on_epoch=lambda row, probs: rows.append(row))))
    finally:
        training.train_steps = saved
    assert len(rows) == epochs_run and calls[-1] == last_steps
    assert sum(calls) == (max_steps or 60)
    assert optimizer.param_groups[0]["lr"] == 0.0  # the schedule ended with the last step


def chunked(rng, windows_per_doc: list[int], classes: int = 3) -> Split:
    """A Split read in windows: document d has windows_per_doc[d] rows of random ids."""
    owner = np.repeat(np.arange(len(windows_per_doc)), windows_per_doc)
    ids = [rng.integers(1, 50, size=rng.integers(3, 12)).tolist() for _ in owner]
    return Split(ids, rng.integers(0, classes, size=len(windows_per_doc)).tolist(), owner=owner)


def test_window_weights_make_every_document_weigh_the_same_in_the_loss():
    """Each window's loss is weighted 1/(its document's windows), scaled by windows/documents
    (mean weight 1): a document of 3 windows weighs what a document of 1 does. One step at
    lr 0 reads the loss: the weighted sum over the batch's windows, over their count. Two
    processes (each its share, scaled as train_steps scales it) add up to one process's loss."""
    train = chunked(np.random.default_rng(0), [3, 1, 2])
    weights = train.row_weights()
    assert weights.tolist() == pytest.approx([2 / 3] * 3 + [2, 1, 1]) and weights.mean() == pytest.approx(1)
    assert np.bincount(train.owner, weights).tolist() == pytest.approx([2, 2, 2])  # per document
    assert train.row_labels() == [train.labels[d] for d in train.owner]
    assert Split([[1], [2]], [0, 1]).row_weights() is None  # without chunks: no weights at all
    cfg = TrainParams(epochs=1, batch_size=6, warmup_ratio=0.0)
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    (batch,) = list(make_train_loader(train, cfg, pad_id=0))
    assert sorted(batch["weights"].tolist()) == pytest.approx(sorted(weights.tolist()))  # every window, weighted
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"])
    each = nn.functional.cross_entropy(logits, batch["labels"], reduction="none")
    expected = float((each * batch["weights"]).sum() / 6)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    accelerator = make_accelerator()
    job = TrainJob(model, optimizer, train, train, cfg, 0, accelerator)  # train_steps never validates
    loss, steps = train_steps(job, make_scheduler(optimizer, 1, cfg), make_train_loader(train, cfg, pad_id=0))
    assert steps == 1 and loss.item() == pytest.approx(expected, rel=1e-6)
    unweighted = float(each.mean())
    assert expected != pytest.approx(unweighted)  # the weights change the loss
    loss_fn = nn.CrossEntropyLoss(reduction="sum", ignore_index=PAD_LABEL)
    halves = [{k: v[sl] for k, v in batch.items()} for sl in (slice(0, 2), slice(2, 6))]
    ranks = [summed_loss(loss_fn, logits[sl], half) * 2 / 6  # x processes / global_count
             for sl, half in zip((slice(0, 2), slice(2, 6)), halves)]
    assert float(sum(ranks) / 2) == pytest.approx(expected, rel=1e-6)  # the average over 2 processes


class FixedLogits(nn.Module):
    """Logits looked up by a row's first id: a constructed case for pooling."""

    def __init__(self, table: dict[int, list[float]]):
        super().__init__()
        self.table = torch.zeros(max(table) + 1, 2)
        for i, row in table.items():
            self.table[i] = torch.tensor(row)

    def forward(self, input_ids, attention_mask):
        return self.table[input_ids[:, 0]]  # (B, C)


@pytest.mark.parametrize("pooling, doc0", [("mean", [1.0, 2.0]), ("max", [2.0, 4.0])])
def test_a_document_scores_by_its_windows_logits_pooled_then_softmax(pooling, doc0):
    """Document 0 has windows with logits [2, 0] and [0, 4]: mean pools them to [1, 2], max to
    [2, 4], then the softmax; document 1 (one window, [1, 3]) scores as without chunks. Every
    window is read: changing the last window of document 0 changes its score."""
    model = FixedLogits({1: [2.0, 0.0], 2: [0.0, 4.0], 3: [1.0, 3.0], 4: [0.0, -4.0]})
    device = torch.device("cpu")
    ids, owner = [[1, 9, 9], [2, 9], [3]], np.array([0, 0, 1])
    probs = predict_proba(model, ids, 2, 0, device, owner=owner, pooling=pooling)  # (2, C)
    assert probs.shape == (2, 2)
    assert probs[0] == pytest.approx(torch.softmax(torch.tensor(doc0), -1).numpy())
    assert np.array_equal(probs[1], predict_proba(model, [[3]], 2, 0, device)[0])
    changed = predict_proba(model, [[1, 9, 9], [4, 9], [3]], 2, 0, device, owner=owner, pooling=pooling)
    assert not np.allclose(changed[0], probs[0])
    logits = np.array([[2.0, 0.0], [0.0, 4.0], [1.0, 3.0]], dtype=np.float32)
    assert pool_logits(logits, owner, pooling).tolist() == [doc0, [1.0, 3.0]]
    with pytest.raises(ValueError, match="model.chunk_pooling='sum' must be one of"):
        pool_logits(logits, owner, "sum")


def test_fit_on_windows_validates_documents():
    """fit on chunked splits: every window trains (more steps than documents), validation
    gives one row of probabilities per document, pooled by chunk_pooling."""
    rng = np.random.default_rng(1)
    train, val = chunked(rng, [1, 3, 2, 1] * 5), chunked(rng, [2, 1, 3, 1, 1])
    cfg = TrainParams(epochs=2, batch_size=4, warmup_ratio=0.0)
    torch.manual_seed(0)
    model = BagOfEmbeddings()
    seen = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(TrainJob(model, optimizer, train, val, cfg, 0, make_accelerator(),
                 Callbacks(on_epoch=lambda row, probs: seen.append(probs)), chunk_pooling="max"))
    assert len(make_train_loader(train, cfg, pad_id=0)) == 35 // 4 + 1  # 35 windows of 20 documents
    assert [p.shape for p in seen] == [(5, 3), (5, 3)]
    expected = predict_proba(model, val.input_ids, 8, 0, torch.device("cpu"), owner=val.owner, pooling="max")
    assert np.allclose(seen[-1], expected, atol=1e-6)
