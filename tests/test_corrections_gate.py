"""The champion gate on corrected labels (issue 40): a corrections file relabels test documents,
the stable split keeps them in test, and the gate scores both models on them by their
corrected labels (the challenger's split table), not the labels the champion was tested on.
Real stages (ingest with --corrections, tokenize, split, train, export, evaluate) and a real
SQLite store; the encoder is the tiny RANDOM BERT from conftest (wiring, not accuracy)."""
import json

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from stages import ingest, split
from stages import tokenize as tokenize_stage
from textclf.evaluate.champion import common_set, read_texts
from textclf.evaluate.metrics import classification_scores
from textclf.inference.loading import load_predictor

from test_data_versions import train_and_evaluate


def ingest_with_corrections(p: list[str], corrections) -> None:
    """The first three stages again, ingest applying `corrections` (into the same files)."""
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json", "--corrections", str(corrections)])
    tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                             "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])


def pick_corrections(test: pd.DataFrame, said: list[str], classes: list[str]) -> dict[str, str]:
    """Two test documents the champion answered alike (both right, else both wrong) -> their
    new labels, chosen so that each moves the champion's error count the same way: a right
    answer relabelled away becomes an error, a wrong one relabelled to its answer becomes right."""
    right = test["label"].to_numpy() == said
    chosen = test[right].head(2) if right.sum() >= 2 else test[~right].head(2)
    assert len(chosen) == 2, "the test split has too few documents to relabel"
    answer = dict(zip(test["source_path"], said))
    return {row.source_path: (next(c for c in classes if c != row.label) if answer[row.source_path] == row.label
                              else answer[row.source_path]) for row in chosen.itertuples()}


@pytest.mark.slow
def test_the_gate_judges_corrected_test_documents_by_their_corrected_labels(prepared):
    tmp, p = prepared  # the demo corpus ingested, tokenized and split; the tiny BERT's params
    first = train_and_evaluate(p, tmp)
    assert first["registry"]["promoted"] and first["registry"]["champion"] == 1
    v1 = pd.read_parquet(tmp / "sp.parquet")
    champion = load_predictor("models:/textclf/1")  # what the gate scores: the served champion
    test = v1[v1["split"] == "test"].reset_index(drop=True)
    said = champion.predict(read_texts("c.parquet", test["doc_id"].tolist()))["label"].tolist()
    fixes = pick_corrections(test, said, sorted(v1["label"].unique()))
    (tmp / "corrections.csv").write_text("doc,label\n" + "".join(f"{d},{l}\n" for d, l in fixes.items()))

    ingest_with_corrections(p, tmp / "corrections.csv")
    report = json.loads((tmp / "r.json").read_text())
    assert report["relabelled_by_corrections"]["count"] == 2
    v2 = pd.read_parquet(tmp / "sp.parquet")
    fixed = v2[v2["source_path"].isin(fixes)].set_index("source_path")
    assert fixed["label"].to_dict() == fixes and (fixed["split"] == "test").all()  # relabelled, kept in test
    second = train_and_evaluate(p, tmp)
    cmp = second["registry"]["champion_comparison"]

    # same texts, so nothing is left out as seen: the corrected documents are judged too (the
    # common set is v2's test split, which may differ from v1's by a split repair undone)
    common, left_out = common_set(v2, v1)
    assert set(fixed["doc_id"]) <= set(common["doc_id"])
    assert cmp["left_out"] == left_out and left_out["champion_trained_on"] == 0
    assert cmp["n"] == len(common) == (v2["split"] == "test").sum() and cmp["champion_version"] == 1
    # the champion's scores there are those of the corrected labels, two errors apart from the old ones
    theirs = champion.predict(read_texts("c.parquet", common["doc_id"].tolist()))["label"].tolist()
    old = common["doc_id"].map(v1.set_index("doc_id")["label"]).tolist()
    errors = sum(t != y for t, y in zip(theirs, common["label"]))
    assert abs(errors - sum(t != y for t, y in zip(theirs, old))) == 2
    assert cmp["champion"] == pytest.approx(classification_scores(common["label"].tolist(), theirs))
    assert cmp["champion"]["accuracy"] != pytest.approx(classification_scores(old, theirs)["accuracy"])
    mine = pd.read_parquet(tmp / "pred.parquet").set_index("doc_id").loc[common["doc_id"], "predicted"]
    assert cmp["challenger"] == pytest.approx(classification_scores(common["label"].tolist(), mine.tolist()))
    tags = MlflowClient(mlflow.get_tracking_uri()).get_model_version("textclf", "2").tags
    assert float(tags["gate.champion_macro_f1"]) == pytest.approx(cmp["champion"]["macro_f1"], abs=1e-6)
