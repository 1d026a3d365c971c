"""Several labels per document after ingest (issue 33 part 3): multi-hot targets and binary
cross-entropy for every head, a threshold per label tuned on validation, the multi-label
metrics, the one-vs-rest baseline beside, the collapse guard over label sets, and the served
model (PyTorch, ONNX, the MLflow pyfunc and the CLI) answering label lists.

`tiny_multilabel` trains the TINY RANDOM BERT (plumbing: wiring and shapes, not accuracy) on
a multi-label table built from the demo corpus (conftest.write_multilabel_table)."""
import io
import json
import shutil

import mlflow
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score, hamming_loss

from textclf import predict
from textclf.errors import UserError
from textclf.config import parse_section
from textclf.evaluate.champion import judge
from textclf.data.labelsets import TASK_KEY, hot
from textclf.evaluate.multilabel import best_threshold, multilabel_scores, set_scores, tune_thresholds
from textclf.evaluate.metrics_file import read_metrics
from textclf.inference.onnx_predictor import OnnxPredictor
from textclf.inference.predictor import Predictor
from textclf.inference.proba import predict_proba
from textclf.model.checksums import write_checksums
from textclf.model.batching import read_token_splits
from textclf.model.modeling import pad_id
from textclf.train.guards import collapse_message, multilabel_checks
from textclf.train.loop import multilabel_loss

from test_data_versions import train_and_evaluate

from conftest import (copy_prepared, copy_repo, dvc, ingest_tokenize_split, run_baseline, run_evaluate, run_report,
                      run_train, shared_once, write_multilabel_table, write_params)

LABELS = ["business", "entertainment", "politics", "sport", "tech"]


def prepare_multilabel(folder, model_dir) -> list[str]:
    table = write_multilabel_table(folder / "table.jsonl")
    params = write_params(folder / "params.yaml", ingest={"source": str(table), "task": "multilabel"},
                          tokenize={"max_length": 64}, model={"name": str(model_dir)},
                          # unweighted, a random head: the guards' tests read this fixture's collapse
                          # (the empty set at 0.5), which auto's positive weights (issue 60) and
                          # LP-FT's probe head (issue 59) would train away
                          train={"epochs": 3, "batch_size": 8, "lr_encoder": 1e-3, "lr_head": 1e-2,
                                 "class_weights": "none", "head_init": "random"},
                          serve={"format": "onnx"})
    return ingest_tokenize_split(params)


@pytest.fixture(scope="session")
def tiny_multilabel(tmp_path_factory, tiny_random_bert):
    """READ-ONLY: the demo corpus as a multi-label table, ingested, tokenized, split, trained
    (3 epochs), baseline, exported (ONNX float32), evaluated and reported -> (folder, run.json)."""
    def build(folder):
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
            monkeypatch.chdir(folder)
            p = prepare_multilabel(folder, tiny_random_bert)
            run_train(p)
            run_baseline(p)
            run_evaluate(p)
            run_report(p)
    folder = shared_once(tmp_path_factory, "tiny-multilabel", build)
    return folder, json.loads((folder / "run.json").read_text())


def validation_truth_and_probs(folder):
    splits, labels = read_token_splits(str(folder / "t.parquet"), str(folder / "sp.parquet"), names=("validation",))
    val = splits["validation"]
    predictor = Predictor(folder / "model")
    probs = predict_proba(predictor.model, val.input_ids, 16, pad_id(predictor.tokenizer), torch.device("cpu"),
                          multilabel=True)  # (N, C)
    return np.asarray(val.labels, dtype=bool), probs, labels


def test_the_token_store_carries_the_task_and_training_reads_multi_hot_rows(tiny_multilabel):
    folder, _ = tiny_multilabel
    assert pq.read_schema(folder / "t.parquet").metadata[TASK_KEY] == b"multilabel"
    splits, labels = read_token_splits(str(folder / "t.parquet"), str(folder / "sp.parquet"))
    assert labels == LABELS  # labels, not label sets
    corpus = pd.read_parquet(folder / "c.parquet").set_index("doc_id")["label"]
    train = splits["train"]
    assert train.multilabel and np.array_equal(np.asarray(train.labels, dtype=bool),
                                               hot(corpus.loc[train.doc_ids].to_numpy(), labels))
    assert {sum(row) for row in train.labels} == {1.0, 2.0}  # singles and pairs


def test_thresholds_are_tuned_on_validation_and_saved_with_the_model(tiny_multilabel):
    folder, run = tiny_multilabel
    config = json.loads((folder / "model" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    saved = json.loads((folder / "model" / "thresholds.json").read_text())
    y, probs, labels = validation_truth_and_probs(folder)
    assert saved == pytest.approx(dict(zip(labels, tune_thresholds(y, probs).tolist())), abs=1e-5)
    mlflow.set_tracking_uri(run["tracking_uri"])  # the fixture's store, whichever test built it (restored by conftest)
    logged = mlflow.artifacts.load_dict(f"runs:/{run['run_id']}/thresholds.json")
    assert logged["thresholds"] == saved


def test_best_threshold_maximises_the_labels_f1():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.random(40) < 0.3
        p = np.clip(y * 0.3 + rng.random(40) * 0.7, 0, 1)
        t = best_threshold(y, p)
        every = np.append(p, 1.1)  # any cut gives the same decisions as one at a probability, or none
        best = max(f1_score(y, p >= g, zero_division=0) for g in every)
        assert f1_score(y, p >= t, zero_division=0) == pytest.approx(best)
    assert best_threshold(np.zeros(5, bool), np.linspace(0, 1, 5)) == 0.5  # nothing to tune on


def test_multilabel_scores_are_scikit_learns():
    rng = np.random.default_rng(1)
    y, pred = rng.random((50, 4)) < 0.4, rng.random((50, 4)) < 0.4
    scores = multilabel_scores(y, pred)
    assert scores["accuracy"] == pytest.approx(accuracy_score(y, pred))  # subset accuracy
    assert scores["micro_f1"] == pytest.approx(f1_score(y, pred, average="micro", zero_division=0))
    assert scores["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro", zero_division=0))
    assert scores["hamming_loss"] == pytest.approx(hamming_loss(y, pred))


def test_the_multilabel_loss_is_bce_per_label_and_padding_counts_nothing():
    logits = torch.randn(3, 4)
    targets = torch.tensor([[1.0, 0, 0, 1], [0, 1, 0, 0], [-100.0] * 4])  # the last row: padding
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[:2], targets[:2]) * 2  # mean, x docs
    assert multilabel_loss(logits, targets, None).item() == pytest.approx(expected.item(), rel=1e-6)
    weight = torch.tensor([3.0, 1.0, 1.0, 1.0])
    weighted = torch.nn.functional.binary_cross_entropy_with_logits(logits[:2], targets[:2], pos_weight=weight) * 2
    assert multilabel_loss(logits, targets, None, weight).item() == pytest.approx(weighted.item(), rel=1e-6)


def test_the_collapse_guard_sees_one_label_set_everywhere_and_silent_class_a_label_never_given():
    y = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]] * 5, dtype=bool)
    nothing = np.zeros_like(y)
    stats, recalls = multilabel_checks(nothing, y, ["a", "b", "c"], 0.9)
    assert stats["collapsed"] and stats["top_class"] == "[]" and stats["top_share"] == 1.0
    assert "Several labels per document" in collapse_message(stats) and "train.epochs" in collapse_message(stats)
    fine = y.copy()
    fine[:, 2] = False  # label c never given
    stats, recalls = multilabel_checks(fine, y, ["a", "b", "c"], 0.9)
    assert not stats["collapsed"]
    assert recalls["recall"] == [1.0, 1.0, 0.0] and recalls["predicted"][2] == 0


def test_evaluate_scores_label_sets_against_the_one_vs_rest_baseline(tiny_multilabel):
    folder, _ = tiny_multilabel
    metrics = read_metrics(folder / "metrics.json", folder / "pc.json")
    pred = pd.read_parquet(folder / "pred.parquet")
    assert metrics["task"] == "multilabel" and set(metrics["per_class"]) == set(LABELS)
    assert metrics["accuracy"] == pytest.approx(pred["correct"].mean())  # subset accuracy
    y, p = hot(pred["label"].to_numpy(), LABELS), hot(pred["predicted"].to_numpy(), LABELS)
    assert metrics["micro_f1"] == pytest.approx(f1_score(y, p, average="micro", zero_division=0))
    assert metrics["hamming_loss"] == pytest.approx(hamming_loss(y, p))
    thresholds = np.array([metrics["thresholds"][label] for label in LABELS])
    assert np.array_equal(p, pred[[f"prob_{label}" for label in LABELS]].to_numpy() >= thresholds)
    baseline = json.loads((folder / "b.json").read_text())
    assert {"micro_f1", "hamming_loss", "thresholds"} <= set(baseline)
    base = pd.read_parquet(folder / "bp.parquet").set_index("doc_id").loc[pred["doc_id"]]
    cmp = metrics["comparison"]  # paired on exact match, document by document
    model_right, base_right = pred["correct"].to_numpy(), (base["predicted"] == base["label"]).to_numpy()
    assert cmp["model_only"] == int((model_right & ~base_right).sum())
    assert cmp["baseline_only"] == int((~model_right & base_right).sum())
    assert metrics["serving"]["format"] == "onnx" and metrics["serving"]["agreement"] == 1.0


def test_the_report_says_what_multilabel_scores_mean(tiny_multilabel):
    report = (tiny_multilabel[0] / "report.md").read_text()
    metrics = json.loads((tiny_multilabel[0] / "metrics.json").read_text())
    assert "Several labels per document: accuracy is subset accuracy" in report
    assert f"micro-F1 **{metrics['micro_f1']:.4f}**, Hamming loss **{metrics['hamming_loss']:.4f}**" in report
    assert "| label | documents | model recall | baseline recall |" in report


def test_every_served_form_answers_label_lists_with_a_probability_per_label(tiny_multilabel, capsys):
    folder, run = tiny_multilabel
    mlflow.set_tracking_uri(run["tracking_uri"])  # the fixture's store, whichever test built it (restored by conftest)
    texts = ["The minister said the budget vote was close.", "The striker scored twice in the final."]
    torch_frame = Predictor(folder / "model").predict(texts)
    onnx_frame = OnnxPredictor(folder / "export").predict(texts)
    metrics = json.loads((folder / "metrics.json").read_text())
    served = mlflow.pyfunc.load_model(metrics["serving"]["model_uri"]).predict(pd.DataFrame({"text": texts}))
    columns = ["labels", "label", "probability"] + [f"prob_{label}" for label in LABELS]
    assert list(served.columns) == columns + ["needs_review"]  # served with serve.review_below
    for frame in (torch_frame, onnx_frame, served):
        assert list(frame.columns[:len(columns)]) == columns
        assert all(isinstance(labels, (list, np.ndarray)) for labels in frame["labels"])
        assert frame["label"].tolist() == [json.dumps(sorted(labels)) for labels in frame["labels"]]
    assert onnx_frame["label"].tolist() == torch_frame["label"].tolist() == served["label"].tolist()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(("\n".join(texts) + "\n").encode())))
        predict.main([str(folder / "export")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in lines] == onnx_frame["label"].tolist()


def test_a_multilabel_model_folder_without_thresholds_is_refused(tiny_multilabel, tmp_path):
    folder, _ = tiny_multilabel
    shutil.copytree(folder / "model", tmp_path / "model")
    (tmp_path / "model" / "thresholds.json").unlink()
    write_checksums(tmp_path / "model")  # a folder saved so, not one damaged since
    with pytest.raises(UserError, match="multi-label model but no thresholds.json"):
        Predictor(tmp_path / "model")


def test_class_weights_balanced_weights_each_labels_positives(tiny_multilabel, tmp_path, monkeypatch):
    folder, _ = tiny_multilabel
    p = copy_prepared(folder, tmp_path, monkeypatch)
    write_params(tmp_path / "params.yaml", train={"epochs": 1, "class_weights": "balanced"})
    run_train(p)
    run_id = json.loads((tmp_path / "run.json").read_text())["run_id"]
    logged = mlflow.artifacts.load_dict(f"runs:/{run_id}/class_weights.json")["classes"]
    splits, labels = read_token_splits("t.parquet", "sp.parquet", names=("train",))
    y = np.asarray(splits["train"].labels)
    for i, label in enumerate(labels):
        positives = y[:, i].sum()
        assert logged[label]["training_documents"] == positives
        assert logged[label]["weight"] == pytest.approx((len(y) - positives) / positives, abs=1e-6)


@pytest.mark.slow
def test_a_multilabel_table_through_dvc_repro(tmp_path):
    """The real pipeline (`dvc repro`, the packaged MiniLM) on a multi-label table: every stage
    reads label sets, the model folder holds its thresholds, the report says what its scores
    mean, and the served model (the registered ONNX pyfunc) answers label lists."""
    repo = copy_repo(tmp_path / "repo")
    table = write_multilabel_table(tmp_path / "table.jsonl")
    write_params(repo / "params.yaml", ingest={"source": str(table), "task": "multilabel"},
                 tokenize={"max_length": 64}, train={"epochs": 4})
    dvc(repo, "repro")
    metrics = read_metrics(repo / "reports" / "metrics.json", repo / "reports" / "per_class.json")
    assert metrics["task"] == "multilabel" and set(metrics["per_class"]) == set(LABELS)
    thresholds = json.loads((repo / "models" / "model" / "thresholds.json").read_text())
    assert set(thresholds) == set(LABELS) and metrics["thresholds"] == thresholds
    assert json.loads((repo / "data" / "processed" / "split_counts.json").read_text())["task"] == "multilabel"
    assert "Several labels per document: accuracy is subset accuracy" in (repo / "reports" / "report.md").read_text()
    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")  # the copy's store (restored by conftest)
    served = mlflow.pyfunc.load_model(metrics["serving"]["model_uri"])
    frame = served.predict(pd.DataFrame({"text": ["Shares fell as the bank cut its forecast."]}))
    assert list(frame.columns[:3]) == ["labels", "label", "probability"]
    assert frame["label"][0] == json.dumps(sorted(frame["labels"][0]))
    # an ONNX pyfunc: int8, or float32 where int8's answer depends on its batch (evaluate's check)
    assert metrics["serving"]["format"] in ("onnx-int8", "onnx")
    assert metrics["confidence_format"] == metrics["serving"]["format"]


def test_the_gate_scores_label_sets_as_label_sets():
    truth = ['["a", "b"]', '["a"]', '["b"]', '["c"]']
    mine, theirs = ['["a", "b"]', '["a"]', '["a"]', '["c"]'], ['["a"]', '["a"]', '["b"]', '["b"]']
    result = judge(truth, mine, theirs, "not_worse", parse_section("evaluate", {}), multilabel=True)
    assert result["challenger"] == set_scores(truth, mine) and result["champion"] == set_scores(truth, theirs)
    assert result["challenger"]["macro_f1"] == pytest.approx(f1_score(
        hot(truth, ["a", "b", "c"]), hot(mine, ["a", "b", "c"]), average="macro", zero_division=0))


def test_a_champion_of_the_other_task_is_not_scored_and_stays(prepared, tiny_multilabel, monkeypatch, caplog):
    """A single-label champion; a multi-label model registered after it (every guard passed,
    so only the gate decides) cannot be scored like it on label sets: the champion stays, saying why."""
    tmp, p = prepared  # the demo corpus, single-label, tiny BERT; MLflow in tmp
    assert train_and_evaluate(p, tmp)["registry"]["promoted"]
    champion = mlflow.MlflowClient().get_model_version_by_alias("textclf", "champion").version
    copy_prepared(tiny_multilabel[0], tmp, monkeypatch)  # the multi-label data, the same store
    train_and_evaluate(p, tmp)
    assert mlflow.MlflowClient().get_model_version_by_alias("textclf", "champion").version == champion
    assert "answers one class per document, this model label sets" in caplog.text


def test_a_scored_table_gets_a_labels_column(tiny_multilabel, tmp_path):
    folder, _ = tiny_multilabel
    pd.DataFrame({"text": ["The film won an award.", "", "Rates rose again."]}).to_csv(tmp_path / "in.csv", index=False)
    predict.main([str(folder / "export"), "--table", str(tmp_path / "in.csv"), "--out", str(tmp_path / "out.parquet")])
    out = pd.read_parquet(tmp_path / "out.parquet")
    assert out["skip_reason"].fillna("").tolist() == ["", "empty_text", ""]
    scored = out.dropna(subset=["label"])
    assert [json.dumps(sorted(labels)) for labels in scored["labels"]] == scored["label"].tolist()
    assert out["labels"][1] is None


def test_padding_a_multi_hot_batch_masks_the_whole_row():
    """Several processes pad a short global batch with one entry of weight 0 (RankShard): for
    multi-hot targets that entry is a row of PAD_LABEL, which the loss and the count skip."""
    from textclf.model.batching import PAD_LABEL, Collator, Padding, TokenDataset

    data = TokenDataset([[101, 5, 102], [101, 102]], [[1.0, 0.0], [0.0, 1.0]])
    batch = Collator(0)([data[0], data[Padding(1)]])
    assert batch["labels"].dtype == torch.float32 and batch["labels"][1].tolist() == [PAD_LABEL, PAD_LABEL]
    logits = torch.zeros(2, 2)
    assert multilabel_loss(logits, batch["labels"], None).item() == pytest.approx(
        torch.nn.functional.binary_cross_entropy_with_logits(logits[:1], batch["labels"][:1]).item())


def test_the_collapse_guard_judges_what_the_curve_records(tiny_multilabel):
    """Each epoch is watched at probability 0.5; the kept epoch's curve row says collapsed (the
    empty set for every document), so the guard says collapsed too, whatever the tuned
    thresholds make of it (said beside): the report's curve and guard table showed `collapsed 1`
    and `collapse: pass`. silent_class judges at 0.5 too, one rule: it passed this model,
    judging at the tuned thresholds (issue 60, item 9)."""
    folder, _ = tiny_multilabel
    curve = pd.read_csv(folder / "curve.csv")
    guards = json.loads((folder / "guards.json").read_text())
    kept = guards["collapse"]["epoch"]
    assert curve.loc[curve["epoch"] == kept, "collapsed"].item() == 1  # at 0.5: no label for any document
    y, probs, labels = validation_truth_and_probs(folder)
    thresholds = json.loads((folder / "model" / "thresholds.json").read_text())
    given = probs >= np.array([thresholds[label] for label in labels])
    assert given.any(axis=1).mean() > 0.5  # at the tuned thresholds most documents get a label
    assert guards["collapse"]["status"] == "collapsed", guards["collapse"]["message"]
    assert "label set '[]'" in guards["collapse"]["message"]
    assert "At the per-label thresholds tuned on validation its top label set" in guards["collapse"]["message"]
    assert guards["silent_class"]["status"] == "warn", guards["silent_class"]["message"]


def test_a_chunked_multilabel_corpus_scores_documents_not_windows(tmp_path, tiny_random_bert, monkeypatch):
    """Multi-label with `tokenize.truncation: chunks` (issue 42 part 3, BBC's joined articles read
    whole): every window trains on its document's label set, and evaluate, the baseline beside it
    and the served ONNX model all score one label set per test document. TINY RANDOM BERT."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    table = write_multilabel_table(tmp_path / "table.jsonl")
    params = write_params(tmp_path / "params.yaml", ingest={"source": str(table), "task": "multilabel"},
                          tokenize={"max_length": 24, "truncation": "chunks", "stride": 8},
                          model={"name": str(tiny_random_bert)},
                          train={"epochs": 1, "batch_size": 8, "lr_encoder": 1e-3, "lr_head": 1e-2},
                          serve={"format": "onnx"})
    p = ingest_tokenize_split(params)
    splits, _ = read_token_splits("t.parquet", "sp.parquet")
    assert len(splits["train"].input_ids) > len(set(splits["train"].doc_ids))  # several windows a document
    assert all(sum(row) >= 1 for row in splits["train"].labels)  # multi-hot on every window
    run_train(p)
    run_baseline(p)
    run_evaluate(p)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    pred = pd.read_parquet(tmp_path / "pred.parquet")
    test_docs = pd.read_parquet("sp.parquet").query("split == 'test'")["doc_id"]
    assert metrics["task"] == "multilabel" and metrics["n_test"] == len(test_docs) == len(pred)
    assert sorted(pred["doc_id"]) == sorted(test_docs)
    assert set(test_docs) <= set(pd.read_parquet("bp.parquet")["doc_id"])  # the baseline: per document too
    assert metrics["serving"]["format"] == "onnx" and metrics["serving"]["agreement"] == 1.0
