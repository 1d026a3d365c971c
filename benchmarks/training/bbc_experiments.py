"""The command line the BBC experiment benchmarks share (chunks.py, multilabel.py): split seeds,
experiment names, the corpus, the preset, extra params, parallel jobs, --summarize and --json."""
from __future__ import annotations

import argparse
import json

from corpora import BBC
from timing import ROOT


def bbc_parser(doc: str | None, name: str, naming: str) -> argparse.ArgumentParser:
    """-> a parser with the shared options; `naming` says how NAME becomes experiment names."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="split seeds (default 0 1)")
    parser.add_argument("--name", default=name, help=f"experiments are named {naming}")
    parser.add_argument("--source", default=str(BBC),
                        help="the BBC folder (a folder per class; read in place, never copied)")
    parser.add_argument("--preset", default=str(ROOT / "benchmarks" / "bbc.preset"),
                        help="key=value params applied first (default benchmarks/bbc.preset)")
    parser.add_argument("-S", "--set-param", dest="extra", action="append", default=[],
                        help="more params for every experiment, as dvc exp run -S (e.g. tokenize.stride=64)")
    parser.add_argument("--jobs", type=int, default=1, help="experiments at once (dvc queue start -j)")
    parser.add_argument("--summarize", action="store_true", help="only the table of finished experiments")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    return parser


def run_experiments(planned: dict[str, list[str]], jobs: int, summarize: bool) -> dict[str, dict]:
    """{experiment name: its -S overrides} -> {name: its reports/metrics.json}: queued and run
    (`jobs` at once) unless `summarize`, then read from `dvc exp show`."""
    from textclf.tracking.dvc_exps import dvc, experiments, queue, run_queued

    if not summarize:
        states = run_queued({name: queue(name, overrides) for name, overrides in planned.items()}, jobs)
        failed = [n for n, s in states.items() if s == "Failed"]
        if failed:
            raise SystemExit(f"experiments {', '.join(failed)} failed (see `dvc queue logs NAME`).")
    shown = experiments(json.loads(dvc("exp", "show", "--json", "--all-commits")))
    missing = [n for n in planned if n not in shown]
    if missing:
        raise SystemExit(f"no finished experiment named {', '.join(missing)} in `dvc exp show`; "
                         "run them first (drop --summarize).")
    return {name: shown[name] for name in planned}
