"""benchmarks/corpora.py's `stdlib` corpus: the many-class corpus issue 50's benchmark trains on, built from
this machine's Python (never committed): many imbalanced classes, look-alikes under two labels,
the same corpus every build."""
import hashlib
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from corpora import stdlib_corpus  # noqa: E402


def digest(folder) -> str:
    files = sorted(p for p in folder.rglob("*.txt"))
    return hashlib.sha256(b"".join(p.relative_to(folder).as_posix().encode() + p.read_bytes() for p in files)).hexdigest()


@pytest.mark.slow  # two builds: 14 s on quiet cores, a minute on busy ones
def test_the_stdlib_corpus_has_many_imbalanced_classes_with_look_alikes_and_builds_the_same(tmp_path):
    counts = stdlib_corpus(tmp_path / "a", min_docs=15)
    assert len(counts) >= 40 and min(counts.values()) >= 15
    assert max(counts.values()) / min(counts.values()) >= 20  # imbalanced, as users' corpora are
    assert {"posixpath", "ntpath", "os", "shutil", "asyncio", "concurrent", "_pyio", "io"} <= set(counts)
    labels_of = {}
    for path in (tmp_path / "a").rglob("*.txt"):
        labels_of.setdefault(path.read_text(encoding="utf-8"), set()).add(path.parent.name)
    assert any(len(labels) > 1 for labels in labels_of.values())  # the same docstring in two modules
    assert "this" not in counts and "test" not in counts  # modules that act on import, the test suite
    stdlib_corpus(tmp_path / "b", min_docs=15)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
