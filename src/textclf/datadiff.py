"""Which documents changed between the data of two git revisions: added, removed (and why,
where ingest dropped a document whose file is still there), relabelled, edited, and those
that changed split, read from the DVC cache (no checkout, no rerun).

    python -m textclf.datadiff v1 v2                 # two tags, commits or branches
    python -m textclf.datadiff v1 HEAD --json diff.json
    python -m textclf.datadiff v1 workspace          # against the files in the work tree

Each revision's split table (data/processed/splits.parquet, what `dvc repro` wrote and
dvc.lock records at that commit) is read with DVC; `dvc pull` first where the cache lacks
it. A revision whose dvc.lock was written for other data or params than it holds (tagged
before `dvc repro`) is refused: its split table would be an older version's. Prints the
counts per kind and per class and a few example paths.
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from textclf.data.versions import KINDS, described, diff, dropped_at_ingest, summary
from textclf.errors import UserError
from textclf.stage import run_stage

SPLITS = "data/processed/splits.parquet"
INGEST_REPORT = "data/interim/ingest_report.json"
LOCK = "dvc.lock"
WORKSPACE = "workspace"

Read = Callable[[str], "bytes | None"]  # a path in the project -> its bytes at one revision, or None


def reader(rev: str, repo: str) -> Read:
    """The project's files (git- and DVC-tracked) at `rev`, or in the work tree for `workspace`."""
    if rev == WORKSPACE:
        def local(path: str) -> bytes | None:
            file = Path(repo) / path
            return file.read_bytes() if file.is_file() else None
        return local
    from dvc.api import DVCFileSystem  # here: `--help` stays fast

    fs = DVCFileSystem(repo, rev=rev)
    _ = fs.repo  # an unknown revision fails here (RevError), not as "absent" at every exists()

    def at_rev(path: str) -> bytes | None:  # a path that exists but cannot be read: not in the cache
        return fs.read_bytes(path) if fs.exists(path) else None
    return at_rev


def _yaml(text: bytes | None, path: str) -> dict:
    """A YAML file parsed as DVC parses it (`1e-06` is a number), {} where it is absent."""
    from dvc.utils.serialize import parse_yaml

    return (parse_yaml(text.decode("utf-8"), path) or {}) if text else {}


def _leaves(prefix: str, value: Any) -> dict[str, Any]:
    """{'a': {'b': 1}} under 'p' -> {'p.a.b': 1}: where two params differ, by name."""
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, sub in value.items() for k, v in _leaves(f"{prefix}.{key}", sub).items()}


def _lookup(params: Any, key: str) -> Any:
    """A dotted key (`train.epochs`) of a params file, None where it is absent."""
    for part in key.split("."):
        params = params.get(part) if isinstance(params, dict) else None
    return params


def upstream(stages: dict, path: str) -> list[str]:
    """The stages of a dvc.lock that `path` comes from: the one that wrote it and those before."""
    writers = {out["path"]: name for name, stage in stages.items() for out in stage.get("outs", [])}
    todo, found = [writers.get(path)], []
    while todo:
        name = todo.pop()
        if name is not None and name not in found:
            found.append(name)
            todo += [writers.get(dep["path"]) for dep in stages[name].get("deps", [])]
    return found


def mismatch(name: str, stages: dict, read: Read) -> tuple[str, str] | None:
    """How stage `name`'s record in dvc.lock disagrees with the revision's files -> ("data",
    how: a `.dvc` file's hash or another stage's recorded output) or ("params", how); None
    where it agrees."""
    outs = {out["path"]: (other, out) for other, s in stages.items() for out in s.get("outs", [])}
    for dep in stages[name].get("deps", []):
        path, locked = dep["path"], dep.get("md5")
        if path in outs and outs[path][1].get("md5") != locked:
            return "data", f"{name} read {path} md5 {locked}, {outs[path][0]} wrote {outs[path][1].get('md5')}"
        tracked = (_yaml(read(f"{path}.dvc"), f"{path}.dvc").get("outs") or [None])[0]
        if tracked and tracked.get("hash") == dep.get("hash") and tracked.get("md5") != locked:
            return "data", f"{path}.dvc md5 {tracked.get('md5')} vs dvc.lock's {locked} for {name}"
    for file, values in (stages[name].get("params") or {}).items():
        current = _yaml(read(file), file)
        for key, value in values.items():
            now, was = _leaves(key, _lookup(current, key)), _leaves(key, value)
            differ = sorted(k for k in now.keys() | was.keys() if now.get(k) != was.get(k))
            if differ:
                first = differ[0]
                return "params", f"{file}'s {first} is {now.get(first)!r}, {name} ran with {was.get(first)!r}"
    return None


def check_lock(rev: str, read: Read, path: str) -> None:
    """UserError when the revision's dvc.lock was written for other data or params than the
    revision holds (committed or tagged before `dvc repro`): its `path` is an older version's,
    and the diff would say "no changes" where there are some."""
    stages = _yaml(read(LOCK), LOCK).get("stages", {})
    for name in upstream(stages, path):
        found = mismatch(name, stages, read)
        if found and rev == WORKSPACE:
            raise UserError(f"the work tree's dvc.lock was written for other {found[0]} ({found[1]}): "
                            "run `dvc repro` before comparing the work tree.")
        if found:
            raise UserError(f"{rev}'s dvc.lock was written for other {found[0]} ({found[1]}): check out "
                            f"{rev}, run `dvc repro`, commit dvc.lock with the data and move {rev} to "
                            f"that commit (`git tag -f {rev}` for a tag).")


def read_version(rev: str, path: str, repo: str, report: str = INGEST_REPORT) -> tuple[pd.DataFrame, dict]:
    """(the split table at `rev`, checked against its dvc.lock; the ingest report there, {}
    where the revision has none)."""
    from dvc.exceptions import DvcException  # here: `--help` stays fast
    from scmrepo.exceptions import SCMError

    try:
        read = reader(rev, repo)
        check_lock(rev, read, path)
        data = read(path)
        ingest = json.loads(read(report) or b"{}")
    except (DvcException, SCMError, FileNotFoundError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{path} at revision {rev!r} could not be read ({first}); check the "
                        "revision (git tag, commit, branch), and `dvc pull` if its data is on a "
                        "remote.") from None
    if data is None:
        raise UserError(f"{path} not found at {'the work tree' if rev == WORKSPACE else repr(rev)}; "
                        "run `dvc repro` (and commit dvc.lock) first.")
    return pd.read_parquet(io.BytesIO(data)), ingest


def examples(part: dict) -> str:
    """'; e.g. a, b' of a part's example documents, '' where it has none."""
    return f"; e.g. {', '.join(map(described, part['examples']))}" if part.get("examples") else ""


def render(found: dict, old: str, new: str) -> str:
    by = found["relabelled"].get("by_corrections")  # after the summary: its counts read as before
    lines = [f"{old} -> {new}: {found['old_documents']} -> {found['new_documents']} documents; "
             f"{summary(found)}" + (f"; {by} of the relabelled by the corrections file" if by else "")]
    for kind in KINDS:
        part = found[kind]
        if part["count"]:
            per_class = ", ".join(f"{c} {n}" for c, n in part["per_class"].items())
            lines.append(f"  {kind}: {per_class}{examples(part)}")
    dropped = found["removed"].get("dropped_at_ingest")
    if dropped and dropped["count"]:
        reasons = ", ".join(f"{r} {n}" for r, n in dropped["per_reason"].items())
        lines.append(f"  removed but still in the source, dropped at ingest: {dropped['count']}"
                     f"{f' ({reasons})' if reasons else ''}{examples(dropped)}")
    for route, n in (found["split_moves"] or {}).get("by_route", {}).items():
        lines.append(f"  changed split {route}: {n}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="git revision of the older data (or `workspace`)")
    parser.add_argument("new", help="git revision of the newer data (or `workspace`)")
    parser.add_argument("--path", default=SPLITS, help=f"the split table (default {SPLITS})")
    parser.add_argument("--ingest-report", default=INGEST_REPORT,
                        help=f"the newer revision's ingest report, which says why a document was "
                             f"dropped (default {INGEST_REPORT})")
    parser.add_argument("--repo", default=".", help="the project (default: here)")
    parser.add_argument("--examples", type=int, default=3, help="paths named per kind")
    parser.add_argument("--json", help="also write the whole diff to this JSON file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    old = read_version(args.old, args.path, args.repo, args.ingest_report)[0]
    new, ingest = read_version(args.new, args.path, args.repo, args.ingest_report)
    found = diff(old, new, args.examples, dropped_at_ingest(ingest))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write(render(found, args.old, args.new))


if __name__ == "__main__":
    run_stage(main)
