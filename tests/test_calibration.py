"""Calibration (issue 41): the temperature fitted on validation, split-conformal prediction
sets and the review flag, the same from every predictor (docs/calibration.md)."""
from __future__ import annotations

import io
import json
import logging
import re
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import binom

from textclf import predict
from textclf.errors import UserError
from textclf.config import ServeParams
from textclf.inference.loading import load_predictor
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor
from textclf.coverage import largest_coverage, needed_documents, too_few
from textclf.model.calibration import (CALIBRATION_FILE, Calibration, conformal_threshold, lac_scores, review_for,
                                       softmax_t)
from textclf.model.checksums import write_checksums
from textclf.model.temperature import fit, fit_temperature

TEXTS = ["The striker scored twice in the cup final.", "Shares fell after the bank's results.",
         "The minister defended the budget in parliament.", "A new phone chip doubles battery life."]


def synthetic(n: int, classes: int, seed: int, sharp: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """(n, C) over-confident probabilities and labels drawn from the true (softer) ones."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * sharp  # (n, C)
    true = np.exp(logits / 2) / np.exp(logits / 2).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(classes, p=p) for p in true])
    return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True), y


def test_the_temperature_is_the_reference_fit_on_the_same_logits():
    """Guo et al.'s recipe (LBFGS on the NLL of logits / T, in torch) finds the same T."""
    probs, y = synthetic(400, 5, seed=0)
    logits = torch.tensor(np.log(probs), dtype=torch.float64)
    t = torch.ones(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([t], lr=0.1, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-14)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(logits / t, torch.tensor(y))
        loss.backward()
        return loss
    opt.step(closure)
    assert fit_temperature(probs, y) == pytest.approx(t.item(), rel=1e-3)
    assert fit_temperature(probs, y) > 1.5  # over-confident by construction: T about 2


def test_a_temperature_keeps_the_labels_and_lowers_the_validation_nll():
    probs, y = synthetic(300, 4, seed=1)
    calibration = fit(probs, y)
    assert calibration.nll_after < calibration.nll_before
    assert (calibration.apply(probs).argmax(axis=1) == probs.argmax(axis=1)).all()
    assert calibration.scores == sorted(calibration.scores) and len(calibration.scores) == 300


def test_conformal_sets_reach_their_coverage_over_many_seeds():
    """Exchangeable calibration and test draws: over 200 seeds each seed's coverage is inside
    its binomial 99.9 % interval but for a few, and the mean within a point of 1 - alpha."""
    coverage, n_test, seen, outside = 0.9, 500, [], 0
    for seed in range(200):
        probs, y = synthetic(300 + n_test, 6, seed=seed + 100)
        cut = 1 - conformal_threshold(lac_scores(probs[:300], y[:300]), coverage)
        hit = (probs[300:][np.arange(n_test), y[300:]] >= cut).mean()
        low, high = binom.interval(0.999, n_test, coverage)
        outside += not low / n_test - 0.01 <= hit <= high / n_test + 0.01  # the 300 draws add spread
        seen.append(hit)
    assert abs(np.mean(seen) - coverage) < 0.01 and np.mean(seen) >= coverage - 0.005
    assert outside <= 4


def test_the_sets_are_crepes_sets_on_the_same_scores():
    from crepes import ConformalClassifier
    from crepes.extras import hinge

    probs, y = synthetic(800, 5, seed=7)
    cal, test = probs[:300], probs[300:]
    classes = np.arange(5)
    crepes = ConformalClassifier().fit(hinge(cal, classes, y[:300]))
    for coverage in (0.8, 0.9, 0.95):
        theirs = crepes.predict_set(hinge(test), confidence=coverage, smoothing=False).astype(bool)  # (N, C)
        review = review_for(fit(cal, y[:300]).__class__(temperature=1.0, scores=sorted(lac_scores(cal, y[:300])),
                                                        nll_before=0, nll_after=0), coverage, 0.0, "synthetic")
        assert (review.sets(test) == theirs).all(), coverage


def test_a_validation_split_too_small_for_the_coverage_is_one_line():
    assert needed_documents(0.9) == 9 and needed_documents(0.95) == 19
    assert conformal_threshold(np.linspace(0, 1, 9), 0.9) is not None  # enough
    assert conformal_threshold(np.linspace(0, 1, 9), 0.95) is None
    line = too_few(6, 0.9)
    assert line is not None and "\n" not in line and too_few(9, 0.9) is None
    assert re.search(r"serve.coverage=0.9 needs at least 9 validation documents .* on 6: every class is in every "
                     r"set and every answer needs_review; serve.coverage 0.85 or lower works on 6, or give "
                     r"validation 9 documents \(split.fractions.validation\)", line), line
    for n in range(1, 60):  # the coverage it names works on n documents, and a point above it does not
        assert conformal_threshold(np.linspace(0, 1, n), largest_coverage(n)) is not None
        assert conformal_threshold(np.linspace(0, 1, n), largest_coverage(n) + 0.01) is None


def test_the_split_never_advises_a_validation_share_the_corpus_cannot_hold():
    """Issue 60, item 10: at serve.coverage 0.99 on 40 documents the split said
    "split.fractions.validation: 0.90 ... about 99 of 40 documents"."""
    from textclf.coverage import too_few_at_split
    line = too_few_at_split(4, 40, 0.99, 0.1)
    assert "split.fractions.validation:" not in line and "add documents (40 cannot hold 99 validation" in line
    line = too_few_at_split(6, 200, 0.9, 0.03)  # possible: the fraction that gives 9 of 200
    assert "split.fractions.validation: 0.06 (now 0.03; about 9 of 200 documents, taken from train)" in line


def test_a_coverage_whose_threshold_takes_every_class_says_so(caplog):
    """Issue 60, item 10: `--coverage 0.95` on 40 validation documents, two of them labels the
    model all but ruled out: the threshold is the worse one's, every class is in every set, and
    nothing said so (enough documents: no too_few line)."""
    scores = sorted([0.1] * 38 + [0.9995, 0.9999])
    calibration = Calibration(temperature=1.0, scores=scores, nll_before=0, nll_after=0)
    with caplog.at_level(logging.WARNING):
        review = review_for(calibration, 0.95, 0.5, "models/export-whole")
        assert review.sets(np.full((1, 5), 0.2)).all()  # every class
        review_for(calibration, 0.95, 0.5, "models/export-whole")  # said once a process
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "every prediction set holds nearly every class" in lines[0]
    assert "serve.coverage 0.92 gives sets that tell classes apart" in lines[0]  # ceil(41 * 0.92) = 38
    caplog.clear()
    review_for(calibration, 0.9, 0.5, "models/export-whole")
    assert not caplog.records


def test_too_few_validation_documents_give_every_class_as_crepes_does():
    """6 validation scores at 0.9 (issue 54): crepes 0.9.1 puts every class in every set; so
    does review_for, and it flags every answer, whatever its probability."""
    from crepes import ConformalClassifier
    from crepes.extras import hinge

    probs, y = synthetic(56, 5, seed=3)
    cal, test = probs[:6], probs[6:]
    crepes = ConformalClassifier().fit(hinge(cal, np.arange(5), y[:6]))
    theirs = crepes.predict_set(hinge(test), confidence=0.9, smoothing=False).astype(bool)  # (N, C)
    calibration = fit(cal, y[:6]).__class__(temperature=1.0, scores=sorted(lac_scores(cal, y[:6])),
                                            nll_before=0, nll_after=0)
    review = review_for(calibration, 0.9, 0.0, "models/export")
    assert theirs.all() and (review.sets(test) == theirs).all()
    assert review.unguaranteed and "models/export was calibrated on 6" in review.unguaranteed
    assert review.flags(test.max(axis=1), review.sets(test).sum(axis=1)).all()
    assert review_for(calibration, 0.85, 0.0, "x").unguaranteed is None  # the coverage the line names


@pytest.mark.parametrize("coverage", [0.0, 1.0, 1.5, -0.1])
def test_serve_coverage_outside_0_1_is_refused(coverage):
    with pytest.raises(UserError, match=r"serve.coverage=.* out of range: it must be in \(0, 1\)"):
        ServeParams(coverage=coverage)
    for multilabel in (False, True):  # a multi-label model has no sets, yet a wrong value is named
        with pytest.raises(UserError, match=r"serve.coverage=.* must be in \(0, 1\)"):
            review_for(None, coverage, 0.5, "x", multilabel=multilabel)


def test_softmax_at_temperature_one_is_the_identity():
    probs, _ = synthetic(50, 3, seed=2)
    assert np.allclose(softmax_t(probs, 1.0), probs)


def test_every_predictor_answers_the_same_calibrated_probabilities_sets_and_flags(tiny_trained, tmp_path,
                                                                                 monkeypatch, capsys):
    """PyTorch, ONNX (float32: the tiny model's int8 is not the point), the served pyfunc (its
    model_config from evaluate), the CLI and --table: one set of numbers."""
    folder, run = tiny_trained
    monkeypatch.setenv("MLFLOW_TRACKING_URI", run["tracking_uri"])
    mlflow.set_tracking_uri(run["tracking_uri"])  # the fixture's store (conftest restores it)
    metrics = json.loads((folder / "metrics.json").read_text())
    torch_pred, onnx_pred = Predictor(folder / "model"), OnnxPredictor(folder / "export")
    # float32's own calibration (the export stage's), fitted on probabilities that are PyTorch's to ~1e-7
    assert torch_pred.calibration is not None and onnx_pred.calibration is not None
    assert onnx_pred.calibration.temperature == pytest.approx(torch_pred.calibration.temperature, rel=1e-4)
    assert np.allclose(onnx_pred.calibration.scores, torch_pred.calibration.scores, atol=1e-6)
    for p in (torch_pred, onnx_pred):
        p.set_review(ServeParams.coverage, ServeParams.review_below)
    expected = torch_pred.predict(TEXTS)
    assert {"labels", "set_size", "needs_review"} <= set(expected.columns)
    assert (expected["set_size"] == expected["labels"].map(len)).all()
    raw = softmax_t(torch_pred.predict_proba(TEXTS), 1 / torch_pred.calibration.temperature)  # undone
    assert not np.allclose(raw, expected.filter(like="prob_").to_numpy())  # T = 1 would test nothing
    served = mlflow.pyfunc.load_model(metrics["serving"]["model_uri"]).predict(pd.DataFrame({"text": TEXTS}))
    for got in (onnx_pred.predict(TEXTS), served, load_predictor(metrics["serving"]["model_uri"]).predict(TEXTS)):
        assert np.abs(got.filter(like="prob_").to_numpy() - expected.filter(like="prob_").to_numpy()).max() < 1e-4
        assert [list(s) for s in got["labels"]] == [list(s) for s in expected["labels"]]
        assert got["needs_review"].tolist() == expected["needs_review"].tolist()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(("\n".join(TEXTS) + "\n").encode())))
    predict.main([str(folder / "model"), "--coverage", "0.9", "--review-below", "0.5"])
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [json.loads(cells[3]) for cells in lines] == [list(s) for s in expected["labels"]]
    assert [cells[4] == "true" for cells in lines] == expected["needs_review"].tolist()
    pd.DataFrame({"text": TEXTS + [None]}).to_parquet(tmp_path / "in.parquet")
    predict.main([metrics["serving"]["model_uri"], "--table", str(tmp_path / "in.parquet"),
                  "--out", str(tmp_path / "out.parquet")])
    table = pd.read_parquet(tmp_path / "out.parquet")
    assert table["needs_review"].iloc[:4].tolist() == expected["needs_review"].tolist()
    assert pd.isna(table["needs_review"].iloc[4]) and table["skip_reason"].iloc[4] == "missing_text"


def test_a_model_saved_before_calibration_is_served_as_before_saying_so(tiny_trained, tmp_path, caplog):
    folder, _ = tiny_trained
    shutil.copytree(folder / "model", tmp_path / "model")
    (tmp_path / "model" / CALIBRATION_FILE).unlink()
    write_checksums(tmp_path / "model")  # a folder saved so, not one damaged since
    with caplog.at_level(logging.WARNING):
        old = Predictor(tmp_path / "model")
        old.set_review(0.9, 0.5)
        again = Predictor(tmp_path / "model")  # a stage loads it several times: said once (issue 55)
        again.set_review(0.9, 0.5)
    assert old.calibration is None and "has no calibration" in caplog.text
    assert caplog.text.count("has no calibration (") == 1 and caplog.text.count("no prediction sets at") == 1
    assert "no prediction sets at serve.coverage=0.9" in caplog.text
    frame = old.predict(TEXTS)
    assert "labels" not in frame.columns and "needs_review" in frame.columns
    raw = Predictor(folder / "model")
    assert not np.allclose(frame.filter(like="prob_").to_numpy(), raw.predict(TEXTS).filter(like="prob_").to_numpy())


def test_a_temperature_at_its_limit_says_the_probabilities_carry_little(caplog):
    """Labels unrelated to the probabilities: the fit runs to its upper limit, and says so."""
    probs, _ = synthetic(3000, 5, seed=3)
    y = np.random.default_rng(4).integers(0, 5, 3000)
    with caplog.at_level(logging.WARNING):
        calibration = fit(probs, y)
    assert calibration.temperature > 19 and "is at its limit" in caplog.text


def test_a_validation_split_predicted_all_right_keeps_the_raw_softmax(caplog):
    """Separable validation (the demo's 13 documents): no finite temperature minimises the NLL,
    and the limit would serve probability 1 everywhere; T stays 1, saying why."""
    probs, _ = synthetic(40, 4, seed=5)
    with caplog.at_level(logging.INFO):
        calibration = fit(probs, probs.argmax(axis=1))
    assert calibration.temperature == 1.0 and "no temperature can be fitted" in caplog.text
    # said, not warned: a model right on all of validation is healthy (issue 60, rough edges)
    assert [r.levelno for r in caplog.records if "no temperature" in r.message] == [logging.INFO]
    assert np.allclose(calibration.apply(probs), probs)
