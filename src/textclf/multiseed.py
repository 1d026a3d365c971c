"""Model vs baseline over K split seeds, as queued DVC experiments:

    python -m textclf.multiseed --source ../shared/data/bbc --preset benchmarks/bbc.preset
    python -m textclf.multiseed --name bbc --summarize    # the table again, no new runs

Each seed s runs the whole pipeline with split.seed=s (`dvc exp run --queue`, then
`dvc queue start`), so model and baseline see the same test documents per seed. The table
gives, per seed, both systems' accuracy, macro-F1 and errors; then mean ± sd, and the paired
difference (model - baseline accuracy) with a 95 % t-interval over the seeds; then one paired
test over every test document of every seed (textclf.evaluate.pooled), read from each
experiment's test and baseline predictions in the DVC cache.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import re
import statistics
import subprocess

from textclf.stage import run_stage
from textclf.evaluate.pooled import NoModelOutcomes, pooled_comparison, pooled_lines, seed_outcomes
from textclf.tracking.dvc_exps import dvc, experiments, queue, revisions, run_queued

DEFAULT_SEEDS = (0, 1, 2, 3, 4)
log = logging.getLogger("multiseed")


def seed_row(seed: int, m: dict) -> dict:
    n = m["n_test"]
    return {"seed": seed, "n_test": n, "accuracy": m["accuracy"], "macro_f1": m["macro_f1"],
            "errors": round(n * (1 - m["accuracy"])), "baseline_accuracy": m["baseline"]["accuracy"],
            "baseline_macro_f1": m["baseline"]["macro_f1"],
            "baseline_errors": round(n * (1 - m["baseline"]["accuracy"])),
            "difference": m["accuracy"] - m["baseline"]["accuracy"],
            "ensemble_accuracy": (m.get("ensemble") or {}).get("accuracy", float("nan")),
            "verdict": (m.get("comparison") or {}).get("verdict", "?")}


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; one value gives (v, v, v)."""
    from scipy.stats import t

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = t.ppf((1 + level) / 2, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values) * 100:.2f} ± {sd * 100:.2f}"


def table(rows: list[dict]) -> str:
    """Markdown: one row per seed, then mean ± sd and the paired difference's interval."""
    lines = ["| split seed | test docs | model acc | model macro-F1 | model errors | baseline acc "
             "| baseline macro-F1 | baseline errors | difference (points) | verdict | ensemble acc |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['n_test']} | {r['accuracy'] * 100:.2f} | {r['macro_f1'] * 100:.2f} "
                     f"| {r['errors']} | {r['baseline_accuracy'] * 100:.2f} | {r['baseline_macro_f1'] * 100:.2f} "
                     f"| {r['baseline_errors']} | {r['difference'] * 100:+.2f} | {r['verdict']} "
                     f"| {r['ensemble_accuracy'] * 100:.2f} |")
    col = {k: [r[k] for r in rows] for k in rows[0]}
    mean, low, high = t_interval(col["difference"])
    lines.append(f"| mean ± sd | | {mean_sd(col['accuracy'])} | {mean_sd(col['macro_f1'])} "
                 f"| {statistics.fmean(col['errors']):.1f} | {mean_sd(col['baseline_accuracy'])} "
                 f"| {mean_sd(col['baseline_macro_f1'])} | {statistics.fmean(col['baseline_errors']):.1f} "
                 f"| {mean * 100:+.2f} | | {mean_sd(col['ensemble_accuracy'])} |")
    lines.append(f"\nPaired difference over {len(rows)} split seeds: {mean * 100:+.2f} points, "
                 f"95 % t-interval {low * 100:+.2f} to {high * 100:+.2f}.")
    return "\n".join(lines)


def read_preset(path: str | None) -> list[str]:
    """key=value lines (blank lines and # comments skipped) -> -S overrides."""
    if not path:
        return []
    if not os.path.isfile(path):
        raise SystemExit(f"--preset {path}: no such file.")
    lines = [line.split("#", 1)[0].strip() for line in open(path, encoding="utf-8")]
    bad = [line for line in lines if line and "=" not in line]
    if bad:
        raise SystemExit(f"--preset {path}: lines must be key=value, got {bad[0]!r}.")
    return [line for line in lines if line]


PREDICTIONS = ("data/processed/test_predictions.parquet", "data/processed/baseline_predictions.parquet")


def experiment_outcomes(rev: str):
    """An experiment's per-document test outcomes, model and baseline, from its commit `rev`."""
    import io

    import dvc.api
    import pandas as pd

    frames = []
    for path in PREDICTIONS:
        with dvc.api.open(path, rev=rev, mode="rb") as fh:
            frames.append(pd.read_parquet(io.BytesIO(fh.read())))
    return seed_outcomes(*frames)


def pooled_or_none(revs: list[str]) -> dict | None:
    """The pooled test over the experiments at `revs`; None, with a warning, when one's
    predictions are not in the DVC cache (an experiment from before they were outputs, or gc'd)
    or lack the trained model's outcome (evaluate before 2026-12-07)."""
    from dvc.exceptions import DvcException

    try:
        return pooled_comparison([experiment_outcomes(rev) for rev in revs])
    except (OSError, DvcException, NoModelOutcomes) as err:
        log.warning("no pooled test: an experiment's test predictions cannot be read (%s)", err)
        return None


def queue_and_wait(names: dict[int, str], overrides: list[str], jobs: int) -> None:
    tasks = {name: queue(name, [f"split.seed={seed}", *overrides]) for seed, name in names.items()}
    states = run_queued(tasks, jobs)
    failed = [n for n, s in states.items() if s == "Failed"]
    if failed:
        raise SystemExit(f"experiments {', '.join(failed)} failed (see `dvc queue logs NAME`).")


def finished(names: dict[int, str], exps: dict, args: argparse.Namespace) -> dict[int, str]:
    """The seeds to tabulate: after a run, all of them; --summarize without --seeds, every
    finished NAME-s<seed>; with --seeds, those that finished, the others named in one line."""
    if args.summarize and not args.seeds:
        found = {int(m.group(1)): n for n in exps if (m := re.fullmatch(rf"{re.escape(args.name)}-s(\d+)", n))}
        names = dict(sorted(found.items())) or names
    missing = [n for n in names.values() if n not in exps]
    if len(missing) == len(names) or (missing and not args.summarize):
        raise SystemExit(f"no finished experiment named {', '.join(missing)} in `dvc exp show`; run them "
                         "first (drop --summarize), or name them as they were run (--name, --seeds).")
    if missing:
        log.warning("not finished (yet): %s; the table has the other %d seeds", ", ".join(missing),
                    len(names) - len(missing))
    return {seed: name for seed, name in names.items() if name in exps}


def nothing_to_summarize(name: str) -> None:
    """--summarize where git holds no experiment NAME-s<seed> (refs/exps/…/<name>): said at once.
    `dvc exp show --all-commits` walks every commit first: 3 minutes to say there is nothing."""
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname:lstrip=-1)", "refs/exps"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if refs.returncode == 0 and not any(re.fullmatch(rf"{re.escape(name)}-s\d+", r) for r in refs.stdout.split()):
        raise SystemExit(f"no experiment named {name}-s<seed> in this repository (git has no such "
                         "refs/exps): run them first (drop --summarize), or give the --name they were run with.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="split seeds (default 0-4; with --summarize, every finished NAME-s<seed>)")
    parser.add_argument("--name", default="seeds", help="experiments are named NAME-s<seed>")
    parser.add_argument("--source", help="corpus folder (ingest.source); default: params.yaml's")
    parser.add_argument("--preset", help="a file of key=value params, one per line (# comments), "
                                             "applied before -S; e.g. benchmarks/bbc.preset")
    parser.add_argument("-S", "--set-param", dest="overrides", action="append", default=[],
                        help="extra params, as for dvc exp run -S (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="experiments run at once (dvc queue start -j)")
    parser.add_argument("--summarize", action="store_true", help="only print the table of finished runs")
    parser.add_argument("--json", help="also write the per-seed rows to this JSON file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = {seed: f"{args.name}-s{seed}" for seed in args.seeds or DEFAULT_SEEDS}
    if not args.summarize:
        if args.source and not os.path.isdir(args.source):
            raise SystemExit(f"--source {args.source}: no such folder (a folder per class).")
        # absolute: queued experiments run in a copy under .dvc/tmp/exps/
        source = [f"ingest.source={os.path.abspath(args.source)}"] if args.source else []
        overrides = read_preset(args.preset) + args.overrides + source
        queue_and_wait(names, overrides, args.jobs)
    else:
        nothing_to_summarize(args.name)
    # --all-commits: queued experiments hang off the commit they were queued on, which a later
    # commit leaves behind; `dvc exp show` alone lists only those of the current one
    shown = json.loads(dvc("exp", "show", "--json", "--all-commits"))
    exps = experiments(shown)
    names = finished(names, exps, args)
    rows = [seed_row(seed, exps[name]) for seed, name in names.items()]
    pooled = pooled_or_none([revisions(shown)[name]["rev"] for name in names.values()])
    log.info("%s: %d split seeds, experiments %s-s*\n%s\n\n%s", datetime.date.today(), len(rows), args.name,
             table(rows), pooled_lines(pooled) if pooled else "")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"seeds": rows, "pooled": pooled}, fh, indent=1)


if __name__ == "__main__":
    run_stage(main)  # a failing dvc command: one line, exit 1
