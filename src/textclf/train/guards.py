"""Guards that turn the classic silent fine-tuning failures into loud ones.

Each returns (status, message) with status "pass", "warn", "allowed" or raises
ValueError naming the cause and the fix; textclf.severity says what each status means.
"""
from __future__ import annotations

import logging
import math
import re
from collections import defaultdict

import numpy as np
import torch
from torch import nn

from textclf.errors import UserError
from textclf.evaluate.metrics import confusion, per_class_scores
from textclf.data.labelsets import label_sets
from textclf.data.weights import silent_advice

log = logging.getLogger(__name__)
USUAL_LR = "1e-5…5e-5"


def load_audit(new_params: set[str], encoder_params: set[str], unused: set[str],
               allow_random_init: bool) -> tuple[str, str]:
    """Only the head may be newly initialised. `new_params` are the names that did not
    come from the checkpoint; parameters the head never uses do not count."""
    random_encoder = sorted((new_params & encoder_params) - unused)
    if not random_encoder:
        return "pass", "every encoder parameter the head uses came from the checkpoint"
    more = len(random_encoder) - 5
    shown = ", ".join(random_encoder[:5]) + (f" and {more} more" if more > 0 else "")
    found = (f"{len(random_encoder)} encoder parameter(s) were newly initialised, not loaded "
             f"from the checkpoint: {shown}. The encoder is (partly) RANDOM")
    if allow_random_init:
        message = f"{found}, as model.allow_random_init: true allows."
        log.warning(message)
        return "allowed", message
    raise UserError(f"{found}: it was built from a config (model.init: config), the model name is wrong, or "
                    "the checkpoint does not match the architecture. Use model.init: pretrained with a "
                    "checkpoint of this architecture, or set model.allow_random_init: true if random "
                    "weights are intended.")


def optimizer_coverage(model: nn.Module, optimizer: torch.optim.Optimizer,
                       frozen_reasons: dict[str, str]) -> tuple[str, str]:
    """Every trainable parameter is in exactly one optimizer group, and every frozen
    parameter is frozen on purpose (the params say so). Run before the first step."""
    count: dict[int, int] = defaultdict(int)
    for group in optimizer.param_groups:
        for p in group["params"]:
            count[id(p)] += 1
    missing, doubled, unexplained = [], [], []
    for name, p in model.named_parameters():
        if p.requires_grad and count[id(p)] == 0:
            missing.append(name)
        elif count[id(p)] > 1:
            doubled.append(name)
        elif not p.requires_grad and name not in frozen_reasons:
            unexplained.append(name)
    problems = []
    if missing:
        problems.append(f"{len(missing)} trainable parameter(s) are in no optimizer group "
                        f"(e.g. {missing[0]}): they will never change")
    if doubled:
        problems.append(f"{len(doubled)} parameter(s) are in several groups (e.g. {doubled[0]})")
    if unexplained:
        problems.append(f"{len(unexplained)} parameter(s) are frozen though train.encoder does not "
                        f"say so (e.g. {unexplained[0]})")
    if problems:
        raise UserError("optimizer coverage: " + "; ".join(problems) + ". Build the optimizer "
                         "from every parameter with requires_grad (the encoder included), or set "
                         "train.encoder: freeze | last_k if freezing is intended.")
    return "pass", f"{sum(count.values())} parameters in {len(optimizer.param_groups)} groups"


def lr_sanity(encoder_policy: str, lr_encoder: float) -> tuple[str, str]:
    if encoder_policy == "finetune" and lr_encoder > 1e-4:
        message = (f"train.lr_encoder={lr_encoder:g} is high for full fine-tuning; the usual "
                   f"range is {USUAL_LR}. Rates near 1e-3 often collapse every prediction to one "
                   "class.")
        log.warning(message)
        return "warn", message
    return "pass", f"lr_encoder={lr_encoder:g}"


def collapse_check(pred: np.ndarray, y_true: np.ndarray | list[int], labels: list[str],
                   collapse_share: float) -> dict:
    """Share of the most-predicted class and prediction entropy against the label prior."""
    n = len(labels)
    pred_share = np.bincount(pred, minlength=n) / len(pred)
    true_share = np.bincount(y_true, minlength=n) / len(y_true)
    top = int(pred_share.argmax())

    def entropy(p):
        p = p[p > 0]
        return float(-(p * np.log(p)).sum()) + 0.0  # + 0.0: no "-0.00" for a single class
    collapsed = pred_share[top] >= collapse_share and true_share[top] < pred_share[top] / 2
    return {"collapsed": bool(collapsed), "top_class": labels[top],
            "top_share": float(pred_share[top]), "top_true_share": float(true_share[top]),
            "pred_entropy": entropy(pred_share), "label_entropy": entropy(true_share)}


def multilabel_checks(pred: np.ndarray, y_true: np.ndarray, labels: list[str],
                      collapse_share: float) -> tuple[dict, dict]:
    """Multi-label (N, C) multi-hot predictions and truth -> (collapse_check over label sets:
    one set, e.g. [] or every label, predicted for nearly every document while few carry it;
    recall_check per label: a label never predicted has recall 0, which silent_class names)."""
    pred, y_true = np.asarray(pred, dtype=bool), np.asarray(y_true, dtype=bool)
    pred_sets, true_sets = label_sets(pred, labels), label_sets(y_true, labels)
    sets = sorted(set(pred_sets) | set(true_sets))
    index = {name: i for i, name in enumerate(sets)}
    stats = collapse_check(np.array([index[p] for p in pred_sets]), np.array([index[t] for t in true_sets]),
                           sets, collapse_share)
    support, predicted = y_true.sum(axis=0), pred.sum(axis=0)
    recall = np.divide((pred & y_true).sum(axis=0), support, out=np.zeros(len(labels)), where=support > 0)
    recalls = {"support": support.tolist(), "predicted": predicted.tolist(), "recall": recall.tolist()}
    return {**stats, "kind": "label set"}, recalls


def collapse_message(stats: dict, random_encoder: bool = False, lr_high: bool = True) -> str:
    """`random_encoder`: load_audit allowed a RANDOM encoder, which is then the likely cause;
    `lr_high`: lr_sanity warned (False: it passed, so a short training is the likelier cause)."""
    if random_encoder:
        cause = RANDOM_HINT
    elif stats.get("kind") == "label set":
        cause = MULTILABEL_HINT.format(at=stats.get("at", "probability 0.5"))
    elif not lr_high:  # the shipped 1e-4 passes lr_sanity: blaming it sent people to lower a sane rate
        cause = ("train.lr_encoder passed lr_sanity, so the model is more likely under-trained: train longer "
                 "(train.epochs), with warmup (train.warmup_ratio); a rare class may need train.class_weights: "
                 "balanced.")
    else:
        cause = (f"The learning rate is probably too high for fine-tuning: try train.lr_encoder in "
                 f"{USUAL_LR}, with warmup (train.warmup_ratio) and clipping (train.max_grad_norm).")
    return (f"predictions collapsed to {stats.get('kind', 'class')} {stats['top_class']!r}: it takes "
            f"{stats['top_share']:.0%} of validation predictions but only "
            f"{stats['top_true_share']:.0%} of the labels (prediction entropy "
            f"{stats['pred_entropy']:.2f} vs label entropy {stats['label_entropy']:.2f}). {cause}")


# a randomly initialised encoder gives every text nearly the same features: no learning rate helps
RANDOM_HINT = ("The encoder is RANDOM (load_audit: allowed by model.allow_random_init: true), which "
               "gives every text nearly the same features: use model.init: pretrained.")


# a sigmoid per label learns "no" first (most labels are absent from most documents): the
# empty set everywhere is an under-trained model as often as a too-high learning rate
MULTILABEL_HINT = ("Several labels per document, judged at {at}: train longer (train.epochs), "
                   "weight each label's positives (train.class_weights: balanced), and keep "
                   f"train.lr_encoder in {USUAL_LR}.")


def judge_collapse(history: list[dict], kept_epoch: int, random_encoder: bool = False,
                   lr_high: bool = True) -> tuple[str, str]:
    """The collapse guard's verdict on the model that is kept, from per-epoch collapse_check
    results ({"epoch", **stats}): collapsed when the kept epoch is; recovered (a warning) when
    only other epochs were, naming them; pass otherwise."""
    kept = next((h for h in history if h["epoch"] == kept_epoch), None)
    if kept is None:
        raise UserError(f"no validation result for the kept epoch {kept_epoch} "
                         f"(epochs seen: {[h['epoch'] for h in history]}).")
    others = [h["epoch"] for h in history if h["collapsed"] and h["epoch"] != kept_epoch]
    if kept["collapsed"]:
        tuned = kept.get("tuned")  # multi-label: what the tuned thresholds make of it, said beside
        beside = (f" At the per-label thresholds tuned on validation its top label set {tuned['top_class']!r} "
                  f"takes {tuned['top_share']:.0%}." if tuned else "")
        return "collapsed", (f"epoch {kept_epoch} (the kept one): "
                             f"{collapse_message(kept, random_encoder, lr_high)}{beside}")
    if others:
        listed = ", ".join(map(str, others))
        return "recovered", (f"epoch{'s' if len(others) > 1 else ''} {listed} collapsed, but the kept "
                             f"epoch {kept_epoch} did not: its top class {kept['top_class']!r} takes "
                             f"{kept['top_share']:.0%} of validation predictions (prediction entropy "
                             f"{kept['pred_entropy']:.2f} vs label entropy {kept['label_entropy']:.2f}).")
    return "pass", f"epoch {kept_epoch}: top class share {kept['top_share']:.0%}"


def recall_check(pred: np.ndarray, y_true: np.ndarray | list[int], labels: list[str]) -> dict:
    """Per class: validation documents (support), how many were predicted as it, and recall."""
    matrix = confusion(np.asarray(y_true), pred, len(labels))  # rows actual, columns predicted
    _, recall, _, support = per_class_scores(matrix)
    return {"support": support.tolist(), "predicted": matrix.sum(axis=0).tolist(), "recall": recall.tolist()}


def judge_silent_class(entry: dict, labels: list[str], min_support: int,
                       weights: str = "none") -> tuple[str, str, list[dict]]:
    """The kept epoch's recall_check -> (status, message, silent classes). A class with at least
    `min_support` validation documents, none of them recalled, is one the model ignores: the
    collapse guard cannot see it (no class takes the predictions), and accuracy barely moves
    when the class is rare. `weights`: the class weighting the training used (none, balanced)."""
    silent = [{"class": label, "support": entry["support"][i], "predicted": entry["predicted"][i]}
              for i, label in enumerate(labels)
              if entry["support"][i] >= min_support and entry["recall"][i] == 0]
    small = [label for i, label in enumerate(labels) if 0 < entry["support"][i] < min_support]
    unjudged = (f"; {len(small)} class(es) with fewer than {min_support} validation documents not "
                f"judged: {', '.join(small[:5])}{' …' if len(small) > 5 else ''}") if small else ""
    if not silent:
        return "pass", f"every class with {min_support}+ validation documents is recalled{unjudged}", []
    named = ", ".join(f"{c['class']!r} ({c['support']} validation document{'s' * (c['support'] > 1)}, "
                      f"predicted for {c['predicted']})" for c in silent)
    message = (f"the model never gets {named} right: recall 0 on validation{unjudged}. A rare class "
               f"the model ignores barely moves accuracy; {silent_advice(weights)}.")
    return "warn", message, silent


_LAYER = re.compile(r"^(.*?\.(?:layer|layers|h|block)\.\d+)\.")


def layer_of(name: str) -> str:
    """'hf.bert.encoder.layer.3.attention.self.query.weight' -> 'hf.bert.encoder.layer.3'."""
    m = _LAYER.match(name)
    return m.group(1) if m else name.rsplit(".", 1)[0]  # else the module owning the parameter


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters()}


def weight_movement(model: nn.Module, before: dict[str, torch.Tensor],
                    encoder_params: set[str]) -> list[dict]:
    """Per-layer relative change ||W - W0|| / ||W0||, encoder and head."""
    diff: defaultdict[tuple[str, str], float] = defaultdict(float)
    base: defaultdict[tuple[str, str], float] = defaultdict(float)
    for name, p in model.named_parameters():
        w0 = before[name]
        key = ("encoder" if name in encoder_params else "head", layer_of(name))
        diff[key] += float((p.detach().float().cpu() - w0).pow(2).sum())
        base[key] += float(w0.pow(2).sum())
    return [{"part": part, "layer": layer,
             "relative_change": math.sqrt(diff[part, layer]) / max(math.sqrt(base[part, layer]), 1e-12)}
            for part, layer in diff]


def relative_change(model: nn.Module, before: dict[str, torch.Tensor], names: set[str]) -> float:
    """||W - W0|| / ||W0|| over the named parameters together."""
    num = den = 0.0
    for name, p in model.named_parameters():
        if name in names:
            num += float((p.detach().float().cpu() - before[name]).pow(2).sum())
            den += float(before[name].pow(2).sum())
    return math.sqrt(num) / max(math.sqrt(den), 1e-12)


def movement_check(model: nn.Module, before: dict[str, torch.Tensor], encoder: set[str],
                   cfg) -> tuple[str, str]:
    """If the policy says the encoder trains, it must have moved."""
    trainable = {n for n, p in model.named_parameters() if n in encoder and p.requires_grad}
    if cfg.encoder == "freeze" or not trainable:
        change = relative_change(model, before, encoder)
        return "pass", f"encoder frozen by train.encoder={cfg.encoder}; relative change {change:.2e}"
    change = relative_change(model, before, trainable)
    if change < cfg.min_encoder_change:
        raise UserError(
            f"encoder did not change: relative weight change {change:.2e} < "
            f"train.min_encoder_change={cfg.min_encoder_change:g} although train.encoder="
            f"{cfg.encoder}. The optimizer probably holds only the head, or lr_encoder "
            f"({cfg.lr_encoder:g}) is ~0. Put the encoder parameters in the optimizer, or set "
            "train.encoder: freeze if a frozen encoder is what you want.")
    return "pass", f"encoder relative change {change:.2e}"
