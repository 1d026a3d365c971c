"""Mean ± sd of test metrics across DVC experiments, e.g. the same config over seeds:

    for s in 1 2 3 4 5; do
      dvc exp run --queue -S train.seed=$s -S split.seed=$s -n seed-$s
    done
    dvc queue start -j 1   # wait until `dvc queue status` shows them done
    python -m textclf.multiseed --prefix seed-
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess

log = logging.getLogger("multiseed")
METRICS = ("accuracy", "macro_f1", "gap.accuracy")


def experiments(shown: list[dict]) -> dict[str, dict]:
    """`dvc exp show --json` -> {experiment name: metrics of reports/metrics.json}."""
    out = {}
    for baseline in shown:
        for exp in baseline.get("experiments") or []:
            rev = exp["revs"][0]
            data = (rev.get("data") or {}).get("metrics", {}).get("reports/metrics.json", {})
            if rev.get("name") and data.get("data"):
                out[rev["name"]] = data["data"]
    return out


def lookup(metrics: dict, dotted: str) -> float:
    for key in dotted.split("."):
        metrics = metrics[key]
    return float(metrics)


def summarize(exps: dict[str, dict], names=METRICS) -> dict[str, tuple[float, float, int]]:
    """{metric: (mean, sd, n)}; sd is the sample standard deviation (0 for one run)."""
    summary = {}
    for name in names:
        values = [lookup(m, name) for m in exps.values()]
        if values:
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            summary[name] = (statistics.fmean(values), sd, len(values))
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="", help="only experiments whose name starts with this")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    shown = json.loads(subprocess.run(["dvc", "exp", "show", "--json"], capture_output=True,
                                      text=True, check=True).stdout)
    exps = {n: m for n, m in experiments(shown).items() if n.startswith(args.prefix)}
    if not exps:
        raise SystemExit(f"no finished experiments named {args.prefix}* in `dvc exp show`; "
                         "run them first (see --help).")
    log.info("%d experiments: %s", len(exps), ", ".join(sorted(exps)))
    for name, (mean, sd, n) in summarize(exps).items():
        log.info("%-14s %.4f ± %.4f  (n=%d)", name, mean, sd, n)


if __name__ == "__main__":
    main()
