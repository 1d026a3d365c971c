"""textclf.datadiff on a real DVC project (a temp copy, the tiny random BERT's tokenizer, the
stages up to split, no training): a tag whose dvc.lock was written before `dvc repro` is
refused in one line with the fix, and a removed document that ingest dropped says why."""
import os
import shutil
import subprocess
import sys

import pandas as pd
import yaml

from textclf.data.versions import diff, dropped_at_ingest

from conftest import REPO, copy_repo, dvc, git, write_params
from test_data_versions import NEW_DOCS


def datadiff(repo, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "textclf.datadiff", *args], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})


def commit(repo, message: str, tag: str, *, move: bool = False) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    git(repo, "tag", *(["-f"] if move else []), tag)


def test_a_tag_whose_dvc_lock_predates_its_data_is_refused_and_a_dropped_document_says_why(tmp_path, tiny_random_bert):
    repo = copy_repo(tmp_path / "repo")
    raw = repo / "data" / "raw"
    shutil.copytree(REPO / "data" / "sample", raw)
    write_params(repo / "params.yaml", ingest={"source": "data/raw", "near_duplicates": {"conflicts": "drop"}},
                 tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)})
    dvc(repo, "add", "data/raw")
    dvc(repo, "repro", "split")
    commit(repo, "data v1", "data-v1")  # the order that works: dvc add, dvc repro, commit, tag

    for rel, text in NEW_DOCS.items():
        (raw / rel).write_text(text + "\n", encoding="utf-8")
    # a near-copy of a v1 document under another class: ingest drops both (conflicts: drop)
    victim = sorted((raw / "business").iterdir())[0]
    words = victim.read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (raw / "sport" / "near_copy.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    dvc(repo, "add", "data/raw")
    commit(repo, "data v2", "data-v2")  # the README's old order: tagged before `dvc repro`
    added = yaml.safe_load((repo / "data" / "raw.dvc").read_text())["outs"][0]["md5"]
    locked = next(d["md5"] for d in yaml.safe_load((repo / "dvc.lock").read_text())["stages"]["ingest"]["deps"]
                  if d["path"] == "data/raw")

    refused = datadiff(repo, "data-v1", "data-v2")  # was: "0 added, ... 80 unchanged", exit 0
    assert refused.returncode == 1 and refused.stdout == ""
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert (f"data-v2's dvc.lock was written for other data (data/raw.dvc md5 {added} vs dvc.lock's "
            f"{locked} for ingest): check out data-v2, run `dvc repro`, commit dvc.lock") in refused.stderr
    assert "the work tree's dvc.lock" in datadiff(repo, "data-v1", "workspace").stderr

    dvc(repo, "repro", "split")  # the fix the line gives
    commit(repo, "data v2, reproduced", "data-v2", move=True)
    shown = datadiff(repo, "data-v1", "data-v2")
    assert shown.returncode == 0, shown.stderr
    assert "5 added, 1 removed, 0 relabelled, 0 edited" in shown.stdout
    rel = victim.relative_to(raw).as_posix()
    assert f"{rel} (dropped at ingest: near_duplicate_conflict with sport/near_copy.txt)" in shown.stdout
    assert "removed but still in the source, dropped at ingest: 1 (near_duplicate_conflict 1)" in shown.stdout

    unknown = datadiff(repo, "data-v0", "data-v2")
    assert unknown.returncode == 1 and "could not be read (unknown Git revision 'data-v0')" in unknown.stderr

    write_params(repo / "params.yaml", split={"seed": 7})  # a params change without `dvc repro`
    changed = datadiff(repo, "data-v2", "workspace")
    assert changed.returncode == 1
    assert ("the work tree's dvc.lock was written for other params (params.yaml's split.seed is 7, split "
            "ran with 42): run `dvc repro`") in changed.stderr


def old_and_new():
    old = pd.DataFrame({"doc_id": ["x/a", "x/b", "y/c", "z/d"], "label": ["x", "x", "y", "z"],
                        "content_hash": list("ABCD"), "split": ["test", "train", "train", "test"]})
    new = pd.DataFrame({"doc_id": ["x/b", "y/c", "y/e"], "label": ["x", "y", "y"],
                        "content_hash": list("BCE"), "split": ["train", "train", "test"]})
    return old, new


def test_a_removed_document_says_why_ingest_dropped_it():
    """Each reason ingest drops a read document for: a skipped file or table row (by its id),
    both copies of a text under two labels, a mixed-label near-duplicate group, a small class."""
    old, new = old_and_new()
    old["doc_id"] = ["x/a", "x/b", "y/c", "t.csv:4"]
    report = {"skipped_files": [{"path": "t.csv:9", "id": "t.csv:4", "reason": "duplicate_id"}],
              "near_duplicates": {"mixed_label_groups": [
                  {"labels": ["x", "y"], "paths": ["x/a", "y/new"], "action": "dropped"}]}}
    found = diff(old, new, dropped=dropped_at_ingest(report))
    assert found["removed"]["count"] == 2
    assert found["removed"]["examples"] == [
        {"path": "t.csv:4", "dropped": {"reason": "duplicate_id"}},
        {"path": "x/a", "dropped": {"reason": "near_duplicate_conflict", "with": ["y/new"]}}]
    assert found["removed"]["dropped_at_ingest"]["per_reason"] == {"duplicate_id": 1, "near_duplicate_conflict": 1}

    old, new = old_and_new()
    report = {"conflicts": [{"content_hash": "a", "labels": ["x", "y"], "paths": ["x/a", "y/a"]}],
              "dropped_classes": {"z": 1}}
    found = diff(old, new, dropped=dropped_at_ingest(report))["removed"]
    assert [e["dropped"] for e in found["examples"]] == [
        {"reason": "conflicting_label", "with": ["y/a"]}, {"reason": "small_class"}]
    plain = diff(old, new, dropped=dropped_at_ingest({}))["removed"]  # no report: removed, no reason
    assert plain["dropped_at_ingest"]["count"] == 0 and "dropped" not in plain["examples"][0]


def test_no_printed_line_ends_in_an_empty_example_list():
    """A report that names no dropped document printed `dropped at ingest: 0 (); e.g. `."""
    from textclf.datadiff import render

    old, new = old_and_new()
    shown = render(diff(old, new, dropped=dropped_at_ingest({"skipped_files": []})), "v1", "v2")
    assert "dropped at ingest" not in shown and "()" not in shown
    assert not any(line.rstrip().endswith("e.g.") for line in shown.splitlines())


def test_the_printed_line_says_how_many_of_the_relabelled_the_corrections_file_made():
    from textclf.datadiff import render

    old, new = old_and_new()
    new["label"] = ["y", "x", "y"]  # x/b and y/c relabelled; only x/b by the corrections file
    report = {"relabelled_by_corrections": {"count": 1, "documents": [{"path": "x/b"}]}}
    first = render(diff(old, new, dropped=dropped_at_ingest(report)), "v1", "v2").splitlines()[0]
    assert "1 added, 2 removed, 2 relabelled, 0 edited" in first
    assert first.endswith("; 1 of the relabelled by the corrections file")
    none = {"relabelled_by_corrections": {"count": 0, "documents": []}}  # a header-only file: unsaid
    assert "corrections" not in render(diff(old, new, dropped=dropped_at_ingest(none)), "v1", "v2")
