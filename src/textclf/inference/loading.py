"""The one loader: a predictor for what a user names (a model folder written by the train stage,
an exported folder (models/export), or an MLflow model URI / pyfunc folder, whichever format
it runs), answering with the decisions the folder carries. predict, --table, the pyfunc
(REST, Spark's spark_udf) and evaluate's champion check all load through it, so every path
gives the same columns (label, probability, prob_*, labels, set_size, needs_review) and the
same numbers for the same text."""
from __future__ import annotations

import logging
from pathlib import Path

from textclf.config import ServeParams
from textclf.inference.base import TextPredictor
from textclf.inference.model_uri import served_folder
from textclf.model.exported import BLEND_KEY, EXPORT_FILE, TORCH_DIR, read_export

log = logging.getLogger(__name__)


def load_predictor(model: str, batch_size: int = 32, coverage: float | None = None,
                   review_below: float | None = None) -> TextPredictor:
    """-> folder_predictor of the folder `model` names (an MLflow model: the folder it runs)."""
    folder, config = served_folder(model)
    return folder_predictor(folder, batch_size, config, coverage, review_below)


def folder_predictor(folder: str | Path, batch_size: int = 32, logged: dict | None = None,
                     coverage: float | None = None, review_below: float | None = None) -> TextPredictor:
    """The OnnxPredictor of an exported folder (blended with the baseline where export.json
    says so: inference.blend, with the PyTorch copy it carries where PyTorch serves the blend),
    else the (PyTorch) Predictor of a model folder, answering with
    prediction sets at `coverage` and needs_review under `review_below` where given (the
    flags), else as recorded_review says."""
    folder = Path(folder)
    meta = read_export(folder) if (folder / EXPORT_FILE).is_file() else None
    if meta is None:
        predictor: TextPredictor = torch_predictor(folder, batch_size)
    elif meta["format"] == "torch" and meta.get(BLEND_KEY):  # PyTorch serves the blend: the copy it carries
        predictor = torch_predictor(folder / TORCH_DIR, batch_size)
    else:
        from textclf.inference.onnx_predictor import OnnxPredictor  # no torch

        predictor = OnnxPredictor(folder, batch_size)  # serve.format torch without a blend: refused, saying why
    if meta is not None and meta.get(BLEND_KEY):  # the export stage found the fine-tune and the baseline
        from textclf.inference.blend import BlendPredictor  # better together (issue 59); scikit-learn loads only here

        predictor = BlendPredictor(predictor, folder, meta[BLEND_KEY])
    given = {"coverage": coverage, "review_below": review_below}
    recorded = recorded_review(folder, logged, missing=[k for k, v in given.items() if v is None])
    predictor.set_review(*(recorded[k] if v is None else v for k, v in given.items()))
    return predictor


def torch_predictor(folder: Path, batch_size: int) -> TextPredictor:
    from textclf.inference.predictor import Predictor  # torch loads only here

    return Predictor(folder, batch_size)


def recorded_review(folder: Path, logged: dict | None = None,
                    missing: list[str] | tuple[str, ...] = ("coverage", "review_below")) -> dict:
    """The folder's decisions {coverage, review_below}: export.json's `review` (written by the
    export stage from serve.*, and kept in the logged model's copy); else, for a PyTorch model
    logged by evaluate or an ONNX one logged before exports carried it, the pyfunc's
    model_config (`logged`); else (a training folder, an older export) serve.*'s documented
    defaults, said in one line naming those of `missing` (not given by a flag). The folder's
    wins over model_config: it is covered by the folder's checksums, and evaluate writes
    model_config only where the folder has none."""
    if (folder / EXPORT_FILE).is_file():
        review = read_export(folder).get("review")
        if review is not None:
            return review
    if logged and "coverage" in logged:
        return {"coverage": logged["coverage"], "review_below": logged["review_below"]}
    defaults = {"coverage": ServeParams.coverage, "review_below": ServeParams.review_below}
    if missing:  # a flag given is no default: the line names only what is
        log.warning("%s records no review (a training folder, or an export from before exports carried one): "
                    "answering with %s, the default%s; %s override%s", folder,
                    " and ".join(f"serve.{k} {defaults[k]}" for k in missing), "s" if len(missing) > 1 else "",
                    " / ".join(f"--{k.replace('_', '-')}" for k in missing), "" if len(missing) > 1 else "s")
    return defaults
