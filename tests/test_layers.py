"""The layers hold (docs/architecture.md): import-linter's contracts in pyproject.toml pass,
and an import that runs back up a layer breaks them."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(root / "src"),
                                                                           "PATH": "/usr/bin:/bin"})


def test_the_import_contracts_are_kept():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "5 kept, 0 broken" in proc.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    """data (a low layer) importing the training loop is what the contracts exist to stop."""
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    text = tmp_path / "src" / "textclf" / "data" / "text.py"
    text.write_text(text.read_text() + "\nfrom textclf.train import loop  # noqa: E402,F401\n")
    proc = lint(tmp_path)
    assert proc.returncode == 1
    assert "layers: each imports only the layers below it BROKEN" in proc.stdout
    assert "textclf.data.text -> textclf.train.loop" in proc.stdout
