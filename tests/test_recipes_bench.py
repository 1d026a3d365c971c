"""benchmarks/corpora.py's `packages` corpus (issue 59's fourth corpus, the venv's third-party
docstrings, never committed) has many imbalanced classes and builds the same every time; and
benchmarks/recipes/recipes.py, which trains on it, answers --help. A slice (each package's first 5 files
in their fixed order) keeps it fast; the full corpus is ~18 500 documents in ~180 classes."""
import hashlib
import subprocess
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from corpora import MIN_DOCS, packages_corpus  # noqa: E402

SLICE = 5  # files per package: ~8 s a build, 128 classes of 15 to 150 with this venv


def digest(folder) -> str:
    files = sorted(p for p in folder.rglob("*.txt"))
    return hashlib.sha256(b"".join(p.relative_to(folder).as_posix().encode() + p.read_bytes()
                                   for p in files)).hexdigest()


def test_the_packages_corpus_has_many_imbalanced_classes_and_builds_the_same(tmp_path):
    counts = packages_corpus(tmp_path / "a", max_files=SLICE)
    assert len(counts) >= 40 and min(counts.values()) >= MIN_DOCS
    assert max(counts.values()) >= 10 * min(counts.values())  # imbalanced, as users' corpora are
    assert {"torch", "transformers", "sklearn", "pandas", "numpy"} <= set(counts)
    assert "textclf" not in counts and not any(label.startswith("__") for label in counts)  # this project, finders
    on_disk = {p.name: sum(1 for _ in p.iterdir()) for p in (tmp_path / "a").iterdir()}
    assert on_disk == counts
    packages_corpus(tmp_path / "b", max_files=SLICE)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")


def test_the_recipes_benchmark_and_the_corpora_answer_help():
    for script, says in (("recipes/recipes.py", "lpft-1epoch"), ("corpora.py", "packages"),
                         ("recipes/recipes_plot.py", "baseline")):
        proc = subprocess.run([sys.executable, f"benchmarks/{script}", "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and "usage:" in proc.stdout and says in proc.stdout, proc.stderr
