"""The benchmark scripts' bad inputs are one line, not a traceback (their measurements run
outside the suite)."""
import subprocess
import sys

from conftest import REPO


def test_table_scoring_with_a_work_folder_it_cannot_make_is_one_line(tmp_path):
    """`--work /nonexistent` (a folder that is not there) ended in tempfile's traceback; now a
    missing folder is made and kept, and one that cannot be made is one line."""
    (tmp_path / "a-file").write_text("")
    proc = subprocess.run([sys.executable, "benchmarks/scale/table_scoring.py", "--rows", "10",
                           "--work", str(tmp_path / "a-file" / "work")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"--work {tmp_path / 'a-file' / 'work'}: cannot make it")
