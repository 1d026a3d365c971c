"""Stage scripts. Run each as a module from the project root: `python -m stages.train ...`."""
import sys
from pathlib import Path

# Import textclf from the src/ beside these stages, not from wherever it was installed:
# `dvc exp run --temp/--queue` runs a copy of the repo, and the copy's code must be what runs.
_SRC = str(Path(__file__).resolve().parents[1] / "src")
if sys.path[:1] != [_SRC]:
    sys.path.insert(0, _SRC)
