"""One exported format checked against the PyTorch model on a split, as it is served: the share
of predicted labels that agree, the largest probability difference, the paired verdict
(McNemar + bootstrap), and each document scored alone against its batched answer
(SAME_ANSWER_ATOL). The export stage runs it on validation to decide which format it holds
(int8, else the float32 export, else none: PyTorch serves), evaluate on test to confirm it.
No MLflow here: the export stage imports it."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from textclf.config import EvaluateParams, ServeParams
from textclf.data.labelsets import label_sets
from textclf.evaluate.comparison import WORSE, compare
from textclf.evaluate.multilabel import decide
from textclf.inference.frames import SAME_ANSWER_ATOL
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.proba import inference_device, predict_proba
from textclf.model.batching import Split
from textclf.model.calibration import Calibration
from textclf.model.modeling import folder_params, load_tokenizer, pad_id

log = logging.getLogger(__name__)

# Documents scored one per call against their batched answers: all of a split up to this,
# a seeded sample of this many beyond (docs/serving.md). Scoring one per call cost 0.7-1.8x the
# batched pass (2026-12-06); 1 000 documents find a batch dependence that moves 0.3 % of the
# documents with probability 95 % (dynamic int8 moved all of them), at ~100 s at most.
SINGLE_CALLS = 1000
CHECKED = ("agreement", "max_prob_diff", "accuracy", "verdict", "batch_diff", "single_calls", "batch_differ")


@dataclass(frozen=True)
class Scored:
    """The served export's test probabilities (raw, per document) and its own calibration:
    what evaluate's calibration, sets, review and test predictions are computed from."""
    format: str
    probs: np.ndarray  # (documents, C)
    calibration: Calibration | None


def one_per_call(exported: OnnxPredictor, input_ids, owner: np.ndarray | None, batched: np.ndarray,
                 seed: int) -> dict:
    """Each document (all of them up to SINGLE_CALLS, else a `seed`ed sample) scored alone,
    against its `batched` (documents, C) probabilities -> {batch_diff (the largest difference),
    single_calls (documents scored alone), batch_differ (those past SAME_ANSWER_ATOL)}.
    With chunks (`owner`), a document's windows make one call."""
    n = len(batched)
    docs = np.arange(n) if n <= SINGLE_CALLS else np.sort(
        np.random.default_rng(seed).choice(n, SINGLE_CALLS, replace=False))
    rows = np.arange(n) if owner is None else np.argsort(owner, kind="stable")  # a document's rows together
    bounds = np.arange(n + 1) if owner is None else np.searchsorted(owner[rows], np.arange(n + 1))
    gaps = np.zeros(len(docs))
    for k, d in enumerate(tqdm(docs, desc=f"{exported.format}: one document per call", leave=False)):
        mine = rows[bounds[d]:bounds[d + 1]]
        alone = exported.proba_of_ids([input_ids[i] for i in mine],
                                      None if owner is None else np.zeros(len(mine), dtype=np.int64))
        gaps[k] = np.abs(alone[0] - batched[d]).max()
    return {"batch_diff": float(gaps.max(initial=0.0)), "single_calls": int(len(docs)),
            "batch_differ": int((gaps > SAME_ANSWER_ATOL).sum())}


def check_format(folder, input_ids, y_true: np.ndarray, torch_probs: np.ndarray, serve: ServeParams,
                 cfg: EvaluateParams, owner, answer, split: str = "test") -> dict:
    """One exported format (a format_folder) against PyTorch and against itself one document
    per call -> {format, agreement, max_prob_diff, accuracy, verdict, comparison, batch_diff,
    single_calls, batch_differ, reasons (why it is not served; empty: it is), scored}."""
    exported = OnnxPredictor(folder, cfg.batch_size)
    probs = exported.proba_of_ids(input_ids, owner, desc=f"{exported.format}: {split}")  # (N, C), the same token ids as PyTorch's
    alone = one_per_call(exported, input_ids, owner, probs, cfg.seed)
    ours, theirs = answer(probs), answer(torch_probs)
    agreement = float((ours == theirs).mean())
    cmp = compare(ours == y_true, theirs == y_true, cfg.bootstrap, cfg.seed, cfg.alpha)
    reasons = []
    if agreement < serve.min_agreement:
        reasons.append(f"{int((ours == theirs).sum())} of its {len(ours)} {split} labels ({agreement:.2%}) "
                       f"agree with PyTorch's, below serve.min_agreement {serve.min_agreement:.2%}")
    if cmp["verdict"] == WORSE:
        reasons.append(f"significantly worse than PyTorch on the {split} split ({cmp['difference']:+.1%}, "
                       f"McNemar p = {cmp['mcnemar_p']:.3g})")
    if alone["batch_differ"]:
        reasons.append(f"{alone['batch_differ']} of {alone['single_calls']} {split} documents scored one per call "
                       f"differ from their batched answer by up to {alone['batch_diff']:.3g}, over SAME_ANSWER_ATOL "
                       f"{SAME_ANSWER_ATOL:g}: its answer depends on the other texts of a request")
    return {"format": exported.format, "agreement": agreement,
            "max_prob_diff": float(np.abs(probs - torch_probs).max()),
            "accuracy": float((ours == y_true).mean()), "verdict": cmp["verdict"], "comparison": cmp,
            **alone, "reasons": reasons, "scored": Scored(exported.format, probs, exported.calibration)}


def chain_result(requested: str, checks: list[dict]) -> dict:
    """The checks of the chain, in order (the last one passed, or none did) -> check_export's
    answer; one warning line naming each format not served and why."""
    failed = [c for c in checks if c["reasons"]]
    why = {c["format"]: "; ".join(c["reasons"]) for c in failed}
    fallback = ("; ".join(why.values()) if len(why) == 1 else
                "; ".join(f"{fmt}: {reason}" for fmt, reason in why.items())) or None
    served = None if len(failed) == len(checks) else checks[-1]
    if fallback:
        log.warning("serving %s, not %s: %s", served["format"] if served else "PyTorch", " or ".join(why), fallback)
    shown = served or checks[0]
    return {"requested": requested, "format": served["format"] if served else "torch",
            **{k: shown[k] for k in ("comparison",) + CHECKED}, "fallback": fallback,
            "checks": {c["format"]: {**{k: c[k] for k in CHECKED}, "fallback": why.get(c["format"])} for c in checks}}


def torch_proba(model, model_dir: str, split: Split, cfg: EvaluateParams, multilabel: bool, desc: str) -> np.ndarray:
    """The PyTorch model's (documents, C) probabilities on a split, raw, as evaluate scores it
    (evaluate.precision and batch_size; chunks pooled as validation pooled)."""
    device, mixed = inference_device(cfg.precision)
    model.to(device)
    pooling = folder_params(model_dir)[1].chunk_pooling
    return predict_proba(model, split.input_ids, cfg.batch_size, pad_id(load_tokenizer(model_dir)), device,
                         mixed, owner=split.owner, pooling=pooling, multilabel=multilabel, desc=desc)


def answer_of(labels: list[str], thresholds: np.ndarray | None):
    """(N, C) probabilities -> each document's answer: its most probable class, or (multi-label)
    its label set, cut at the per-label thresholds."""
    def answer(p: np.ndarray) -> np.ndarray:
        return p.argmax(axis=1) if thresholds is None else np.asarray(label_sets(decide(p, thresholds), labels))
    return answer


def truth_of(y_true, labels: list[str], thresholds: np.ndarray | None) -> np.ndarray:
    """A split's labels as answer_of's answers are compared with them."""
    return np.asarray(y_true) if thresholds is None else np.asarray(label_sets(np.asarray(y_true), labels))
