"""Checks that `make repro` runs before `dvc repro`.

DVC hashes every dependency before any stage starts. A FIFO in the ingest.source folder
makes that hash wait forever for a writer, so `dvc repro` hangs silently (the ingest
stage itself skips FIFOs, sockets and devices, but never gets to run):

    python -m textclf.preflight            # exit 1, naming the files, if any is found
"""
from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from textclf.config import load_params
from textclf.errors import UserError
from textclf.stage import run_stage

log = logging.getLogger("preflight")


def _special(path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode  # follows links: DVC would read through them too
    except OSError:
        return False  # dangling link: DVC and ingest skip it
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def special_files(root: Path) -> list[Path]:
    """FIFOs, sockets and devices under `root` (links to them included), without
    descending into linked folders."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        found += [Path(folder) / name for name in sorted(files + dirs) if _special(Path(folder) / name)]
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    source = Path(load_params(args.params).ingest.source)
    found = special_files(source) if source.is_dir() else []
    if found:
        names = ", ".join(str(p) for p in found[:5]) + (" …" if len(found) > 5 else "")
        raise UserError(f"ingest.source {source} holds {len(found)} FIFO, socket or device "
                         f"file(s): {names}. `dvc repro` would hang while hashing them: move "
                         "them out of the corpus folder.")


if __name__ == "__main__":
    run_stage(main)
