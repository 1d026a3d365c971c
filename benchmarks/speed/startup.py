"""Start-up cost of every stage, this checkout against an earlier commit, side by side:

    .venv/bin/python benchmarks/speed/startup.py --before 98abcf3 [--rounds 5] [--repro-rounds 2]

1. start-up per stage: wall time from launching `python -c "import stages.<stage>"` to its
   exit, i.e. the interpreter plus every import the stage makes before its first line of work
   (best of --rounds, the two checkouts alternating);
2. the demo `dvc repro` from scratch in a fresh copy of each checkout, wall and CPU seconds
   (best of --repro-rounds);
3. a no-op `dvc repro` against a bare `dvc status` in each copy (best of --rounds).
Each checkout runs its own code (stages/ puts the src/ beside it first on sys.path) with this
virtual environment. Prints markdown tables; the ratios are after / before.
"""
from __future__ import annotations

import argparse
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402

BIN = ROOT / ".venv" / "bin"
STAGES = ("ingest", "tokenize", "split", "baseline", "train", "evaluate", "report")
log = logging.getLogger("startup")


def checkout(rev: str | None, dst: Path) -> Path:
    """A fresh git repo at `dst` with the files of `rev` (None: this working tree, uncommitted
    changes included), without pipeline outputs, so `dvc repro` starts from nothing."""
    dst.mkdir(parents=True)
    if rev:
        subprocess.run(f"git archive {rev} | tar -x -C {dst}", shell=True, cwd=ROOT, check=True)
    else:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split("\0")
        for rel in filter(None, files):
            if (ROOT / rel).is_file():
                (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, dst / rel)
    for out in ("dvc.lock", "data/interim", "data/processed", "models", "reports", "mlruns", "mlflow.db"):
        target = dst / out
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "bench"]):
        subprocess.run(cmd, cwd=dst, check=True, env=env, capture_output=True)
    return dst


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """-> (wall seconds, CPU seconds: user + sys of `cmd` and its children). The CPU time moves
    less than the wall time when other jobs share the cores."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def best_alternating(cmd: list[str], repos: dict[str, Path], rounds: int) -> dict[str, float]:
    best = {name: float("inf") for name in repos}
    for _ in range(rounds):
        for name, repo in repos.items():
            best[name] = min(best[name], timed(cmd, repo)[0])
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repro-rounds", type=int, default=2)
    parser.add_argument("--only-repro", action="store_true", help="skip the per-stage start-up table")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    work = Path(tempfile.mkdtemp(prefix="startup-"))
    repos = {"before": checkout(args.before, (work / "before").resolve()),
             "after": checkout(None, (work / "after").resolve())}
    python = str(BIN / "python")
    rows = []
    for stage in () if args.only_repro else STAGES:
        t = best_alternating([python, "-c", f"import stages.{stage}"], repos, args.rounds)
        rows.append((stage, t["before"], t["after"]))
        log.info("%s: %.2f s -> %.2f s", stage, t["before"], t["after"])
    repro = {(name, kind): float("inf") for name in repos for kind in ("wall", "cpu")}
    for _ in range(args.repro_rounds):
        for name, repo in repos.items():
            for out in ("dvc.lock", "mlflow.db"):
                (repo / out).unlink(missing_ok=True)
            shutil.rmtree(repo / ".dvc" / "cache", ignore_errors=True)  # the run-cache too: no hits
            wall, cpu = timed(["dvc", "repro"], repo)
            repro[name, "wall"], repro[name, "cpu"] = min(repro[name, "wall"], wall), min(repro[name, "cpu"], cpu)
            log.info("demo dvc repro (%s): %.1f s wall, %.1f s CPU", name, repro[name, "wall"], repro[name, "cpu"])
    noop = best_alternating(["dvc", "repro"], repos, args.rounds)
    status = best_alternating(["dvc", "status"], repos, args.rounds)
    print(f"\nstart-up per stage (python -c 'import stages.<stage>', best of {args.rounds}):\n")
    print("| stage | before s | after s | after / before |\n|---|---|---|---|")
    for stage, before, after in rows:
        print(f"| {stage} | {before:.2f} | {after:.2f} | {after / before:.2f} |")
    if rows:
        total_b, total_a = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"| **sum** | {total_b:.2f} | {total_a:.2f} | **{total_a / total_b:.2f}** |")
    print("\n| whole pipeline | before s | after s | after / before |\n|---|---|---|---|")
    for kind in ("wall", "cpu"):
        print(f"| demo `dvc repro` from scratch, {kind} s (best of {args.repro_rounds}) "
              f"| {repro['before', kind]:.1f} | {repro['after', kind]:.1f} "
              f"| {repro['after', kind] / repro['before', kind]:.2f} |")
    print(f"| no-op `dvc repro` | {noop['before']:.2f} | {noop['after']:.2f} | {noop['after'] / noop['before']:.2f} |")
    print(f"| `dvc status` | {status['before']:.2f} | {status['after']:.2f} | {status['after'] / status['before']:.2f} |")
    print(f"| no-op repro / status | {noop['before'] / status['before']:.2f}× | "
          f"{noop['after'] / status['after']:.2f}× | |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
