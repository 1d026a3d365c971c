"""The Predictor: a model folder (or an MLflow model URI) -> class probabilities for new
texts, tokenized as the model was trained (with chunks: windowed, and each text scored by its
windows' pooled logits). The CLI (textclf.predict) and the pyfunc (inference.serving) both use
it, so both give the same numbers."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from textclf.data.tokenizing import encode_texts
from textclf.inference.base import TextPredictor
from textclf.inference.frames import check_texts
from textclf.inference.proba import inference_device, predict_proba
from textclf.errors import UserError
from textclf.model.calibration import load as load_calibration
from textclf.model.modeling import (folder_params, is_multilabel_model, load_classifier, load_thresholds,
                                    load_tokenizer, pad_id)


class Predictor(TextPredictor):
    """Tokenizes as the model was trained (max_length, truncation, stride from its params.json)
    and returns per-class probabilities, in batches sorted by length; with chunks each text's
    windows' logits are pooled by the model's chunk_pooling, as evaluate pools them. A
    multi-label model answers each label's probability and the labels over their thresholds."""

    def __init__(self, model_dir: str | Path, batch_size: int = 32):
        model_dir = Path(model_dir)
        if not (model_dir / "params.json").is_file():
            raise UserError(f"{model_dir} is not a model folder written by the train stage "
                             "(no params.json); run `dvc repro train` or pass models/model.")
        self.model, self.labels = load_classifier(model_dir)  # first: it checks the folder's checksums
        tok, model_cfg = folder_params(model_dir)
        self.max_length, self.truncation, self.stride = tok.max_length, tok.truncation, tok.stride
        self.chunk_pooling = model_cfg.chunk_pooling
        self.tokenizer = load_tokenizer(str(model_dir))
        # multi-label: sigmoid per label, each cut at its threshold tuned on validation
        self.thresholds = load_thresholds(model_dir, self.labels) if is_multilabel_model(self.model) else None
        # single-label: the temperature fitted on validation (None: saved before models had one)
        self.calibration = None if self.thresholds is not None else load_calibration(model_dir)
        self.where = str(model_dir)
        self.batch_size = batch_size
        self.device, self.mixed = inference_device()
        self.model.to(self.device)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        check_texts(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        enc = encode_texts(self.tokenizer, texts, self.max_length, self.truncation, self.stride)
        probs = predict_proba(self.model, enc.ids, self.batch_size, pad_id(self.tokenizer), self.device,
                              self.mixed, owner=enc.owner, pooling=self.chunk_pooling,
                              multilabel=self.thresholds is not None)  # (N, C)
        return probs if self.calibration is None else self.calibration.apply(probs).astype(np.float32)
