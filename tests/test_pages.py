"""Pages of docs/ followed as written (docs/testing.md lists which test keeps which page true):
the commands are taken from the page itself, so a page cannot drift from what runs."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GIT_ENV, REPO, copy_repo, git


def fenced(page: str) -> list[str]:
    """The ```bash blocks of a docs page, in order, each as one string (line continuations kept)."""
    return re.findall(r"```bash\n(.*?)```", (REPO / "docs" / page).read_text(), re.DOTALL)


def run_block(repo, block: str, env: dict | None = None) -> subprocess.CompletedProcess:
    text = "\n".join(line.strip() for line in block.strip().splitlines())
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # the venv's python, as activated
    return subprocess.run(["bash", "-c", text], cwd=repo, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, "PATH": path, **(env or {})}, timeout=900)


@pytest.mark.slow
def test_mistakes_step_1_fails_on_the_random_encoder_and_leaves_params_for_step_2(tmp_path):
    """docs/mistakes.md in order: step 1's failing run left `model.head: pooled` and
    `model.init: config` in params.yaml, and step 2's `--temp` run copied them and died of the
    random encoder instead of showing the collapse."""
    repo = copy_repo(tmp_path / "repo")
    os.symlink(REPO / ".venv", repo / ".venv")
    git(repo, "commit", "-q", "--allow-empty", "-m", "page")
    step1 = fenced("mistakes.md")[0]
    proc = run_block(repo, step1, {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    assert proc.returncode != 0 and "newly initialised, not loaded from the checkpoint" in proc.stdout + proc.stderr
    assert git(repo, "status", "--porcelain", "params.yaml") == ""  # step 2 starts from the page's params
