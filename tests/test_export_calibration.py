"""Each exported format carries its own calibration, fitted at the export stage on the
validation split scored through that format's predictor, and evaluate's confidence figures
are the served format's (docs/calibration.md). The encoder is the tiny RANDOM BERT: what is
checked is where the numbers come from, not how good they are."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from stages import evaluate, export
from textclf.evaluate.champion import read_texts
from textclf.evaluate.conformal_report import review_curve, review_metrics, set_metrics
from textclf.export.check import calibrator, own_calibrations
from textclf.evaluate.metrics_file import with_per_class
from textclf.inference.frames import PROB_PREFIX, SAME_ANSWER_ATOL, judged_frame
from textclf.inference.loading import load_predictor
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor
from textclf.model.batching import read_token_splits
from textclf.model.calibration import CALIBRATION_FILE, from_dict, review_for
from textclf.model.checksums import write_checksums
from textclf.model.export import export_float, export_model, format_folder
from textclf.model.modeling import load_classifier
from textclf.model.temperature import fit
from textclf.report.confidence import confidence_section
from textclf.report.document import to_markdown

from conftest import copy_repo, dvc, run_baseline, run_train, write_params


def split_of(tokens, splits, name: str, labels: list[str]):
    return read_token_splits(str(tokens), str(splits), labels, names=(name,))[0][name]


def own_fit(export_dir, fmt: str, validation, tmp_path) -> dict:
    """The calibration train's fit gives on `fmt`'s own validation probabilities."""
    probs = OnnxPredictor(format_folder(export_dir, fmt, tmp_path / f"own-{fmt}")).proba_of_ids(
        validation.input_ids, validation.owner)
    return fit(probs, np.asarray(validation.labels)).to_dict()


def test_an_int8_export_carries_each_formats_own_calibration(tiny_trained, tmp_path):
    """int8's calibration is the fit on int8's validation probabilities, not the PyTorch model's;
    the float32 fallback has its own; a format folder (what evaluate checks and logs) carries
    the one of its format, and its predictor applies it."""
    folder, _ = tiny_trained
    meta = export_model(folder / "model", tmp_path / "export", "onnx-int8",
                        calibrate=calibrator(str(folder / "t.parquet"), str(folder / "sp.parquet")))
    validation = split_of(folder / "t.parquet", folder / "sp.parquet", "validation", meta["labels"])
    torch_calibration = json.loads((folder / "model" / CALIBRATION_FILE).read_text())
    int8, f32 = own_fit(tmp_path / "export", "onnx-int8", validation, tmp_path), \
        own_fit(tmp_path / "export", "onnx", validation, tmp_path)
    written = json.loads((tmp_path / "export" / "export.json").read_text())
    assert written == meta and written["calibration"] == int8 and written["fallback"]["calibration"] == f32
    assert int8["scores"] != torch_calibration["scores"] and int8["documents"] == len(validation.labels)
    for fmt, own in (("onnx-int8", int8), ("onnx", f32)):
        copy = format_folder(tmp_path / "export", fmt, tmp_path / f"copy-{fmt}")
        assert json.loads((copy / "export.json").read_text())["calibration"] == own
        assert OnnxPredictor(copy).calibration == from_dict(own, fmt)


def test_an_export_without_a_calibration_reads_no_validation(tiny_trained, tmp_path):
    """serve.format torch (nothing exported) asks nothing of the validation split."""
    folder, _ = tiny_trained
    meta = export_model(folder / "model", tmp_path / "export", "torch", calibrate=calibrator("missing.parquet", "missing"))
    assert meta == {"format": "torch"}


# The pipeline's paths, and the names the stages write where a test runs them by hand (conftest)
PIPELINE = {"export": "models/export", "tokens": "data/processed/tokens.parquet",
            "splits": "data/processed/splits.parquet", "metrics": "reports/metrics.json",
            "per_class": "reports/per_class.json", "predictions": "data/processed/test_predictions.parquet",
            "curve": "reports/review_curve.csv"}
BY_HAND = {"export": "export", "tokens": "t.parquet", "splits": "sp.parquet", "metrics": "metrics.json",
           "per_class": "pc.json", "predictions": "pred.parquet", "curve": "review_curve.csv"}


def served_frame(root, files: dict, metrics: dict):
    """The served format's test probabilities, scored through its own predictor with its own
    calibration -> (its judged frame as served, the predictor)."""
    fmt = metrics["serving"]["format"]
    assert fmt != "torch", "the tiny model's float32 export agrees with PyTorch: an export is served"
    served = OnnxPredictor(format_folder(root / files["export"], fmt, root.parent / f"served-{fmt}"))
    test = split_of(root / files["tokens"], root / files["splits"], "test", served.labels)
    calibrated = served.calibration.apply(served.proba_of_ids(test.input_ids, test.owner))
    review = review_for(served.calibration, metrics["sets"]["coverage_target"], metrics["review"]["review_below"], fmt)
    return judged_frame(test.doc_ids, np.asarray(test.labels), calibrated, served.labels, None, review), served


def assert_figures_are_the_served_formats(root, files: dict = PIPELINE) -> tuple[dict, pd.DataFrame]:
    """metrics.json, the test predictions and the review curve against the served format's own
    numbers -> (metrics, predictions)."""
    metrics = with_per_class(*(json.loads((root / files[name]).read_text()) for name in ("metrics", "per_class")))
    assert metrics["confidence_format"] == metrics["serving"]["format"]
    frame, served = served_frame(root, files, metrics)
    predictions = pd.read_parquet(root / files["predictions"])
    cols = [PROB_PREFIX + c for c in served.labels]
    assert np.abs(predictions[cols].to_numpy() - frame[cols].to_numpy()).max() <= 1e-7
    assert predictions["needs_review"].tolist() == frame["needs_review"].tolist()
    assert [list(s) for s in predictions["labels"]] == [list(s) for s in frame["labels"]]
    assert metrics["temperature"] == served.calibration.temperature
    assert metrics["sets"] == set_metrics(frame, served.labels, metrics["sets"]["coverage_target"])
    assert metrics["review"] == review_metrics(frame, metrics["review"]["review_below"])
    pd.testing.assert_frame_equal(pd.read_csv(root / files["curve"]), review_curve(frame), atol=1e-6)
    shown = to_markdown(confidence_section(metrics, predictions))
    assert f"Served model: **{metrics['serving']['format']}**. Every figure of this section" in shown
    return metrics, predictions


def test_the_figures_are_the_served_exports_not_pytorchs(prepared):
    """A served float32 export whose logits are PyTorch's times 3 (the same labels, other
    probabilities), calibrated on its own as the export stage does: evaluate's predictions,
    sets, review flag and curve follow it. The same file with another calibration is logged anew."""
    tmp, p = prepared
    write_params(tmp / "params.yaml", serve={"format": "onnx"})
    run_train(p)
    run_baseline(p)
    export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model", "--out", "export"])
    model, labels = load_classifier(tmp / "model")
    with torch.no_grad():  # sharper: every argmax kept, every probability moved
        model.hf.classifier.weight.mul_(3)
        model.hf.classifier.bias.mul_(3)
    export_float(model, tmp / "export" / "model.onnx")
    write_checksums(tmp / "export")  # as the exporter writes them
    own_calibrations(tmp / "export", json.loads((tmp / "export" / "export.json").read_text()),
                     split_of(tmp / "t.parquet", tmp / "sp.parquet", "validation", labels))
    evaluate_args = p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                         "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                         "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", "export",
                         "--data-diff", "diff.json", "--confusion", "conf.csv", "--per-class", "pc.csv",
                         "--predictions", "pred.parquet", "--review-curve", "review_curve.csv"]
    evaluate.main(evaluate_args + ["--metrics", "metrics.json", "--per-class-json", "pc.json"])
    metrics, predictions = assert_figures_are_the_served_formats(tmp, BY_HAND)
    assert (metrics["serving"]["format"], metrics["serving"]["agreement"]) == ("onnx", 1.0)
    texts = read_texts(str(tmp / "c.parquet"), predictions["doc_id"].tolist())
    pytorch = Predictor(tmp / "model").predict_proba(texts)  # calibrated, as the PyTorch model serves
    assert np.abs(predictions.filter(like=PROB_PREFIX).to_numpy() - pytorch).max() > 1e-3  # not PyTorch's
    # the same ONNX file with another calibration: a new logged model that carries it
    meta = json.loads((tmp / "export" / "export.json").read_text())
    (tmp / "export" / "export.json").write_text(json.dumps({**meta, "calibration": {**meta["calibration"],
                                                                                     "temperature": 2.5}}))
    write_checksums(tmp / "export")
    evaluate.main(evaluate_args + ["--metrics", "m2.json", "--per-class-json", "pc2.json"])
    again = json.loads((tmp / "m2.json").read_text())["serving"]["model_uri"]
    assert again != metrics["serving"]["model_uri"] and load_predictor(again).calibration.temperature == 2.5


@pytest.mark.slow
def test_dvc_repro_reports_what_is_served_and_refuses_an_answer_by_batch(tmp_path, tiny_random_bert):
    """The pipeline through DVC on the demo corpus with the tiny model: the test predictions,
    sets, review flag and curve are the served format's own. Then an int8 file of ONNX
    Runtime's dynamic quantization (an activation scale per batch: main's int8) put in the
    folder after the export's check is not confirmed on test: evaluate says why and keeps it
    from champion, but serves what the folder holds (issue 61: one answer on every path)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    repo = copy_repo(tmp_path / "repo")
    write_params(repo / "params.yaml", tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)},
                 train={"epochs": 2, "batch_size": 8, "lr_encoder": 1e-3, "lr_head": 1e-3},
                 serve={"format": "onnx-int8", "min_agreement": 0.0})
    dvc(repo, "repro", "evaluate")
    assert_figures_are_the_served_formats(repo)
    export = repo / "models" / "export"
    assert json.loads((export / "export.json").read_text())["format"] == "onnx-int8"
    model, _ = load_classifier(repo / "models" / "model")
    export_float(model, tmp_path / "model.onnx")
    quantize_dynamic(str(tmp_path / "model.onnx"), str(export / "model.int8.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True)
    write_checksums(export)
    dvc(repo, "repro", "--single-item", "evaluate")  # evaluate alone, on the export as it now is
    metrics, _ = assert_figures_are_the_served_formats(repo)
    check = metrics["serving"]["checks"]["onnx-int8"]
    assert metrics["serving"]["format"] == "onnx-int8" and check["batch_differ"] > 0
    assert check["single_calls"] == metrics["n_test"] and check["batch_diff"] > SAME_ANSWER_ATOL
    assert "scored one per call differ from their batched answer" in metrics["serving"]["unconfirmed"]
    assert metrics["guards"]["served_format"] == "fail"
