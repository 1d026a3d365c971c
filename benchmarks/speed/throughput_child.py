"""One measurement of benchmarks/speed/throughput.py, run in its own process so that thread
pools, allocator caches and peak RSS never carry over from one contender to the next.

    python benchmarks/speed/throughput_child.py '<json spec>'   # last stdout line: RESULT {json}

Timed spans start once model and data are in memory (imports, loading and the contender's
own preprocessing happen before), so every contender is charged for the same kind of work.
Truncation is `head` everywhere: what Trainer's tokenization and the pipeline do.
"""
from __future__ import annotations

import json
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import answer  # noqa: E402  (first: this checkout's textclf)
from throughput_helpers import chunks, padding_of, pick_documents, token_budget_batches, train_flops  # noqa: E402
from textclf.inference.frames import sorted_batches  # noqa: E402
from textclf.model.batching import Collator, LengthGroupedBatchSampler, Split, TokenDataset  # noqa: E402
from textclf.config import IngestParams, ModelParams, TrainParams  # noqa: E402
from textclf.data.corpus import build_corpus  # noqa: E402
from textclf.model.heads import SequenceClassifier  # noqa: E402
from textclf.inference.proba import inference_device, predict_proba  # noqa: E402
from textclf.model.modeling import build_model, load_tokenizer  # noqa: E402
from textclf.model.policy import make_optimizer, param_groups  # noqa: E402
from textclf.data.tokenizing import tokenize_texts  # noqa: E402
from textclf.train.loop import (Span, TrainJob, make_accelerator, make_scheduler, make_train_loader,  # noqa: E402
                                train_steps)


def load_docs(spec: dict) -> tuple[list[str], list[int], list[str]]:
    """The BBC corpus through the pipeline's own ingest code -> a seeded subset."""
    ingest = IngestParams()
    frame, _ = build_corpus(Path(spec["bbc"]), ingest.max_bytes, ingest.min_per_class)
    names = sorted(frame["label"].unique())
    keep = pick_documents(len(frame), spec.get("docs"), spec["seed"])
    part = frame.iloc[keep]
    return part["text"].tolist(), [names.index(label) for label in part["label"]], names


def peak_mib() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def bench_params(spec: dict) -> TrainParams:
    """One lr for encoder and head, as Trainer has one; weight decay, warmup and clipping are
    the pipeline's defaults, and train_trainer passes the same values to Trainer."""
    return TrainParams(epochs=1, batch_size=spec["batch_size"], lr_encoder=spec["lr"], lr_head=spec["lr"],
                       weight_decay=0.01, warmup_ratio=0.1, max_grad_norm=1.0, seed=spec["seed"])


def ours_loader(spec: dict, train: Split, cfg: TrainParams, pad_id: int) -> DataLoader:
    """The pipeline's loader, or a lever's variant built from the same package parts."""
    lever = spec.get("lever")
    lengths = [len(s) for s in train.input_ids]
    if lever == "token-budget":  # as many rows as fit batch_size x max_length padded tokens
        batches = token_budget_batches(lengths, cfg.batch_size * spec["max_length"], cfg.seed)
    elif lever == "workers":
        batches = LengthGroupedBatchSampler(lengths, cfg.batch_size, cfg.seed)
    else:
        return make_train_loader(train, cfg, pad_id)
    return DataLoader(TokenDataset(train.input_ids, train.labels), batch_sampler=batches,
                      collate_fn=Collator(pad_id), num_workers=2 if lever == "workers" else 0)


def ours_accelerator(spec: dict) -> Accelerator:
    """The pipeline's choice (make_accelerator), or bf16 autocast on the CPU as a lever."""
    return make_accelerator("bf16" if spec.get("lever") == "bf16" else "auto")


def train_ours(spec: dict, model: torch.nn.Module, ids: list[list[int]], labels: list[int],
               pad_id: int) -> tuple[dict, list[int]]:
    """The pipeline's step loop (textclf.train.loop.train_steps) for spec['steps'] steps, after
    spec['warmup'] untimed ones (compilation, kernel choice) -> (result, timed doc lengths)."""
    lever, warmup = spec.get("lever"), spec.get("warmup", 0)
    cfg = bench_params(spec)
    if lever == "eager":
        model.hf.set_attn_implementation("eager")
    accelerator = ours_accelerator(spec)
    fused = torch.cuda.is_available() or lever == "fused-adamw"
    optimizer = make_optimizer(param_groups(model, cfg), cfg, fused=fused)
    loader = ours_loader(spec, Split(ids, labels), cfg, pad_id)
    if hasattr(loader.batch_sampler, "set_epoch"):
        loader.batch_sampler.set_epoch(1)  # fixed epoch: the batches listed are the ones trained on
    batches = list(loader.batch_sampler)
    steps = len(batches) if lever == "token-budget" else min(spec["steps"], len(batches))
    batches = batches[:steps]  # every pass over the loader starts with these
    start = time.perf_counter()
    scheduler = make_scheduler(optimizer, warmup + steps, cfg)
    if lever == "compile":
        model = torch.compile(model, dynamic=True)  # one graph for every padded width
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    split = Split(ids, labels)
    job = TrainJob(model, optimizer, split, split, cfg, pad_id, accelerator)  # train_steps never validates
    if warmup:
        train_steps(job, scheduler, loader, Span(max_steps=warmup))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        warmup_s, start = time.perf_counter() - start, time.perf_counter()
    loss_sum, taken = train_steps(job, scheduler, loader, Span(max_steps=steps))
    loss = loss_sum.item() / taken  # the host sync that ends the timed span
    elapsed = time.perf_counter() - start
    timed = [len(ids[i]) for b in batches for i in b]
    return ({"seconds": elapsed, "samples": len(timed), "steps": taken, "loss": loss,
             "warmup_s": warmup_s if warmup else 0.0, **padding_of(batches, [len(s) for s in ids])}, timed)


class CountingCollator:
    """Wraps Trainer's collator to count real and padded tokens of the batches it builds."""

    def __init__(self, inner):
        self.inner, self.real, self.padded = inner, 0, 0

    def __call__(self, features):
        batch = self.inner(features)
        mask = batch["attention_mask"]  # (B, T)
        self.real += int(mask.sum())
        self.padded += mask.numel()
        return batch


def train_trainer(spec: dict, model: SequenceClassifier, texts: list[str], labels: list[int],
                  tokenizer, tuned: bool) -> dict:
    """transformers.Trainer as run_classification.py feeds it by default (padding to
    max_length, default_data_collator), or tuned (length-grouped, dynamic padding)."""
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, default_data_collator

    enc = tokenizer(texts, padding=False if tuned else "max_length", max_length=spec["max_length"],
                    truncation=True)
    dataset = [{**{k: enc[k][i] for k in enc}, "label": labels[i]} for i in range(len(texts))]
    collator = CountingCollator(DataCollatorWithPadding(tokenizer) if tuned else default_data_collator)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=spec["batch_size"], max_steps=spec["steps"],
            learning_rate=spec["lr"], weight_decay=0.01, warmup_steps=0.1, lr_scheduler_type="linear",
            max_grad_norm=1.0, seed=spec["seed"], report_to="none", save_strategy="no",
            eval_strategy="no", logging_strategy="no", disable_tqdm=True,
            train_sampling_strategy="group_by_length" if tuned else "random")
        trainer = Trainer(model=model.hf, args=args, train_dataset=dataset, data_collator=collator,
                          processing_class=tokenizer)
        start = time.perf_counter()
        output = trainer.train()
        elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "samples": spec["steps"] * spec["batch_size"], "steps": output.global_step,
            "loss": output.training_loss, "real_tokens": collator.real, "padded_tokens": collator.padded,
            "padding": 1 - collator.real / collator.padded}


def infer(spec: dict, model: SequenceClassifier, texts: list[str], tokenizer) -> dict:
    """Texts -> class probabilities: our evaluate path (tokenize_texts, then predict_proba
    over length-sorted batches) or transformers.pipeline on the same model."""
    device, mixed = inference_device("bf16" if spec.get("lever") == "bf16" else "auto")
    model.to(device).eval()
    ml, bs = spec["max_length"], spec["batch_size"]
    if spec["contender"].startswith("ours"):
        start = time.perf_counter()
        ids, _ = tokenize_texts(tokenizer, texts, ml, "head")
        probs = predict_proba(model, ids, bs, tokenizer.pad_token_id, device, mixed)  # (N, C)
        elapsed = time.perf_counter() - start
        batches = sorted_batches([len(s) for s in ids], bs)
    else:
        from transformers import pipeline
        pipe = pipeline("text-classification", model=model.hf, tokenizer=tokenizer, device=device)
        start = time.perf_counter()
        probs = pipe(texts, batch_size=bs, truncation=True, max_length=ml, top_k=None)
        elapsed = time.perf_counter() - start
        ids, _ = tokenize_texts(tokenizer, texts, ml, "head")  # for the padding count only
        batches = chunks(len(texts), bs)  # the pipeline batches in input order
    assert len(probs) == len(texts)
    return {"seconds": elapsed, "samples": len(texts), **padding_of(batches, [len(s) for s in ids])}


def tokenize_all(spec: dict, texts: list[str], tokenizer) -> dict:
    start = time.perf_counter()
    ids, _ = tokenize_texts(tokenizer, texts, spec["max_length"], "head")
    elapsed = time.perf_counter() - start
    real = sum(len(s) for s in ids)
    return {"seconds": elapsed, "samples": len(texts), "real_tokens": real, "padded_tokens": real,
            "padding": 0.0}


def gpu_bench(spec: dict, texts: list[str], labels: list[int], tokenizer) -> dict:
    """bert-base-sized random weights (BertConfig() defaults; benchmark only), bf16 autocast
    via make_accelerator, our step loop; model FLOPs over real tokens for the MFU."""
    from transformers import BertConfig, BertForSequenceClassification

    if not torch.cuda.is_available():
        raise SystemExit("--gpu-bench needs a CUDA device")
    config = BertConfig(num_labels=max(labels) + 1)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} ids; BertConfig() has {config.vocab_size}")
    model = SequenceClassifier(BertForSequenceClassification(config), config.hidden_dropout_prob)
    # Embedding rows are gathered, not multiplied: they are left out of the 6 x N term.
    matmul_params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
    ids, _ = tokenize_texts(tokenizer, texts, spec["max_length"], "head")
    result, timed = train_ours(spec, model, ids, labels, tokenizer.pad_token_id)
    flops = train_flops(matmul_params, timed, config.num_hidden_layers, config.hidden_size)
    return {**result, "flops": flops, "matmul_params": matmul_params}


def main(spec: dict) -> dict:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    texts, labels, names = load_docs(spec)
    tokenizer = load_tokenizer(spec["model"])
    task, model = spec["task"], None
    if task == "tokenize":
        result = tokenize_all(spec, texts, tokenizer)
    elif task == "gpu":
        set_seed(spec["seed"])
        result = gpu_bench(spec, texts, labels, tokenizer)
    else:
        set_seed(spec["seed"])  # before the head is initialised: same head for every contender
        model, _ = build_model(ModelParams(name=spec["model"]), names)
        if task == "infer":
            result = infer(spec, model, texts, tokenizer)
        elif spec["contender"].startswith("ours"):
            ids, _ = tokenize_texts(tokenizer, texts, spec["max_length"], "head")
            result = train_ours(spec, model, ids, labels, tokenizer.pad_token_id)[0]
        else:
            tuned = spec["contender"] == "trainer-tuned"
            result = train_trainer(spec, model, texts, labels, tokenizer, tuned)
    attn = model.encoder.config._attn_implementation if model is not None else ""
    return {**spec, **result, "attn": attn, "threads": torch.get_num_threads(), "peak_mib": peak_mib(),
            "samples_per_s": result["samples"] / result["seconds"],
            "tokens_per_s": result["real_tokens"] / result["seconds"]}


if __name__ == "__main__":
    answer(main(json.loads(sys.argv[1])))
