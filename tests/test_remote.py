"""A DVC remote a teammate pulls from: the pipeline's cache and run-cache pushed to a local-path
remote, a fresh `git clone` elsewhere, `dvc pull --run-cache`, and nothing has to run again."""
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from conftest import REPO, dvc, git

UP_TO_DATE = "Data and pipelines are up to date."


def ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def uncached(stage: dict, kinds=("outs", "metrics", "plots")) -> list[str]:
    """The stage's `cache: false` paths among `kinds`."""
    entries = [o for kind in kinds for o in stage.get(kind) or [] if isinstance(o, dict)]
    return [path for entry in entries for path, opts in entry.items() if (opts or {}).get("cache") is False]


STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def test_every_uncached_output_travels_in_git():
    """A `cache: false` output is in neither the DVC cache nor a remote: git must carry it."""
    paths = [path for stage in STAGES.values() for path in uncached(stage)]
    assert "reports/metrics.json" in paths and "reports/confusion.csv" in paths
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO,
                             capture_output=True, text=True).stdout.split()
    assert ignored == [], f"git-ignored and not in the DVC cache, so a teammate's pull lacks them: {ignored}"


def test_train_can_be_restored_from_a_pulled_run_cache():
    """DVC keeps no run-cache entry for a stage with a `cache: false` out, and `dvc push
    --run-cache` does not push uncached metrics or plots: a clone could not restore train."""
    assert uncached(STAGES["train"]) == []


def test_a_teammate_pulls_and_nothing_runs_again(reproduced, tmp_path):
    src, _ = reproduced
    origin, remote, clone = tmp_path / "origin", tmp_path / "remote", tmp_path / "teammate"
    # A copy, so that this test's commits stay out of the shared repo; its MLflow store is local
    # state that no remote carries, so it is left behind.
    shutil.copytree(src, origin, symlinks=True,
                    ignore=shutil.ignore_patterns("mlflow.db", "mlruns", "tmp"))
    assert ran(dvc(origin, "repro")) == set()  # the shared repo is as `reproduced` left it
    dvc(origin, "remote", "add", "-d", "store", str(remote))
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "pipeline results and the team's remote")
    dvc(origin, "push", "--run-cache")

    git(tmp_path, "clone", "-q", str(origin), str(clone))
    dvc(clone, "pull", "--run-cache")
    assert UP_TO_DATE in dvc(clone, "status")
    out = dvc(clone, "repro")
    assert ran(out) == set() and UP_TO_DATE in out, out
    model = Path("models/model/model.safetensors")
    assert (clone / model).read_bytes() == (origin / model).read_bytes()

    shutil.rmtree(clone / "models")
    out = dvc(clone, "repro")
    assert ran(out) == set(), out  # training included: restored from the run-cache
    assert "Stage 'train' is cached - skipping run, checking out outputs" in out, out
    assert (clone / model).read_bytes() == (origin / model).read_bytes()
    assert UP_TO_DATE in dvc(clone, "status")
    assert git(clone, "status", "--porcelain") == ""  # models/.gitignore restored too
    assert not (clone / "mlflow.db").exists() and not (clone / "mlruns").exists()
