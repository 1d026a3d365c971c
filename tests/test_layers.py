"""The layers hold (docs/architecture.md): import-linter's contracts in pyproject.toml pass,
and an import that runs back up a layer, or closes a circle inside one, breaks them."""
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
    assert "6 kept, 0 broken" in proc.stdout


def with_line(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the project (src/ and pyproject.toml) whose `module` file ends with `line`."""
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    path = tmp_path / "src" / Path(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n{line}\n")
    return tmp_path


def test_an_upward_import_breaks_the_layers(tmp_path):
    """data (a low layer) importing the training loop is what the contracts exist to stop."""
    proc = lint(with_line(tmp_path, "textclf.data.text", "from textclf.train import loop  # noqa: E402,F401"))
    assert proc.returncode == 1
    assert "layers: each imports only the layers below it BROKEN" in proc.stdout
    assert "textclf.data.text -> textclf.train.loop" in proc.stdout


def test_an_import_circle_breaks_the_contracts(tmp_path):
    """Issue 62: splitting imported multilabel_split inside a function, which imports splitting;
    a function-local import closing a circle again is caught."""
    line = "def _again():\n    from textclf.data.multilabel_split import split_multilabel  # noqa: F401"
    proc = lint(with_line(tmp_path, "textclf.data.splitting", line))
    assert proc.returncode == 1
    assert "no import circles: in each package, its modules import one way BROKEN" in proc.stdout
    assert "No cycles are allowed in textclf.data" in proc.stdout
