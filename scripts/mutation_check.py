"""Does the default test tier catch real bugs? Puts each bug below into the code, one at a
time, runs the default-tier tests most likely to see it, records which fail, and puts the
code back (also on Ctrl-C). Prints a markdown table; exit 1 if a bug went uncaught.

    .venv/bin/python scripts/mutation_check.py [--only 3 5] [--list]

It edits the working tree in place (the stages that tests start as subprocesses import the
installed package, so a copy of the tree would not reach them): run it on a clean checkout
and run nothing else meanwhile. docs/testing.md has the last table.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Bug:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BUGS = [
    Bug("the length-grouped sampler drops its short batch", "src/textclf/model/batching.py",
        "for i in range(0, len(chunk), self.batch_size)]",
        "for i in range(0, len(chunk) - self.batch_size + 1, self.batch_size)]",
        ("tests/test_training.py",)),
    Bug("resume skips restoring the RNG state", "src/textclf/train/checkpoint.py",
        '        accelerator.load_state(str(self.found))\n',
        '        rng = torch.get_rng_state()\n        accelerator.load_state(str(self.found))\n'
        '        torch.set_rng_state(rng)\n',
        ("tests/test_recovery.py",)),
    Bug("resume logs the epoch metrics a second time", "src/textclf/train/run.py",
        "    if resume and not reopened:  # a new run", "    if resume:  # a new run",
        ("tests/test_recovery.py",)),
    Bug("rank 1 writes an MLflow metric", "src/textclf/train/run.py",
        "    if not accelerator.is_main_process:\n        return\n",
        '    if not accelerator.is_main_process:\n        mlflow.log_metric("rank_1_was_here", 1)\n        return\n',
        ("tests/test_multiprocess.py",)),
    Bug("the champion alias goes to the newest eligible version, not the best", "src/textclf/tracking/registry.py",
        'key=lambda v: (float(v["test_macro_f1"]), int(v["version"]))', 'key=lambda v: int(v["version"])',
        ("tests/test_registry.py",)),
    Bug("evaluate reopens the training run (its end time changes)", "src/textclf/tracking/runs.py",
        '    client, now = MlflowClient(run["tracking_uri"]), int(time.time() * 1000)\n',
        '    client, now = MlflowClient(run["tracking_uri"]), int(time.time() * 1000)\n'
        '    mlflow.set_tracking_uri(run["tracking_uri"])\n'
        '    with mlflow.start_run(run_id=run["run_id"]):\n        pass\n',
        ("tests/test_failures.py",)),
    Bug("the load audit passes a randomly initialised encoder", "src/textclf/train/guards.py",
        "    if not random_encoder:\n", "    if True:\n",
        ("tests/test_guards.py", "tests/test_train.py")),
    Bug("the collapse guard judges the last epoch instead of the kept one (stage)", "src/textclf/train/run.py",
        "epochs.judge(selector.kept_epoch, final=True)", "epochs.judge(selector.last_epoch, final=True)",
        ("tests/test_train.py",)),
    Bug("the collapse guard judges the last epoch instead of the kept one (guard)", "src/textclf/train/guards.py",
        'kept = next((h for h in history if h["epoch"] == kept_epoch), None)',
        "kept = history[-1] if history else None",
        ("tests/test_guards.py",)),
    Bug("ingest keeps a binary file (one with NUL bytes) as a document", "src/textclf/data/text.py",
        '    if b"\\x00" in data:\n', "    if False:\n",
        ("tests/test_ingest.py",)),
    Bug("predict classifies an empty text", "src/textclf/predict.py",
        "        if empty:\n            raise UserError(", "        if False:\n            raise UserError(",
        ("tests/test_serving.py",)),
    Bug("a damaged checkpoint is resumed", "src/textclf/train/checkpoint.py",
        "            problem = damage(candidate)\n", "            problem = None\n",
        ("tests/test_checkpoint.py",)),
    Bug("best-epoch selection ignores the validation loss on a macro-F1 tie", "src/textclf/train/selection.py",
        '        return [row["val_macro_f1"], -row["val_loss"]]', '        return [row["val_macro_f1"]]',
        ("tests/test_training.py",)),
]


def failed_tests(output: str) -> list[str]:
    """pytest's FAILED lines -> test ids (a parametrized id cut at its first space gets its ']')."""
    ids = re.findall(r"^FAILED (\S+)", output, re.M)
    return sorted({i if "[" not in i or i.endswith("]") else i + "…]" for i in ids})


def check(bug: Bug) -> list[str]:
    """Put the bug in, run its tests, put the code back -> the failing tests."""
    path = ROOT / bug.path
    original = path.read_text()
    if original.count(bug.old) != 1:
        raise SystemExit(f"{bug.path}: the code this bug replaces is not there exactly once; "
                         f"update scripts/mutation_check.py: {bug.old!r}")
    try:
        path.write_text(original.replace(bug.old, bug.new))
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:randomly",
                               "-p", "no:cacheprovider", *bug.tests], cwd=ROOT, capture_output=True, text=True)
    finally:
        path.write_text(original)
    return failed_tests(proc.stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", type=int, nargs="+", help="bug numbers (1-based) to check")
    parser.add_argument("--list", action="store_true", help="list the bugs and exit")
    args = parser.parse_args(argv)
    chosen = [(i, b) for i, b in enumerate(BUGS, 1) if not args.only or i in args.only]
    if args.list:
        for i, bug in chosen:
            print(f"{i}. {bug.name} ({bug.path})")
        return
    print("| # | bug | file | default-tier tests that fail |\n|---|---|---|---|")
    missed = 0
    for i, bug in chosen:
        failed = check(bug)
        missed += not failed
        shown = "<br>".join(f"`{t.split('/')[-1]}`" for t in failed) or "**none: not caught**"
        print(f"| {i} | {bug.name} | `{bug.path}` | {shown} |", flush=True)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
