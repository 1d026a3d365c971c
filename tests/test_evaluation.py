"""The numpy metrics equal scikit-learn's (zero_division=0), missing classes included."""
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

from textclf import evaluation
from textclf.evaluation import classification_scores


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
