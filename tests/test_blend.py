"""The blend of the fine-tune and the baseline (issue 59, serve.blend): the saved baseline answers
as the fitted one, the export serves the blend only where it scores better on validation, and a
blended model answers the same text the same way through every path. Plumbing on the tiny random
BERT (a weak model the demo's baseline beats: the blend is served), and the weight's rule on
numbers made for it."""
import importlib
import importlib.metadata
import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from conftest import BBC, run_baseline, run_evaluate, run_train, write_params
from test_serving import requirement_pins, third_party_imports
from textclf.config import BaselineParams
from textclf.evaluate.baseline import fit_baseline
from textclf.errors import UserError
from textclf.evaluate.blend import fit_blend
from textclf.inference.blend import BlendPredictor
from textclf.inference.loading import load_predictor
from textclf.model.linear_text import SAME, LinearText, save_linear

TEXTS = ["Shares fell sharply after the quarterly results.", "The striker scored twice in the final.",
         "A new phone with a faster chip.", "", "   ", "Parliament votes on the budget today."]
ANSWERED = [t for t in TEXTS if t.strip()]  # a served model refuses an empty text


@pytest.mark.parametrize("hashed", [False, True])
def test_a_saved_baseline_answers_as_the_fitted_one(tmp_path, hashed):
    """No pickle: vocabulary or hash size, idf and weights as JSON and safetensors, read back
    into scikit-learn's vectorizers; two classes (one sigmoid) and several."""
    texts = [f"{w} market shares {i}" for i, w in enumerate(["stock", "bond"] * 10)] + \
            [f"{w} match goal {i}" for i, w in enumerate(["football", "tennis"] * 10)] + \
            [f"{w} chip phone {i}" for i, w in enumerate(["laptop", "tablet"] * 10)]
    for y in (np.repeat(["business", "sport", "tech"], 20), np.repeat(["business", "rest"], [20, 40])):
        model = fit_baseline(texts, y, BaselineParams(), hashed=hashed)
        save_linear(model, tmp_path / "b", texts[:5])
        loaded = LinearText(tmp_path / "b")
        assert loaded.classes == [str(c) for c in model.classes_]
        assert np.abs(loaded.predict_proba(TEXTS) - model.predict_proba(TEXTS)).max() < SAME  # float32 hashed features


def test_the_weight_is_chosen_on_validation_and_never_serves_the_model_alone_as_a_blend():
    y = np.array([0, 1, 2, 0, 1, 2])
    right = np.eye(3)[y] * 0.8 + 0.2 / 3
    wrong = np.eye(3)[(y + 1) % 3] * 0.8 + 0.2 / 3
    alone = fit_blend(right, wrong, y)  # the model is right everywhere: no blend
    assert (alone["served"], alone["weight"], "calibration" in alone) == (False, 1.0, False)
    half = right.copy()
    half[:3] = wrong[:3]  # the model wrong on three, the baseline right on those
    base = right.copy()
    base[3:] = wrong[3:] * 0.6 + right[3:] * 0.4
    found = fit_blend(half, base, y)
    assert found["served"] and found["weight"] < 1.0 and "calibration" in found
    assert found["validation"]["blend"]["macro_f1"] > found["validation"]["model"]["macro_f1"]


@pytest.mark.parametrize("fmt", ["onnx", "torch"])
def test_a_blended_export_answers_one_way_through_every_path(prepared, fmt):
    """The tiny random BERT is weaker than the demo's baseline: export serves the blend, with
    the baseline's files under its checksums (and, where PyTorch serves, a copy of the model);
    evaluate's test predictions, the folder, the logged pyfunc and the registered model give
    the same numbers; metrics carry the blend's paired verdict; serve.blend: off serves the
    model alone."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", serve={"format": fmt, "blend": "auto"})  # the fixture's: off
    run_train(p)
    run_baseline(p)
    run_evaluate(p)
    meta = json.loads((tmp / "export" / "export.json").read_text())
    assert meta["check"]["blend"]["served"] and 0 < meta["blend"]["weight"] < 1
    listed = json.loads((tmp / "export" / "checksums.json").read_text())["files"]
    assert {"baseline.json", "baseline.safetensors"} <= set(listed)
    assert ("model/model.safetensors" in listed) == (fmt == "torch")  # what PyTorch serves the blend with
    metrics = json.loads((tmp / "metrics.json").read_text())
    assert metrics["blend"]["weight"] == meta["blend"]["weight"] and "verdict" in metrics["blend"]["comparison"]
    folder = load_predictor("export")
    assert isinstance(folder, BlendPredictor)
    predictions = pd.read_parquet(tmp / "pred.parquet")
    texts = pd.read_parquet(tmp / "c.parquet").set_index("doc_id").loc[predictions["doc_id"], "text"].tolist()
    cols = [c for c in predictions.columns if c.startswith("prob_")]
    np.testing.assert_allclose(folder.predict(texts)[cols].to_numpy(), predictions[cols].to_numpy(), atol=1e-6)
    right = metrics["comparison"]["model_only"] + metrics["comparison"]["both_right"]  # the trained model's, beside
    assert predictions["model_correct"].sum() == right == round(metrics["accuracy"] * len(predictions))  # the served
    logged = mlflow.pyfunc.load_model(metrics["serving"]["model_uri"]).predict(pd.DataFrame({"text": ANSWERED}))
    pd.testing.assert_frame_equal(logged, folder.predict(ANSWERED))
    registered = load_predictor(f"models:/textclf/{metrics['registry']['version']}")
    pd.testing.assert_frame_equal(registered.predict(ANSWERED), folder.predict(ANSWERED))
    pins = {n.lower() for n in requirement_pins(metrics["serving"]["model_uri"], tmp / "pins")}
    owners = importlib.metadata.packages_distributions()  # what the blend's own modules import is pinned
    for module in ("textclf.inference.blend", "textclf.model.linear_text"):
        for name in third_party_imports(importlib.import_module(module)):
            assert {d.lower() for d in owners[name]} & pins, (module, name, pins)

    write_params(tmp / "params.yaml", serve={"blend": "off"})
    run_evaluate(p, metrics="off.json")
    assert "blend" not in json.loads((tmp / "export" / "export.json").read_text())
    assert "blend" not in json.loads((tmp / "off.json").read_text())
    if fmt == "onnx":
        assert not isinstance(load_predictor("export"), BlendPredictor)
    else:  # the model alone serves from models/model: the export folder says so
        assert not (tmp / "export" / "model").exists()
        with pytest.raises(UserError, match="the PyTorch model serves"):
            load_predictor("export")


@pytest.mark.slow
@pytest.mark.skipif(not BBC.is_dir(), reason="the BBC corpus is not on this machine")
def test_the_bbc_baseline_saves_what_it_scored(tmp_path):
    """At BBC's scale, the saved vocabulary (tens of thousands of n-grams) answers as fitted."""
    texts, y = [], []
    for folder in sorted(p for p in BBC.iterdir() if p.is_dir()):
        for path in sorted(folder.glob("*.txt"))[:60]:
            texts.append(path.read_text(errors="replace"))
            y.append(folder.name)
    model = fit_baseline(texts, np.asarray(y), BaselineParams())
    save_linear(model, tmp_path / "b", texts[:64])
    assert np.abs(LinearText(tmp_path / "b").predict_proba(texts) - model.predict_proba(texts)).max() < 1e-9
