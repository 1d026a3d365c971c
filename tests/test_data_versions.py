"""Data versions that compare: a champion trained on another data version is scored on the
challenger's test documents it never saw, the gate moves `champion` on that comparison, the
move is recorded, and the document-level diff says what changed. Real stages and a real
SQLite store; the encoder is the tiny RANDOM BERT from conftest (wiring, not accuracy)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from textclf.config import EvaluateParams
from textclf.evaluate.champion import Challenge, common_set, judge
from textclf.tracking.registry import HISTORY_TAG, SPLIT_TAG, register

from conftest import (REPO, copy_repo, dvc, git, ingest_tokenize_split, run_baseline, run_evaluate, run_train,
                      write_params)
from test_pipeline import ran
from test_registry import PASS, logged_runs


def prepare_version(tmp, corpus, seed: int) -> list[str]:
    """Ingest, tokenize and split `corpus` with split.seed `seed` (files c/t/sp.parquet)."""
    params = write_params(tmp / "params.yaml", ingest={"source": str(corpus), "near_duplicates": {"conflicts": "drop"}},
                          split={"seed": seed},
                          train={"epochs": 3, "lr_encoder": 1e-4, "lr_head": 1e-2},
                          serve={"format": "onnx"})  # int8's labels follow the CPU (VNNI or not): not under test
    return ingest_tokenize_split(params)


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
    # ... and a near-copy of a version-1 document in it: ingest drops both (conflicts: drop)
    victim = sorted((corpus / "sport").iterdir())[0]
    words = victim.read_text(encoding="utf-8").split()
    (corpus / "tech" / "near_copy.txt").write_text(" ".join(words[:-1] + ["indeed"]), encoding="utf-8")
    second = train_and_evaluate(prepare_version(tmp, corpus, seed=42), tmp)
    new_splits = pd.read_parquet(tmp / "sp.parquet")
    reg, cmp = second["registry"], second["registry"]["champion_comparison"]

    seen = set(old_splits.loc[old_splits["split"] != "test", "content_hash"])
    new_test = new_splits[new_splits["split"] == "test"]
    unseen = new_test[~new_test["content_hash"].isin(seen)]
    assert cmp["left_out"]["champion_trained_on"] == len(new_test) - len(unseen) > 0
    assert cmp["n"] == len(unseen) and cmp["champion_version"] == 1  # never graded on what it trained on
    # the version's tags: how many test documents, and how many of them were left out (issue 55)
    assert cmp["tags"]["gate.challenger_test_documents"] == len(new_test)
    assert {k for k in cmp["tags"] if k.startswith("gate.left_out.")} == {
        "gate.left_out.champion_trained_on", "gate.left_out.near_duplicate_of_champion_training"}
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
    assert diff["added"]["per_class"] == {"tech": 16} and diff["removed"]["count"] == 1
    assert diff["removed"]["examples"] == [{"path": f"sport/{victim.name}", "dropped": {
        "reason": "near_duplicate_conflict", "with": ["tech/near_copy.txt"]}}]  # was: removed, no word why
    assert diff["removed"]["dropped_at_ingest"]["per_reason"] == {"near_duplicate_conflict": 1}
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


NEW_DOCS = {  # written for this test: one more document per class of the demo corpus
    "business/new01.txt": "A regional grocer agreed to buy two rival chains in a deal that values the "
                          "combined company at four billion, and its shares rose on the news.",
    "entertainment/new01.txt": "The festival opened with a sold-out premiere, and the director thanked a "
                               "cast of unknown actors who had rehearsed in a barn for a year.",
    "politics/new01.txt": "The opposition tabled an amendment to the housing bill, saying the minister "
                          "had promised tenants protection that the draft never delivers.",
    "sport/new01.txt": "The visitors scored twice in the final ten minutes to win the cup tie and reach "
                       "the quarter-finals for the first time in their history.",
    "tech/new01.txt": "The start-up released an open-source compiler that halves build times for large "
                      "code bases by caching results across machines.",
}


def model_md5(repo) -> tuple[str, str]:
    """(the model folder's md5 in dvc.lock, the md5 of the weights on disk)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())["stages"]
    weights = (repo / "models" / "model" / "model.safetensors").read_bytes()
    return (next(o["md5"] for o in lock["train"]["outs"] if o["path"] == "models/model"),
            hashlib.md5(weights).hexdigest())


@pytest.mark.slow
def test_data_under_dvc_grows_is_diffed_and_rolls_back_without_training(tmp_path, tiny_random_bert):
    """The README's journey: `dvc add` the source, tag, add documents, `dvc repro`, read the
    diff and the gate, compare the tags with textclf.datadiff, then `git checkout` the first
    tag and `dvc checkout`: the first model is back, bit for bit, and nothing trains."""
    repo = copy_repo(tmp_path / "repo")
    shutil.copytree(REPO / "data" / "sample", repo / "data" / "raw")
    write_params(repo / "params.yaml", ingest={"source": "data/raw"}, tokenize={"max_length": 64},
                 model={"name": str(tiny_random_bert)}, train={"epochs": 3, "lr_head": 1e-2})
    dvc(repo, "add", "data/raw")
    first = dvc(repo, "repro")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data v1")
    git(repo, "tag", "data-v1")
    v1_model, v1_splits = model_md5(repo), pd.read_parquet(repo / "data/processed/splits.parquet")
    assert "Running stage 'train'" in first

    for rel, text in NEW_DOCS.items():
        (repo / "data" / "raw" / rel).write_text(text + "\n", encoding="utf-8")
    # A labelling round moves a test document to another class folder. Both classes are ones the
    # split did not repair (a repaired group returns to its own side once its class no longer
    # needs it: a counted move, docs/data_versions.md).
    counts = json.loads((repo / "data/processed/split_counts.json").read_text())
    repaired = {r["label"] for r in counts["repairs"]}
    tests = v1_splits[(v1_splits["split"] == "test") & ~v1_splits["label"].isin(repaired)]
    moved = tests[tests["label"].map(tests["label"].value_counts()) > 1].iloc[0]
    other = sorted(set(tests["label"]) - {moved["label"]})[0]
    (repo / "data" / "raw" / moved["source_path"]).rename(repo / "data" / "raw" / other / "moved.txt")
    dvc(repo, "add", "data/raw")
    dvc(repo, "repro")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data v2")
    git(repo, "tag", "data-v2")
    v2_splits = pd.read_parquet(repo / "data/processed/splits.parquet")
    both = v1_splits.merge(v2_splits, on="content_hash", suffixes=("_v1", "_v2"))
    assert len(both) == len(v1_splits) and (both["split_v1"] == both["split_v2"]).all()  # nothing moved
    metrics = json.loads((repo / "reports/metrics.json").read_text())
    assert {k: metrics["data_diff"][k] for k in ("added", "relabelled", "removed", "changed_split")} == \
        {"added": 5, "relabelled": 1, "removed": 0, "changed_split": 0}
    # the relabelled test document makes another test split: the gate compares on common documents
    cmp = metrics["registry"]["champion_comparison"]
    assert cmp["champion_version"] == 1 and cmp["left_out"]["champion_trained_on"] == 0
    assert cmp["n"] == (v2_splits["split"] == "test").sum() and "gate." in json.dumps(cmp["tags"])
    assert "Data version" in (repo / "reports/report.md").read_text()
    shown = subprocess.run([sys.executable, "-m", "textclf.datadiff", "data-v1", "data-v2"],
                           cwd=repo, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert shown.returncode == 0, shown.stderr
    assert "5 added, 0 removed, 1 relabelled, 0 edited" in shown.stdout

    git(repo, "checkout", "-q", "data-v1")
    dvc(repo, "checkout")
    assert model_md5(repo) == v1_model  # the first model's weights, bit for bit
    assert ran(dvc(repo, "repro")) == set()  # ... and nothing trains


def test_raw_data_stays_out_of_git_and_dvc_add_tracks_it(tmp_path):
    """Issue 60, defect 7: `dvc exp run -S ingest.source=data/raw/…`, the README's example,
    committed the raw corpus to git in the experiment's commit (an experiment commits every file
    git does not ignore). data/raw is ignored; `dvc add data/raw` tracks it, its .dvc file in git."""
    repo = copy_repo(tmp_path / "repo")
    (repo / "data" / "raw").mkdir()
    (repo / "data" / "raw" / "tickets.csv").write_text("body,category\nhello there,a\n")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    dvc(repo, "add", "data/raw")
    assert git(repo, "status", "--porcelain", "--untracked-files=all").split()[1:] == ["data/raw.dvc"]
