"""A binary file given as a table stops ingest in one line that names it, with no traceback
and none of its bytes (issue 60, defect 6: pyarrow printed a UnicodeDecodeError traceback from
its invalid-row callback, and the error line quoted the file's raw bytes)."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from conftest import REPO

PNG = REPO / "docs" / "report.png"


@pytest.mark.parametrize("name", ["corpus.csv", "corpus.tsv", "corpus.csv.gz"])
def test_a_binary_file_given_as_a_table_is_refused_in_one_line(tmp_path, name):
    import gzip
    rng = random.Random(0)
    data = PNG.read_bytes() if name.endswith("tsv") else bytes(rng.randrange(256) for _ in range(9000))
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (tmp_path / "params.yaml").write_text(f"ingest:\n  source: {tmp_path / name}\n")
    proc = subprocess.run([sys.executable, "-m", "stages.ingest", "--params", str(tmp_path / "params.yaml"),
                           "--corpus", str(tmp_path / "c.parquet"), "--report", str(tmp_path / "r.json")],
                          cwd=REPO, capture_output=True, text=True, errors="backslashreplace")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "UnicodeDecodeError" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and name in lines[0] and "is not a UTF-8 text table (binary: a NUL byte" in lines[0], proc.stderr
    assert lines[0].isprintable() and "\ufffd" not in lines[0] and "\\x" not in lines[0], lines[0]
