"""Predict labels for new texts with a model folder written by the train stage.

    python -m textclf.predict models/model article1.txt article2.txt
    python -m textclf.predict models:/textclf@champion article1.txt   # from the model registry
    cat headlines.txt | python -m textclf.predict models/model      # one text per line

Prints one tab-separated line per input: source, label, probability of that label.
The MLflow pyfunc (textclf.inference.serving) wraps the same Predictor, so both give the same numbers.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from transformers import AutoTokenizer

from textclf.evaluate.metrics import PROB_PREFIX
from textclf.inference.proba import inference_device, predict_proba
from textclf.io import UserError, read_json, run_stage
from textclf.model.modeling import load_classifier
from textclf.data.text import decode
from textclf.data.tokens import tokenize_texts

log = logging.getLogger("predict")


def probability_frame(probs: np.ndarray, labels: list[str]) -> pd.DataFrame:
    """(N, C) probabilities -> columns label (the most probable), probability (of that
    label), prob_<class> for every class."""
    best = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=int)
    frame = pd.DataFrame({"label": [labels[i] for i in best],
                          "probability": probs[np.arange(len(best)), best].astype(float)})
    for i, label in enumerate(labels):
        frame[PROB_PREFIX + label] = probs[:, i].astype(float)
    return frame


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
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model, self.labels = load_classifier(model_dir)
        self.batch_size = batch_size
        self.device, self.mixed = inference_device()
        self.model.to(self.device)

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise UserError(f"inputs {bad[:10]} are not strings (got "
                             f"{type(texts[bad[0]]).__name__}); pass one text per row.")
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        empty = [i for i, t in enumerate(texts) if not t.strip()]
        if empty:
            raise UserError(f"inputs {empty[:10]} are empty or whitespace-only; there is nothing "
                             "to classify: send text, or drop those rows.")
        ids, _ = tokenize_texts(self.tokenizer, texts, self.max_length, self.truncation)
        return predict_proba(self.model, ids, self.batch_size, int(self.tokenizer.pad_token_id or 0),
                             self.device, self.mixed)  # (N, C)

    def predict(self, texts: list[str]) -> pd.DataFrame:
        return probability_frame(self.predict_proba(list(texts)), self.labels)


def model_folder(model: str) -> Path:
    """A model folder, or an MLflow model URI (`models:/textclf@champion`, `runs:/…`,
    `models:/m-…`) -> the model folder inside the downloaded pyfunc."""
    if ":/" not in model:
        return Path(model)
    import mlflow  # only for URIs: a local folder needs no tracking store
    import yaml

    from textclf.tracking.runs import tracking_uri
    mlflow.set_tracking_uri(tracking_uri())
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model))
    except mlflow.exceptions.MlflowException as err:
        raise UserError(f"{model}: {err.message.splitlines()[0]} (tracking store "
                         f"{mlflow.get_tracking_uri()}; set MLFLOW_TRACKING_URI).") from None
    flavor = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]
    return local / flavor["artifacts"]["model_dir"]["path"]


def read_inputs(files: list[str]) -> tuple[list[str], list[str]]:
    """-> (sources, texts): each FILE is one text; with no FILE (or `-`), each non-empty
    line of stdin is one text."""
    if not files or files == ["-"]:
        lines = [line.strip() for line in sys.stdin.read().splitlines()]
        kept = [(f"stdin:{n}", line) for n, line in enumerate(lines, 1) if line]
        if not kept:
            raise UserError("stdin holds no text (empty or whitespace-only); pipe one text "
                             "per line, or pass text files.")
        return [s for s, _ in kept], [t for _, t in kept]
    texts = []
    for name in files:
        path = Path(name)
        if not path.is_file():
            raise UserError(f"{name} is not a file; pass text files, or pipe lines into stdin.")
        text, how = decode(path.read_bytes())
        if text is None:
            raise UserError(f"{name} is not text ({how}); pass plain text files.")
        if not text.strip():
            raise UserError(f"{name} is empty or whitespace-only; there is nothing to classify.")
        texts.append(text)
    return list(files), texts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="model folder (models/model) or MLflow model URI "
                                          "(models:/textclf@champion)")
    parser.add_argument("files", nargs="*", help="text files; none or `-` reads lines from stdin")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    if args.batch_size < 1:
        raise UserError(f"--batch-size={args.batch_size}; use a positive number.")
    sources, texts = read_inputs(args.files)
    frame = Predictor(model_folder(args.model_dir), args.batch_size).predict(texts)
    for source, label, prob in zip(sources, frame["label"], frame["probability"]):
        sys.stdout.write(f"{source}\t{label}\t{prob:.4f}\n")


if __name__ == "__main__":
    run_stage(main)
