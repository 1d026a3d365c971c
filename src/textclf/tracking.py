"""MLflow wiring: where runs go, and the tags that tie a run to its code and data."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import mlflow

EXPERIMENT = os.environ.get("MLFLOW_EXPERIMENT_NAME", "textclf")
# `dvc exp run --temp/--queue` runs in a copy under .dvc/tmp/exps/; runs logged
# relative to that copy would vanish with it, so they go to the project's store.
_EXP_COPY = os.sep + os.path.join(".dvc", "tmp", "exps") + os.sep


def project_root(cwd: str | Path | None = None) -> Path:
    here = str(Path(cwd or os.getcwd()).resolve())
    if _EXP_COPY in here + os.sep:
        return Path(here.split(_EXP_COPY)[0])
    return Path(here)


def tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite store at <project root>/mlflow.db,
    which `mlflow ui` started in the project root shows with no flags."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def use_experiment() -> str:
    """Point MLflow at the store and experiment; return the experiment id."""
    mlflow.set_tracking_uri(tracking_uri())
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    # An absolute artifact root, so artifacts land beside mlflow.db whatever the cwd.
    return mlflow.create_experiment(EXPERIMENT, artifact_location=(project_root() / "mlruns").as_uri())


def file_md5(path: str | Path) -> str:
    """The md5 DVC records for a file in dvc.lock."""
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def lineage_tags(data_files: dict[str, str]) -> dict[str, str]:
    tags = {"git_commit": git_commit()}
    tags.update({f"dvc.md5.{name}": file_md5(path) for name, path in data_files.items()})
    if os.environ.get("DVC_EXP_NAME"):
        tags["dvc.exp_name"] = os.environ["DVC_EXP_NAME"]
    return tags


def lock_tags(lock: dict, running: str) -> dict[str, str]:
    """dvc.lock -> tags tying a run to its data and params: the md5 of every stage
    output (`dvc.out.<path>`) and of each stage's params (`dvc.params.<stage>`).
    The `running` stage's entry is skipped: DVC rewrites it only after the stage ends."""
    tags = {}
    for stage, entry in (lock.get("stages") or {}).items():
        if stage == running:
            continue
        for out in entry.get("outs") or []:
            if out.get("md5"):
                tags[f"dvc.out.{out['path']}"] = out["md5"]
        if entry.get("params"):
            text = json.dumps(entry["params"], sort_keys=True, default=str)
            tags[f"dvc.params.{stage}"] = hashlib.md5(text.encode()).hexdigest()
    return tags
