"""Texts -> token ids as the model was trained: head / tail / head+tail truncation around the
special tokens, or every token in overlapping windows (chunks), and a model's tokenizer.json
run without transformers. No torch or transformers here: the ONNX predictor and the served
ONNX model import it."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from textclf.errors import UserError

TRUNCATIONS = ("head", "tail", "head+tail")
CHUNKS = "chunks"  # tokenize.truncation: every token read, in windows overlapping by tokenize.stride
# Sun et al. 2019 ("How to Fine-Tune BERT for Text Classification?") keep the first
# 128 and last 382 of 510 tokens: about a quarter from the head.
HEAD_SHARE = 0.25


class RustTokenizer:
    """A model's tokenizer.json run by the `tokenizers` library alone, called like a
    transformers tokenizer for what tokenize_texts needs. transformers' fast tokenizers wrap
    the same object, so the ids are the same (tested), but importing transformers pulls in
    torch: about 5 s of the tokenize stage's start-up against 0.1 s (benchmarks/speed/startup.py)."""

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


def _budget(max_length: int, specials: int) -> int:
    """The ids of a text that fit in max_length beside its special tokens."""
    budget = max_length - specials
    if budget < 2:
        raise UserError(f"tokenize.max_length={max_length} leaves {budget} tokens after the "
                         f"{specials} special tokens; use at least 16.")
    return budget


def tokenize_texts(tokenizer, texts: list[str], max_length: int, mode: str):
    """-> (ids per text with special tokens, untruncated length per text)."""
    prefix, suffix = special_frame(tokenizer)
    budget = _budget(max_length, len(prefix) + len(suffix))
    bodies = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    ids = [prefix + truncate(b, budget, mode) + suffix for b in bodies]
    lengths = [len(b) + len(prefix) + len(suffix) for b in bodies]
    return ids, lengths


def windows(body: list[int], budget: int, stride: int) -> list[list[int]]:
    """Windows of at most `budget` ids covering all of `body`: window k starts at
    k * (budget - stride), so consecutive windows share exactly `stride` ids and the last one
    ends at the body's end (it may be shorter). A body that fits is one window, itself."""
    if not 0 <= stride < budget:
        raise UserError(f"tokenize.stride={stride} must be at least 0 and below the {budget} tokens "
                        "a window holds (tokenize.max_length minus the special tokens): lower "
                        f"tokenize.stride (e.g. {budget // 4}) or raise tokenize.max_length.")
    if len(body) <= budget:
        return [body]
    step = budget - stride
    starts = range(0, len(body) - stride, step)  # the last start leaves fewer than `step` new ids
    return [body[s:s + budget] for s in starts]


@dataclass(frozen=True)
class Encoded:
    """Texts as the model reads them: rows of ids (special tokens included), one per text, or
    with chunks one per window, a text's windows in order and together."""
    ids: list[list[int]]
    lengths: list[int]  # per text: its untruncated length, special tokens included
    counts: list[int] | None = None  # per text: its rows in `ids` (chunks); None: one each

    @property
    def owner(self) -> np.ndarray | None:
        """Per row of ids, the index of its text; None where row i is text i."""
        return None if self.counts is None else np.repeat(np.arange(len(self.counts)), self.counts)


def encode_texts(tokenizer, texts: list[str], max_length: int, mode: str, stride: int = 0) -> Encoded:
    """tokenize_texts for every tokenize.truncation: with chunks, each text becomes
    `windows` of its body, each framed by the special tokens ([CLS] … [SEP]); a text that
    fits is one window, the ids head+tail gives."""
    if mode != CHUNKS:
        ids, lengths = tokenize_texts(tokenizer, texts, max_length, mode)
        return Encoded(ids, lengths)
    prefix, suffix = special_frame(tokenizer)
    budget = _budget(max_length, len(prefix) + len(suffix))
    bodies = tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]
    per_text = [[prefix + w + suffix for w in windows(b, budget, stride)] for b in bodies]
    return Encoded([w for ws in per_text for w in ws], [len(b) + len(prefix) + len(suffix) for b in bodies],
                   [len(ws) for ws in per_text])
