"""Data versions that compare: a champion trained on another data version is scored on the
challenger's test documents it never saw, the gate moves `champion` on that comparison, the
move is recorded, and the document-level diff says what changed. Real stages and a real
SQLite store; the encoder is the tiny RANDOM BERT from conftest (wiring, not accuracy)."""
import json
import shutil

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from stages import ingest, split
from stages import tokenize as tokenize_stage
from textclf.config import EvaluateParams
from textclf.evaluate.champion import Challenge, common_set, judge
from textclf.tracking.registry import HISTORY_TAG, SPLIT_TAG, register

from conftest import REPO, run_baseline, run_evaluate, run_train, write_params
from test_registry import PASS, logged_runs


def prepare_version(tmp, corpus, seed: int) -> list[str]:
    """Ingest, tokenize and split `corpus` with split.seed `seed` (files c/t/sp.parquet)."""
    params = write_params(tmp / "params.yaml", ingest={"source": str(corpus)}, split={"seed": seed},
                          train={"epochs": 3, "lr_encoder": 1e-4, "lr_head": 1e-2})
    p = ["--params", str(params)]
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    tokenize_stage.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                             "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    return p


def train_and_evaluate(p, tmp) -> dict:
    """Train, then evaluate with every guard passed (the tiny random BERT may collapse: the
    registry's wiring is under test here, and a version with an alarm never becomes champion)."""
    run_train(p)
    run_baseline(p)
    guards = json.loads((tmp / "guards.json").read_text())
    (tmp / "guards.json").write_text(json.dumps({k: {**g, "status": "pass"} for k, g in guards.items()}))
    run_evaluate(p)
    return json.loads((tmp / "metrics.json").read_text())


def test_a_challenger_on_grown_data_is_judged_on_the_documents_the_champion_never_saw(prepared):
    tmp, p = prepared  # the tiny BERT's params; MLflow in tmp
    corpus = tmp / "corpus"
    shutil.copytree(REPO / "data" / "sample", corpus, ignore=shutil.ignore_patterns("tech"))
    # version 1: four classes, another split seed (so some of v2's test documents trained v1)
    first = train_and_evaluate(prepare_version(tmp, corpus, seed=1), tmp)
    assert first["registry"]["promoted"] and first["data_diff"] == {"against_version": None}
    old_splits = pd.read_parquet(tmp / "sp.parquet")

    shutil.copytree(REPO / "data" / "sample" / "tech", corpus / "tech")  # version 2: a class more
    second = train_and_evaluate(prepare_version(tmp, corpus, seed=42), tmp)
    new_splits = pd.read_parquet(tmp / "sp.parquet")
    reg, cmp = second["registry"], second["registry"]["champion_comparison"]

    seen = set(old_splits.loc[old_splits["split"] != "test", "content_hash"])
    new_test = new_splits[new_splits["split"] == "test"]
    unseen = new_test[~new_test["content_hash"].isin(seen)]
    assert cmp["left_out"]["champion_trained_on"] == len(new_test) - len(unseen) > 0
    assert cmp["n"] == len(unseen) and cmp["champion_version"] == 1  # never graded on what it trained on
    assert cmp["classes"] == {"only_challenger": ["tech"], "only_champion": []}
    assert "only the challenger knows: ['tech']" in reg["reason"]
    assert reg["promoted"] is cmp["promote"] is True and reg["champion"] == 2
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    moves = json.loads(client.get_registered_model("textclf").tags[HISTORY_TAG])
    assert [(m["from"], m["to"]) for m in moves] == [(None, 1), (1, 2)]
    assert reg["history"] == moves
    tags = client.get_model_version("textclf", "2").tags
    assert tags["gate.common_documents"] == str(len(unseen)) and tags["champion.from"] == "1"
    assert float(tags["gate.champion_macro_f1"]) == pytest.approx(cmp["champion"]["macro_f1"], abs=1e-6)
    diff = json.loads((tmp / "diff.json").read_text())
    assert diff["against_version"] == 1 and diff["added"]["count"] == 16
    assert diff["added"]["per_class"] == {"tech": 16} and diff["removed"]["count"] == 0
    assert second["data_diff"]["added"] == 16


def test_common_set_leaves_out_what_the_champion_saw_by_text_and_by_group():
    challenger = pd.DataFrame({"doc_id": list("abcde"), "label": "x", "content_hash": list("ABCDE"),
                               "group": ["a", "b", "c", "c", "e"],
                               "split": ["test", "test", "test", "train", "test"]})
    champion = pd.DataFrame({"doc_id": list("abdz"), "content_hash": list("ABDZ"), "label": "x",
                             "group": list("abdz"), "split": ["train", "test", "validation", "train"]})
    common, left_out = common_set(challenger, champion)
    # a: trained on it; c: near-duplicate of d, which the champion validated on
    assert common["doc_id"].tolist() == ["b", "e"]
    assert left_out == {"challenger_test": 4, "champion_trained_on": 1,
                        "near_duplicate_of_champion_training": 1}


@pytest.mark.parametrize("rule, mine, promote", [
    ("not_worse", list("xxxxyyyyxx"), True),    # the same answers: not worse, equal macro-F1
    ("better", list("xxxxyyyyxx"), False),      # ... but not significantly better
    ("not_worse", list("yyyyxxxxyy"), False),   # all wrong: significantly worse
])
def test_the_gate_rules(rule, mine, promote):
    truth = list("xxxxyyyyxx")
    result = judge(truth, mine, truth, rule, EvaluateParams(bootstrap=200))
    assert result["promote"] is promote and result["n"] == 10 and result["rule"] == rule


def test_a_champion_without_a_split_table_stays_and_says_why(tmp_path, caplog):
    """Versions registered before runs carried their split table: no fair comparison, so the
    champion stays (the old behaviour) and the log says why."""
    old, new = logged_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", 2)
    assert register(old, "m", {**PASS, SPLIT_TAG: "s1"})["promoted"]
    challenge = Challenge("m", pd.DataFrame(), pd.DataFrame(), "c.parquet", EvaluateParams())
    assert challenge.read_champion({"run_id": old["run_id"], "version": "1"}, old["tracking_uri"]) is None
    decision = register(new, "m", {**PASS, SPLIT_TAG: "s2", "test_macro_f1": "0.99"}, challenge)
    assert (decision["promoted"], decision["champion"], decision["champion_comparison"]) == (False, 1, None)
    assert "registered before runs carried their split table" in caplog.text
