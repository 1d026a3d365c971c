"""What a training's targets add to the loop: train.class_weights on the training split, and,
for several labels per document, the per-label thresholds tuned on validation."""
from __future__ import annotations

import logging

import numpy as np
from torch import nn

from textclf.files import write_parquet
from textclf.data.weights import AUTO_RATIO, class_weights, imbalance, positive_weights, resolve
from textclf.evaluate.multilabel import decide, multilabel_scores, tune_thresholds
from textclf.inference.frames import judged_frame
from textclf.inference.proba import predict_proba
from textclf.model.calibration import Calibration
from textclf.model.temperature import fit as fit_calibration
from textclf.model.modeling import pad_id
from textclf.train.context import Training

log = logging.getLogger("train")


def loss_weights(job: Training) -> np.ndarray | None:
    """train.class_weights on the training split -> (C,) or None; what `auto` resolved to and
    the weights logged (class_weights.json, the tag class_weights). Multi-label: each label's
    positive weight in its binary cross-entropy."""
    train = job.splits["train"]
    mode = job.params.train.class_weights
    used = resolve(mode, train.labels)
    ratio = imbalance(train.labels)
    job.tracker.set_tag("class_weights", used)
    if mode == "auto":
        what = ("a label's negatives outnumber its positives up to %.1f to 1" if train.multilabel
                else "the largest training class is %.1f times the smallest")
        log.info("train.class_weights: auto is %s here: %s (balanced from %g)", used, what % ratio, AUTO_RATIO)
    weights = (positive_weights(train.labels, used) if train.multilabel
               else class_weights(train.labels, len(job.labels), used))
    if weights is None:
        return None
    counts = (np.asarray(train.labels).sum(axis=0) if train.multilabel
              else np.bincount(train.labels, minlength=len(job.labels)))
    described = {label: {"weight": round(float(w), 6), "training_documents": int(n)}
                 for label, w, n in zip(job.labels, weights, counts)}
    log.info("class weights (train.class_weights: %s): %s", mode,
             ", ".join(f"{k} {v['weight']:.3f}" for k, v in described.items()))
    job.tracker.log_dict({"class_weights": mode, "resolved": used, "imbalance": round(ratio, 3),
                          "classes": described}, "class_weights.json")
    return weights


def validation_proba(job: Training, model: nn.Module) -> np.ndarray:
    """The kept weights on the validation split -> (documents, C) probabilities: what the
    thresholds are tuned on and the labels stage judges validation labels with."""
    val = job.splits["validation"]
    return predict_proba(model, val.input_ids, job.params.train.batch_size * 2, pad_id(job.tokenizer),
                         job.accelerator.device, job.accelerator.mixed_precision, owner=val.owner,
                         pooling=job.params.model.chunk_pooling, multilabel=val.multilabel,
                         desc="validation")


def tuned_thresholds(job: Training, probs: np.ndarray) -> dict[str, float] | None:
    """Multi-label: each label's threshold, the one of its best F1 on the kept weights'
    validation probabilities `probs` (documents, C) (never the test split), logged as
    thresholds.json; None for single-label."""
    val = job.splits["validation"]
    if not val.multilabel:
        return None
    y = np.asarray(val.labels, dtype=bool)
    tuned = np.round(tune_thresholds(y, probs), 6)  # as saved and served
    at_half, at_tuned = multilabel_scores(y, decide(probs)), multilabel_scores(y, decide(probs, tuned))
    thresholds = {label: float(t) for label, t in zip(job.labels, tuned)}
    log.info("per-label thresholds tuned on validation: %s; validation macro-F1 %.4f at 0.5, %.4f tuned",
             thresholds, at_half["macro_f1"], at_tuned["macro_f1"])
    job.tracker.log_dict({"thresholds": thresholds, "validation_at_0.5": at_half,
                          "validation_tuned": at_tuned}, "thresholds.json")
    job.tracker.log_metrics({f"val_tuned_{k}": v for k, v in at_tuned.items()})
    return thresholds


def calibrate(job: Training, probs: np.ndarray) -> Calibration | None:
    """Single-label with train.calibration temperature: the temperature fitted on the kept
    weights' validation probabilities, and the validation scores prediction sets are cut
    from (docs/calibration.md); logged. None: multi-label (its per-label thresholds are tuned
    on the raw probabilities) or train.calibration none."""
    val = job.splits["validation"]
    if val.multilabel or job.params.train.calibration == "none":
        return None
    calibration = fit_calibration(probs, np.asarray(val.labels))
    job.tracker.log_metrics({"temperature": calibration.temperature, "val_nll_raw": calibration.nll_before,
                             "val_nll_calibrated": calibration.nll_after})
    return calibration


def write_validation(job: Training, probs: np.ndarray, tuned: dict[str, float] | None) -> None:
    """The kept weights' per-document validation predictions (evaluate's columns; calibrated,
    as served) into --val-predictions, where the stage is given one: out of sample, as the
    labels stage needs."""
    if not job.paths.val_predictions:
        return
    val = job.splits["validation"]
    thresholds = None if tuned is None else np.array(list(tuned.values()))
    write_parquet(judged_frame(val.doc_ids or [], val.labels, probs, job.labels, thresholds), job.paths.val_predictions)
