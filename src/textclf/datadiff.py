"""Which documents changed between the data of two git revisions: added, removed, relabelled,
edited, and those that changed split, read from the DVC cache (no checkout, no rerun).

    python -m textclf.datadiff v1 v2                 # two tags, commits or branches
    python -m textclf.datadiff v1 HEAD --json diff.json
    python -m textclf.datadiff v1 workspace          # against the files in the work tree

Each revision's split table (data/processed/splits.parquet, what `dvc repro` wrote and
dvc.lock records at that commit) is read with dvc.api; `dvc pull` first where the cache
lacks it. Prints the counts per kind and per class and a few example paths.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from pathlib import Path

import pandas as pd

from textclf.data.versions import KINDS, diff, summary
from textclf.common import UserError, run_stage

SPLITS = "data/processed/splits.parquet"
WORKSPACE = "workspace"


def read_version(rev: str, path: str, repo: str) -> pd.DataFrame:
    """The split table at `rev` (or the work tree's for `workspace`)."""
    if rev == WORKSPACE:
        file = Path(repo) / path
        if not file.is_file():
            raise UserError(f"{file} not found; run `dvc repro split` first.")
        return pd.read_parquet(file)
    import dvc.api  # here: `--help` stays fast
    from dvc.exceptions import DvcException
    from scmrepo.exceptions import SCMError

    try:
        with dvc.api.open(path, repo=repo, rev=rev, mode="rb") as fh:
            return pd.read_parquet(io.BytesIO(fh.read()))
    except (DvcException, SCMError, FileNotFoundError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path} at revision {rev!r} could not be read ({first}); check the "
                        "revision (git tag, commit, branch), and `dvc pull` if its data is on a "
                        "remote.") from None


def render(found: dict, old: str, new: str) -> str:
    lines = [f"{old} -> {new}: {found['old_documents']} -> {found['new_documents']} documents; "
             f"{summary(found)}"]
    for kind in KINDS:
        part = found[kind]
        if part["count"]:
            per_class = ", ".join(f"{c} {n}" for c, n in part["per_class"].items())
            names = ", ".join(e["path"] + (f" ({e['old_label']} -> {e['label']})" if "label" in e else "")
                              for e in part["examples"])
            lines.append(f"  {kind}: {per_class}; e.g. {names}")
    for route, n in (found["split_moves"] or {}).get("by_route", {}).items():
        lines.append(f"  changed split {route}: {n}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="git revision of the older data (or `workspace`)")
    parser.add_argument("new", help="git revision of the newer data (or `workspace`)")
    parser.add_argument("--path", default=SPLITS, help=f"the split table (default {SPLITS})")
    parser.add_argument("--repo", default=".", help="the project (default: here)")
    parser.add_argument("--examples", type=int, default=3, help="paths named per kind")
    parser.add_argument("--json", help="also write the whole diff to this JSON file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    found = diff(read_version(args.old, args.path, args.repo), read_version(args.new, args.path, args.repo),
                 args.examples)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(render(found, args.old, args.new))


if __name__ == "__main__":
    run_stage(main)
