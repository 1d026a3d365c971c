"""evaluate's calibration, prediction-set and review numbers (issue 41) and the report's
"Calibration and prediction sets" section: metrics.json agrees with the test predictions it
was computed from, the section renders, a temperature that makes test ECE worse is a warning,
and labels (so accuracy, macro-F1 and the comparison) do not change under calibration."""
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from textclf.evaluate.comparison import compare
from textclf.evaluate.conformal_report import (REVIEW_STEPS, calibration_scores, review_curve, set_metrics,
                                               uncalibrated)
from textclf.evaluate.metrics import brier, calibration, mlflow_metrics
from textclf.evaluate.metrics_file import read_metrics
from textclf.inference.frames import judged_frame
from textclf.model.calibration import CALIBRATION_FILE, Calibration
from textclf.model.checksums import write_checksums
from textclf.report.confidence import confidence_section, warning_note
from textclf.report.document import to_html, to_markdown
from textclf.report.sections import headline

from stages import evaluate, export

from conftest import run_baseline, run_evaluate, run_train


def read(folder):
    return read_metrics(folder / "metrics.json", folder / "pc.json"), pd.read_parquet(folder / "pred.parquet")


def test_brier_is_the_mean_squared_distance_to_the_one_hot():
    probs = np.array([[1.0, 0.0, 0.0], [0.5, 0.25, 0.25], [0.0, 1.0, 0.0]])
    # 0; (0.5^2 + 0.25^2 + 0.25^2) = 0.375; 1 + 1 = 2
    assert brier(probs, np.array([0, 0, 2])) == pytest.approx((0 + 0.375 + 2) / 3)


def test_metrics_agree_with_the_test_predictions(tiny_trained):
    folder, _ = tiny_trained
    metrics, pred = read(folder)
    temperature = json.loads((folder / "model" / CALIBRATION_FILE).read_text())["temperature"]
    assert metrics["temperature"] == pytest.approx(temperature)
    assert metrics["ece"] == pytest.approx(calibration(pred["probability"], pred["correct"])["ece"])
    probs = pred.filter(like="prob_").to_numpy()
    raw = uncalibrated(probs, temperature)  # what the raw softmax was: the report draws it so
    assert metrics["ece_raw"] == pytest.approx(calibration(raw.max(axis=1), pred["correct"])["ece"], abs=1e-6)
    y = np.array([list(pred.filter(like="prob_").columns).index("prob_" + c) for c in pred["label"]])
    assert metrics["brier"] == pytest.approx(brier(probs, y))
    assert metrics["brier_raw"] == pytest.approx(brier(raw, y), abs=1e-6)

    sets = metrics["sets"]
    covered = [given in list(chosen) for given, chosen in zip(pred["label"], pred["labels"])]
    assert sets["coverage"] == pytest.approx(np.mean(covered)) and sets["coverage_target"] == 0.9
    assert (pred["set_size"] == pred["labels"].map(len)).all()
    assert sets["mean_size"] == pytest.approx(pred["set_size"].mean())
    assert sets["sizes"] == {str(k): int(v) for k, v in pred["set_size"].value_counts().items()}
    assert sets["empty_sets"] == int((pred["set_size"] == 0).sum())
    for c, share in sets["per_class_coverage"].items():
        mine = np.asarray(covered)[(pred["label"] == c).to_numpy()]
        assert share == (pytest.approx(mine.mean()) if len(mine) else None)

    review = metrics["review"]
    flagged = pred["needs_review"].to_numpy()
    assert (flagged == ((pred["probability"] < review["review_below"]) | (pred["set_size"] != 1))).all()
    assert review["flagged"] == flagged.sum() and review["flagged_share"] == pytest.approx(flagged.mean())
    assert review["accuracy"] == pytest.approx(metrics["accuracy"])
    if (~flagged).any():
        assert review["answered_accuracy"] == pytest.approx(pred["correct"][~flagged].mean())

    curve = review_curve(pred)
    assert list(curve["review_below"]) == list(REVIEW_STEPS) and curve["answered_share"].iloc[0] == 1.0
    assert curve["answered_share"].is_monotonic_decreasing
    flat = mlflow_metrics(metrics)
    assert flat["test_set_coverage"] == sets["coverage"] and flat["test_brier_raw"] == metrics["brier_raw"]
    assert flat["calibration_temperature"] == metrics["temperature"]


def test_the_report_section_renders_numbers_diagrams_and_the_curve(tiny_trained):
    folder, _ = tiny_trained
    metrics, pred = read(folder)
    blocks = confidence_section(metrics, pred)
    text = to_markdown(blocks)
    assert "## Calibration and prediction sets" in text
    assert f"Temperature **{metrics['temperature']:.3f}**" in text
    assert f"| expected calibration error | {metrics['ece_raw']:.4f} | {metrics['ece']:.4f} |" in text
    assert f"| Brier score | {metrics['brier_raw']:.4f} | {metrics['brier']:.4f} |" in text
    assert f"**{metrics['sets']['coverage']:.1%}** of the test documents' sets hold their label" in text
    assert f"**{metrics['review']['flagged']} of {len(pred)}** test documents flagged" in text
    for title in ("reliability diagram before calibration", "reliability diagram (served", "coverage–accuracy"):
        assert title in text
    assert to_html(blocks, "t").count("<img") == 3
    assert f"| {metrics['review']['review_below']:.2f} (params) |" in text  # the operating point's row
    never = dict(metrics["sets"], per_class_coverage={"a": 0.0, "b": 1.0}, never_covered=["a"])
    found = to_markdown(confidence_section({**metrics, "sets": never}, pred))
    assert "never covered by a prediction set on test: a" in found


def test_a_temperature_that_makes_test_ece_worse_is_a_warning_near_the_headline():
    rng = np.random.default_rng(0)
    raw = rng.dirichlet(np.ones(3), size=400)  # (N, 3)
    y = np.array([rng.choice(3, p=p) for p in raw])  # labels drawn from the probabilities: calibrated
    sharp = raw ** 5 / (raw ** 5).sum(axis=1, keepdims=True)  # a temperature of 0.2: over-confident
    scores = calibration_scores(raw, sharp, y, 0.2)
    assert scores["ece"] > scores["ece_raw"] and scores["temperature"] == 0.2
    assert scores["calibration_warning"].startswith("calibration made test ECE worse")
    assert "calibration_warning" not in calibration_scores(sharp, raw, y, 5.0)  # the fix: no warning
    base = {"accuracy": 0.5, "macro_f1": 0.5, "baseline": {"accuracy": 0.5, "macro_f1": 0.5},
            "gap": {"accuracy": 0.0, "macro_f1": 0.0}, "guards": {"load_audit": "pass"},
            "comparison": compare(np.ones(400, bool), np.ones(400, bool), 100, seed=0, alpha=0.05)}
    text = to_markdown(headline({**base, **scores}) + warning_note(scores))
    assert f"raw softmax {scores['ece_raw']:.4f}, temperature 0.200" in text
    assert "**WARNING: calibration made test ECE worse" in text
    assert warning_note({"ece": 0.1, "ece_raw": 0.2}) == []


def test_set_metrics_name_a_class_never_covered():
    frame = pd.DataFrame({"label": ["a", "a", "b", "b"], "labels": [["a"], ["a", "b"], ["a"], []],
                          "set_size": [1, 2, 1, 0]})
    sets = set_metrics(frame, ["a", "b", "c"], 0.9)
    assert sets["coverage"] == 0.5 and sets["per_class_coverage"] == {"a": 1.0, "b": 0.0, "c": None}
    assert sets["never_covered"] == ["b"] and sets["sizes"] == {"0": 1, "1": 2, "2": 1} and sets["empty_sets"] == 1


def test_a_temperature_keeps_every_label():
    rng = np.random.default_rng(1)
    raw = rng.dirichlet(np.ones(4) * 0.5, size=300)
    y = rng.integers(0, 4, 300)
    labels = ["a", "b", "c", "d"]
    for t in (0.3, 1.7, 4.0):
        calibrated = Calibration(temperature=t, scores=[0.5] * 20, nll_before=0, nll_after=0).apply(raw)
        before, after = (judged_frame([str(i) for i in range(300)], y, p, labels, None) for p in (raw, calibrated))
        assert (before["predicted"] == after["predicted"]).all() and (before["correct"] == after["correct"]).all()


@pytest.mark.slow
def test_labels_accuracy_and_the_comparison_are_the_same_with_and_without_calibration(prepared):
    """One trained model evaluated twice: with its calibration.json, and with it removed (a
    folder saved with train.calibration: none). Only the probabilities move."""
    folder, p = prepared
    run_train(p)
    run_baseline(p)
    export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model", "--out", "export"])
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", "export",
                       "--data-diff", "diff.json", "--metrics", "metrics.json", "--confusion", "conf.csv",
                       "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet", "--review-curve", "review_curve.csv"])
    written = pd.read_csv(folder / "review_curve.csv")  # evaluate's DVC plot: what the report draws
    pd.testing.assert_frame_equal(written, review_curve(pd.read_parquet(folder / "pred.parquet")), atol=1e-6)
    (folder / "model" / CALIBRATION_FILE).unlink()
    write_checksums(folder / "model")  # a folder saved so, not one damaged since
    shutil.copy2(folder / "pred.parquet", folder / "pred_calibrated.parquet")
    run_evaluate(p, metrics="raw.json", per_class="raw_pc.json")
    calibrated, raw = (read_metrics(folder / name, folder / pc) for name, pc in (("metrics.json", "pc.json"),
                                                                                  ("raw.json", "raw_pc.json")))
    for key in ("accuracy", "macro_f1", "per_class", "confusion", "per_class_accuracy", "gap"):
        assert calibrated[key] == raw[key], key
    assert {k: v for k, v in calibrated["comparison"].items()} == raw["comparison"]
    assert raw["ece"] == raw["ece_raw"] == calibrated["ece_raw"] and raw["temperature"] == 1.0
    assert "sets" not in raw and "sets" in calibrated
    before, after = pd.read_parquet(folder / "pred_calibrated.parquet"), pd.read_parquet(folder / "pred.parquet")
    assert (before["predicted"] == after["predicted"]).all() and "labels" not in after
