"""The report's "Calibration and prediction sets" section (issue 41, docs/calibration.md): the
temperature, ECE and Brier before and after it on test, the reliability diagrams, the
prediction sets' coverage, size and per-class coverage, the review flag and the
coverage-accuracy curve with the params' operating point. A metrics.json from before
calibration (no ece_raw) gets the reliability of the served probabilities alone."""
from __future__ import annotations

import pandas as pd

from textclf.evaluate.conformal_report import calibration_warning, review_curve, uncalibrated
from textclf.evaluate.metrics import calibration
from textclf.report import figures
from textclf.report.classes import class_table, named
from textclf.report.document import Alert, Block, Figure, Heading, Para, Table

HEADING = "Calibration and prediction sets"
# inference.frames.PROB_PREFIX, not imported: the report stage stays off the inference code's deps
PROB_PREFIX = "prob_"


def warning_note(metrics: dict) -> list[Block]:
    """Near the headline: a calibration that made test ECE worse (metrics' calibration_warning)."""
    line = metrics.get("calibration_warning") or calibration_warning(metrics)
    return [Alert(line)] if line else []


def source_line(metrics: dict) -> list[Block]:
    """Which model the section's figures are of (metrics' confidence_format): the served one."""
    fmt = metrics.get("confidence_format")
    if fmt is None:  # a metrics.json from before: the PyTorch model's, whatever was served
        return []
    whose = ("the PyTorch model, with the calibration fitted at training" if fmt == "torch" else
             f"the {fmt} export, with its own calibration fitted at export on its validation probabilities")
    return [Para(f"Served model: **{fmt}**. Every figure of this section is from the probabilities it serves "
                 f"({whose}); the test accuracy and macro-F1 at the top are the PyTorch model's.")]


def confidence_section(metrics: dict, predictions: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [Heading(HEADING), *source_line(metrics)]
    multilabel = metrics.get("task") == "multilabel"
    if multilabel:
        blocks.append(Para("Several labels per document: each label is given where its probability reaches "
                           "its threshold tuned on validation; no temperature is fitted and no prediction sets "
                           "are made (the thresholds already decide the set). The probability below is the "
                           "given set's, and `needs_review` reads it."))
    blocks += reliability_blocks(metrics, predictions, multilabel)
    blocks += set_blocks(metrics.get("sets"))
    if not multilabel and not metrics.get("sets") and "ece_raw" in metrics:
        blocks.append(Para("No prediction sets: the model folder has no calibration (train.calibration: none, "
                           "or a folder saved before models carried one)."))
    return blocks + review_blocks(metrics, predictions)


def reliability_blocks(metrics: dict, predictions: pd.DataFrame, multilabel: bool) -> list[Block]:
    """ECE and Brier before and after the temperature, and both reliability diagrams."""
    served = calibration(predictions["probability"], predictions["correct"])
    table = Table(["confidence bin", "documents", "mean confidence", "accuracy"],
                  [[f"{b['low']:.1f}–{b['high']:.1f}", b["count"], f"{b['confidence']:.3f}",
                    f"{b['accuracy']:.3f}"] for b in served["bins"]])
    after = Figure("reliability diagram (served probabilities)",
                   figures.reliability_diagram(served["bins"], served["ece"], "served"))
    if multilabel or "ece_raw" not in metrics:
        return [Para(f"Expected calibration error **{served['ece']:.4f}** over 10 confidence bins "
                     "(0 = confidence matches accuracy)."), after, table]
    t = metrics.get("temperature", 1.0)
    cols = [c for c in predictions.columns if c.startswith(PROB_PREFIX)]
    raw = uncalibrated(predictions[cols].to_numpy(), t).max(axis=1)
    before = calibration(raw, predictions["correct"])
    fitted = (f"Temperature **{t:.3f}**, fitted on validation with the served model (above 1 softens an "
              "over-confident model); labels do not change under it." if t != 1.0 else
              "No temperature (1.0): the served probabilities are the raw softmax.")
    return [Para(fitted),
            Table(["on test", "raw softmax", "served (calibrated)"],
                  [["expected calibration error", f"{metrics['ece_raw']:.4f}", f"{metrics['ece']:.4f}"],
                   ["Brier score", f"{metrics['brier_raw']:.4f}", f"{metrics['brier']:.4f}"]]),
            Figure("reliability diagram before calibration (raw softmax)",
                   figures.reliability_diagram(before["bins"], before["ece"], "before")),
            after, table]


def set_blocks(sets: dict | None) -> list[Block]:
    """Coverage at the target and on test, set sizes, per-class coverage; a class never
    covered is a finding."""
    if not sets:
        return []
    # validation too small for the coverage: why every set holds every class, said first
    blocks: list[Block] = [Alert(sets["unguaranteed"])] if sets.get("unguaranteed") else []
    blocks += [
        Para(f"Prediction sets (split-conformal on validation, `serve.coverage: {sets['coverage_target']}`): "
             f"**{sets['coverage']:.1%}** of the test documents' sets hold their label (target "
             f"{sets['coverage_target']:.0%}); mean set size **{sets['mean_size']:.2f}**, "
             f"{sets['empty_sets']} empty set(s)."),
        Table(["set size", "documents"], [[k, v] for k, v in sets["sizes"].items()]),
        coverage_table(sets["per_class_coverage"])]
    never = sets.get("never_covered") or []
    if never:
        blocks.append(Alert(f"class(es) never covered by a prediction set on test: {named(never)}; the "
                            "coverage guarantee is on average over classes, and these get none of it."))
    return blocks


def coverage_table(coverage: dict[str, float | None]) -> Table:
    """Per class, the share of its test documents whose set holds their label: the least covered
    first (a class without test documents last), a class never covered highlighted."""
    classes = list(coverage)
    shares = [coverage[c] for c in classes]
    return class_table(["class", "coverage on test"],
                       [[c, "no test documents" if s is None else f"{s:.1%}"] for c, s in zip(classes, shares)],
                       worst=lambda i: 2.0 if shares[i] is None else shares[i], marked=lambda i: shares[i] == 0.0)


def review_blocks(metrics: dict, predictions: pd.DataFrame) -> list[Block]:
    """The review flag's share and the accuracy on the rest, and the curve to choose from."""
    review = metrics.get("review")
    if not review or "needs_review" not in predictions:
        return []
    answered = review["answered_accuracy"]
    rule = ("a prediction set of other than one label, or " if "set_size" in predictions else "")
    blocks: list[Block] = [Para(
        f"`needs_review` ({rule}a top probability below `serve.review_below: {review['review_below']}`): "
        f"**{review['flagged']} of {len(predictions)}** test documents flagged ({review['flagged_share']:.1%}); "
        f"accuracy on the answered **{'n/a' if answered is None else f'{answered:.4f}'}**, on all "
        f"{review['accuracy']:.4f}.")]
    curve = review_curve(predictions)
    point = None if answered is None else (1 - review["flagged_share"], answered)
    blocks.append(Figure("coverage–accuracy: share answered against accuracy on it, per review_below "
                         "(reports/review_curve.csv)", figures.review_curve(curve, point)))
    return blocks + [curve_table(curve, review["review_below"])]


def curve_table(curve: pd.DataFrame, review_below: float) -> Table:
    """Every other step of the curve, and the params' own review_below marked (report.md has no figures)."""
    shown = curve[(curve.index % 2 == 0) | (curve["review_below"] == review_below)]
    sets = "answered_share_sets" in curve
    header = ["review_below", "answered", "accuracy"] + (["answered (and one-label set)", "accuracy"] if sets else [])

    def cells(r) -> list:
        pairs = [("answered_share", "accuracy")] + ([("answered_share_sets", "accuracy_sets")] if sets else [])
        out = [f"{r['review_below']:.2f}" + (" (params)" if r["review_below"] == review_below else "")]
        for share, acc in pairs:
            out += [f"{r[share]:.1%}", "n/a" if pd.isna(r[acc]) else f"{r[acc]:.4f}"]
        return out
    return Table(header, [cells(r) for _, r in shown.iterrows()])
