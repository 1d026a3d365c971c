"""Texts -> token ids as the model was trained: head / tail / head+tail truncation around the
special tokens, and a model's tokenizer.json run without transformers. No torch or
transformers here: the ONNX predictor and the served ONNX model import it."""
from __future__ import annotations

from pathlib import Path

from textclf.common import UserError

TRUNCATIONS = ("head", "tail", "head+tail")
# Sun et al. 2019 ("How to Fine-Tune BERT for Text Classification?") keep the first
# 128 and last 382 of 510 tokens: about a quarter from the head.
HEAD_SHARE = 0.25


class RustTokenizer:
    """A model's tokenizer.json run by the `tokenizers` library alone, called like a
    transformers tokenizer for what tokenize_texts needs. transformers' fast tokenizers wrap
    the same object, so the ids are the same (tested), but importing transformers pulls in
    torch: about 5 s of the tokenize stage's start-up against 0.1 s (benchmarks/startup.py)."""

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        # tokenizer.json may carry a truncation and padding (MiniLM's: 128 tokens, padded);
        # transformers turns them off unless asked, and so does this
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def __call__(self, texts: str | list[str], add_special_tokens: bool = True, verbose: bool = False):
        single = isinstance(texts, str)
        encoded = self.tokenizer.encode_batch([texts] if single else list(texts),
                                              add_special_tokens=add_special_tokens)
        ids = [e.ids for e in encoded]
        return {"input_ids": ids[0] if single else ids}


def truncate(body: list[int], budget: int, mode: str) -> list[int]:
    """Keep at most `budget` ids of `body` (special tokens not included)."""
    if mode not in TRUNCATIONS:
        raise UserError(f"tokenize.truncation={mode!r} is not one of {TRUNCATIONS}.")
    if len(body) <= budget:
        return body
    if mode == "head":
        return body[:budget]
    if mode == "tail":
        return body[len(body) - budget:]
    head = int(budget * HEAD_SHARE)
    return body[:head] + body[len(body) - (budget - head):]


def special_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The ids a tokenizer puts before and after a single sequence ([CLS] … [SEP] for BERT)."""
    empty = tokenizer("")["input_ids"]
    probe_body = tokenizer("a", add_special_tokens=False)["input_ids"]
    probe = tokenizer("a")["input_ids"]
    start = probe.index(probe_body[0])
    return empty[:start], empty[start:]


def tokenize_texts(tokenizer, texts: list[str], max_length: int, mode: str):
    """-> (ids per text with special tokens, untruncated length per text)."""
    prefix, suffix = special_frame(tokenizer)
    budget = max_length - len(prefix) - len(suffix)
    if budget < 2:
        raise UserError(f"tokenize.max_length={max_length} leaves {budget} tokens after the "
                         f"{len(prefix) + len(suffix)} special tokens; use at least 16.")
    bodies = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    ids = [prefix + truncate(b, budget, mode) + suffix for b in bodies]
    lengths = [len(b) + len(prefix) + len(suffix) for b in bodies]
    return ids, lengths
