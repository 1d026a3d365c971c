"""An exported model (models/export) run by ONNX Runtime: class probabilities for new texts
without torch or transformers, tokenized by tokenizer.json as the model was trained (with
chunks, windowed and pooled as export.json says). The same interface, refusals, columns and
pooling as the PyTorch Predictor."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from textclf.errors import UserError, positive_int_env
from textclf.cpu import this_cpu, vnni_differs
from textclf.data.tokenizing import RustTokenizer, encode_texts
from textclf.inference.base import TextPredictor
from textclf.inference.frames import check_texts, sorted_batches
from textclf.inference.pooling import pool_logits
from textclf.model.calibration import Calibration, from_dict, no_calibration
from textclf.model.checksums import how_to_restore, verify_folder
from textclf.model.exported import EXPORT_FILE, TOKENIZER_FILE, read_export

THREADS_ENV = "TEXTCLF_ONNX_THREADS"  # intra-op threads; unset: ONNX Runtime's (the physical cores)
log = logging.getLogger(__name__)
TOKENS_PER_RUN = 1024  # padded tokens per session run (token_batches)


def session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    threads = positive_int_env(THREADS_ENV)
    if threads:
        options.intra_op_num_threads = threads
    verify_folder(path.parent, [path.name])
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # ONNX Runtime's own (InvalidProtobuf, Fail, …) derive from Exception
        if not type(err).__module__.startswith("onnxruntime"):
            raise
        # a damaged file in a folder without checksums (an older export): one line, not 30
        raise UserError(f"{path} is not an ONNX model ONNX Runtime can load ({type(err).__name__}): "
                        f"{how_to_restore(path.parent, exported=True)}.") from None


def torch_why(meta: dict) -> str:
    """Why an export folder holds no ONNX model: serve.format torch, or the export's check."""
    if meta.get("requested", "torch") == "torch":
        return "serve.format was torch"
    return f"serve.format {meta['requested']} did not pass the export's check: {meta['check']['fallback']}"


def token_batches(lengths: list[int], batch_size: int, budget: int) -> list[list[int]]:
    """Length-sorted batches (longest first) of at most batch_size rows and, past one row,
    at most `budget` padded tokens: ONNX Runtime's int8 kernels run faster on runs of ~1 000
    tokens than on 16 x 256 (77 against 56 docs/s on 2 cores, docs/benchmarks.md)."""
    out = []
    for batch in sorted_batches(lengths, batch_size):
        rows = max(1, budget // max(lengths[batch[0]], 1))  # batch[0] is its longest
        out += [batch[i:i + rows] for i in range(0, len(batch), rows)]
    return out


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))  # (B, C)
    return shifted / shifted.sum(axis=1, keepdims=True)


class OnnxPredictor(TextPredictor):
    def __init__(self, export_dir: str | Path, batch_size: int = 32):
        export_dir = Path(export_dir)
        # before each file is parsed, the files this load reads (not a fallback ONNX file beside)
        verify_folder(export_dir, [EXPORT_FILE, TOKENIZER_FILE])
        meta = read_export(export_dir)
        if meta["format"] == "torch":
            raise UserError(f"{export_dir} holds no ONNX model ({torch_why(meta)}): the PyTorch model serves; pass "
                            "models/model (or the logged model), or set serve.format and `dvc repro export`.")
        if meta["format"] == "onnx-int8" and (note := vnni_differs(meta.get("cpu"), this_cpu())):
            log.warning("%s: %s", export_dir, note)
        self.format, self.labels = meta["format"], list(meta["labels"])
        self.max_length, self.truncation, self.pad_id = meta["max_length"], meta["truncation"], meta["pad_id"]
        # written by the export of a chunks model only
        self.stride, self.chunk_pooling = meta.get("stride", 0), meta.get("chunk_pooling", "mean")
        # a multi-label export: each label's sigmoid, cut at its threshold tuned on validation
        self.thresholds = np.asarray(meta["thresholds"]) if meta.get("task") == "multilabel" else None
        self.activation = softmax if self.thresholds is None else sigmoid
        # single-label: the model folder's temperature, carried in export.json (None: exported before)
        self.calibration: Calibration | None = None
        if self.thresholds is None and "calibration" in meta:
            self.calibration = from_dict(meta["calibration"], str(export_dir / EXPORT_FILE))
        elif self.thresholds is None:
            no_calibration(export_dir)
        self.where = str(export_dir)
        self.tokenizer = RustTokenizer(export_dir / TOKENIZER_FILE)
        self.session = session(export_dir / meta["file"])
        self.batch_size = batch_size

    def proba_of_ids(self, input_ids, owner: np.ndarray | None = None, desc: str = "") -> np.ndarray:
        """Token ids (with special tokens) -> (N, C) probabilities in input order; with `owner`
        (chunks: each row's document), (documents, C) from the rows' logits pooled by
        chunk_pooling, as the PyTorch path pools them. `desc`: a progress bar's name ("": none)."""
        if owner is None:
            return self._rows(input_ids, probabilities=True, desc=desc)
        return self.activation(pool_logits(self._rows(input_ids, probabilities=False, desc=desc), owner,
                                           self.chunk_pooling))

    def _rows(self, input_ids, probabilities: bool, desc: str = "") -> np.ndarray:
        """(N, C) probabilities or logits of every row, in input order, in length-sorted
        batches padded to their longest, of at most TOKENS_PER_RUN tokens."""
        out = np.zeros((len(input_ids), len(self.labels)), dtype=np.float32)
        batches = token_batches([len(s) for s in input_ids], self.batch_size, TOKENS_PER_RUN)
        for idx in tqdm(batches, desc=desc, disable=not desc, leave=False, unit="batch"):
            width = max(len(input_ids[i]) for i in idx)
            ids = np.full((len(idx), width), self.pad_id, dtype=np.int64)  # (B, T)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                ids[row, :len(input_ids[i])], mask[row, :len(input_ids[i])] = input_ids[i], 1
            logits = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]  # (B, C)
            out[idx] = self.activation(logits.astype(np.float32)) if probabilities else logits.astype(np.float32)
        return out

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        check_texts(texts)
        enc = encode_texts(self.tokenizer, texts, self.max_length, self.truncation, self.stride)
        probs = self.proba_of_ids(enc.ids, enc.owner)  # raw: what evaluate checks against PyTorch
        return probs if self.calibration is None else self.calibration.apply(probs).astype(np.float32)
