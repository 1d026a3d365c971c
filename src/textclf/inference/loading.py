"""A predictor for what a user names: a model folder written by the train stage, an exported
folder (models/export), or an MLflow model URI / pyfunc folder, whichever format it runs.
Every predictor has `labels`, `predict_proba(texts) -> (N, C)` and `predict(texts) -> frame`."""
from __future__ import annotations

from textclf.inference.frames import TextPredictor
from textclf.config import ServeParams
from textclf.inference.model_uri import served_folder
from textclf.model.exported import EXPORT_FILE


def load_predictor(model: str, batch_size: int = 32, coverage: float | None = None,
                   review_below: float | None = None) -> TextPredictor:
    """-> the OnnxPredictor of an exported model, else the (PyTorch) Predictor; answering with
    prediction sets at `coverage` and needs_review under `review_below` where given, else as
    the logged model was served (its model_config: evaluate's serve.*), else without them."""
    folder, config = served_folder(model)
    if (folder / EXPORT_FILE).is_file():
        from textclf.inference.onnx_predictor import OnnxPredictor  # no torch

        predictor: TextPredictor = OnnxPredictor(folder, batch_size)
    else:
        from textclf.inference.predictor import Predictor  # torch loads only here

        predictor = Predictor(folder, batch_size)
    coverage = config.get("coverage") if coverage is None else coverage
    review_below = config.get("review_below") if review_below is None else review_below
    if coverage is not None or review_below is not None:
        predictor.set_review(coverage, ServeParams.review_below if review_below is None else review_below)
    return predictor
