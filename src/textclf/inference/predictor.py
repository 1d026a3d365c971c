"""The Predictor: a model folder (or an MLflow model URI) -> class probabilities for new
texts, tokenized as the model was trained. The CLI (textclf.predict) and the pyfunc
(inference.serving) both use it, so both give the same numbers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from textclf.data.tokenizing import tokenize_texts
from textclf.inference.frames import check_texts, probability_frame
from textclf.inference.proba import inference_device, predict_proba
from textclf.common import UserError, read_json
from textclf.model.modeling import load_classifier, load_tokenizer, pad_id


class Predictor:
    """Tokenizes as the model was trained (max_length, truncation from its params.json)
    and returns per-class probabilities, in batches sorted by length."""

    def __init__(self, model_dir: str | Path, batch_size: int = 32):
        model_dir = Path(model_dir)
        if not (model_dir / "params.json").is_file():
            raise UserError(f"{model_dir} is not a model folder written by the train stage "
                             "(no params.json); run `dvc repro train` or pass models/model.")
        tok = read_json(model_dir / "params.json")["tokenize"]
        self.max_length, self.truncation = tok["max_length"], tok["truncation"]
        self.tokenizer = load_tokenizer(str(model_dir))
        self.model, self.labels = load_classifier(model_dir)
        self.batch_size = batch_size
        self.device, self.mixed = inference_device()
        self.model.to(self.device)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        check_texts(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        ids, _ = tokenize_texts(self.tokenizer, texts, self.max_length, self.truncation)
        return predict_proba(self.model, ids, self.batch_size, pad_id(self.tokenizer),
                             self.device, self.mixed)  # (N, C)

    def predict(self, texts: list[str]) -> pd.DataFrame:
        return probability_frame(self.predict_proba(list(texts)), self.labels)
