"""The type checker holds: mypy (settings in pyproject.toml) finds no error in src/textclf, and
a wrong type put into the code is one it reports."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def mypy(root: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
                           "--cache-dir", str(cache)], cwd=root, capture_output=True, text=True,
                          timeout=600)


def test_the_package_type_checks(tmp_path):
    proc = mypy(REPO, tmp_path / "cache")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("Success: no issues found")


def test_a_wrong_type_is_reported(tmp_path):
    shutil.copytree(REPO / "src", tmp_path / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    splitting = tmp_path / "src" / "textclf" / "data" / "splitting.py"
    splitting.write_text(splitting.read_text() + "\n\ndef _wrong() -> int:\n    return bucket(1, 2)\n")
    proc = mypy(tmp_path, tmp_path / "cache")
    assert proc.returncode == 1 and "splitting.py" in proc.stdout and "[arg-type]" in proc.stdout
