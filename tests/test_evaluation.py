"""The numpy metrics equal scikit-learn's (zero_division=0), missing classes included; per-class
metric names stay one-to-one in MLflow."""
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

from mlflow.tracking import MlflowClient

from textclf.evaluate import metrics as evaluation
from textclf.evaluate.metrics import classification_scores, metric_names, mlflow_metrics
from textclf.tracking.runs import add_to_run


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = 4
    y_true = rng.integers(0, n - 1, size=50)   # class 3 never occurs...
    y_pred = rng.integers(0, n, size=50)       # ...but may be predicted
    y_pred[:5] = 0                             # and class 0 is over-predicted
    labels = ["a", "b", "c", "d"]
    ours = evaluation.test_metrics(y_true, y_pred, labels)
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=range(n), zero_division=0)
    for i, label in enumerate(labels):
        assert ours["per_class"][label] == pytest.approx(
            {"precision": p[i], "recall": r[i], "f1": f[i], "support": s[i]})
    matrix = confusion_matrix(y_true, y_pred, labels=range(n))
    assert [[ours["confusion"][a][b] for b in labels] for a in labels] == matrix.tolist()
    assert ours["accuracy"] == pytest.approx(accuracy_score(y_true, y_pred))
    assert ours["macro_f1"] == pytest.approx(f1_score(y_true, y_pred, average="macro", zero_division=0))


def test_scores_on_string_labels_use_the_classes_seen():
    y_true, y_pred = ["x", "y", "y", "z"], ["x", "y", "x", "x"]
    assert classification_scores(y_true, y_pred) == pytest.approx(
        {"accuracy": accuracy_score(y_true, y_pred),
         "macro_f1": f1_score(y_true, y_pred, average="macro", zero_division=0)})


def test_metric_names_are_one_to_one_and_readable():
    names = metric_names(["C++", "C__", "C--", "Ünïcode", "Ųnïcode", "a b", "business"])
    assert names["C__"] == "C__" and names["C--"] == "C--" and names["a b"] == "a b"
    assert names["C++"].startswith("C__-") and names["Ünïcode"].startswith("_n_code-")
    assert len(set(names.values())) == 7  # C++ / C__ and the accent-only pair stay apart
    assert metric_names(["C++"]) == {"C++": names["C++"]}  # the same name in every run
    literal = metric_names(["C++", names["C++"]])  # a class literally named like C++'s metric name
    assert len(set(literal.values())) == 2


def test_colliding_classes_reach_mlflow_as_distinct_metrics_with_the_mapping(tmp_path):
    """Four classes that sanitise alike in pairs: four per-class F1 metrics in a real MLflow
    run, and class_names.json says which is which."""
    labels = ["C++", "C__", "Ünïcode", "Ųnïcode"]
    metrics = {**evaluation.test_metrics(np.array([0, 1, 2, 3]), np.array([0, 1, 2, 2]), labels),
               "ece": 0.1, "baseline": {"accuracy": 0.5, "macro_f1": 0.5},
               "gap": {"accuracy": 0.25, "macro_f1": 0.2}}
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    run_id = client.create_run(client.create_experiment("x", artifact_location=str(tmp_path / "a"))).info.run_id
    run = {"run_id": run_id, "tracking_uri": f"sqlite:///{tmp_path / 'm.db'}"}
    add_to_run(run, metrics=mlflow_metrics(metrics), dicts={"class_names.json": metric_names(labels)})
    logged = {k for k in client.get_run(run_id).data.metrics if k.startswith("test_f1.")}
    assert len(logged) == 4
    mapping = json.loads(Path(client.download_artifacts(run_id, "class_names.json", str(tmp_path))).read_text())
    assert {f"test_f1.{mapping[c]}" for c in labels} == logged
    assert client.get_run(run_id).data.metrics[f"test_f1.{mapping['Ųnïcode']}"] == 0.0  # never predicted
