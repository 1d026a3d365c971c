"""A predictor for what a user names: a model folder written by the train stage, an exported
folder (models/export), or an MLflow model URI / pyfunc folder, whichever format it runs.
Every predictor has `labels`, `predict_proba(texts) -> (N, C)` and `predict(texts) -> frame`."""
from __future__ import annotations

from textclf.inference.frames import TextPredictor
from textclf.inference.model_uri import model_folder
from textclf.model.exported import EXPORT_FILE


def load_predictor(model: str, batch_size: int = 32) -> TextPredictor:
    """-> the OnnxPredictor of an exported model, else the (PyTorch) Predictor."""
    folder = model_folder(model)
    if (folder / EXPORT_FILE).is_file():
        from textclf.inference.onnx_predictor import OnnxPredictor  # no torch

        return OnnxPredictor(folder, batch_size)
    from textclf.inference.predictor import Predictor  # torch loads only here

    return Predictor(folder, batch_size)
