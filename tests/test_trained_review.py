"""The training run's logged model answers with params.yaml's serve.* (issue 60, defect 3):
served from reports/mlflow_run.json's `model_uri` it answered with the library's defaults, and
logging it printed the "records no review" warning twice (once to log it, once when MLflow
loaded it to check the input example)."""
from __future__ import annotations

import json
import logging

from conftest import run_train, write_params
from textclf.config import ServeParams
from textclf.inference.loading import load_predictor


def test_the_training_runs_model_answers_with_the_params_review(prepared, caplog):
    folder, p = prepared
    review = {"coverage": 0.8, "review_below": 0.7}
    assert review != {"coverage": ServeParams.coverage, "review_below": ServeParams.review_below}
    write_params(folder / "params.yaml", serve=review, train={"epochs": 1})
    with caplog.at_level(logging.WARNING):
        run_train(p)
    assert "records no review" not in caplog.text
    uri = json.loads((folder / "run.json").read_text())["model_uri"]
    assert load_predictor(uri).review.to_config() == review
