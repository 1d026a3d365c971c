"""Train on BBC with 1 and with N processes (same seed, same global batch) and print, per run:
the training run's wall time (MLflow run start to end: model load, epochs, validation, saving),
its speed-up over one process, and the test metrics.
    .venv/bin/python benchmarks/speed/bbc_processes.py [--processes 2] [--epochs 1] [-S key=value ...]
Each run is a `dvc exp run --temp` with the recipe of benchmarks/bbc_headtail.preset, split seed 42."""
import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import mlflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.multiseed import read_preset  # noqa: E402

log = logging.getLogger("bbc_processes")


def run_exp(name: str, processes: int, epochs: int, extra: list[str]) -> None:
    bbc = Path(os.environ.get("BBC", BBC)).resolve()
    overrides = [f"ingest.source={bbc}", *read_preset(str(ROOT / "benchmarks" / "bbc_headtail.preset")),
                 f"train.processes={processes}", f"train.epochs={epochs}", *extra]
    cmd = [str(ROOT / ".venv" / "bin" / "dvc"), "exp", "run", "--temp", "-n", name]
    for o in overrides:
        cmd += ["-S", o]
    log.info("running %s", " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def figures(name: str) -> dict:
    """The run of experiment `name`: wall time of training, samples/s, test metrics."""
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string=f"tags.`dvc.exp_name` = '{name}'")
    if len(runs) != 1:
        raise ValueError(f"expected one MLflow run tagged dvc.exp_name={name}, found {len(runs)}")
    run = runs[0]
    seconds = (run.info.end_time - run.info.start_time) / 1000
    metrics = run.data.metrics
    return {"seconds": seconds, "accuracy": metrics.get("test_accuracy"),
            "macro_f1": metrics.get("test_macro_f1"), "val_macro_f1": metrics.get("val_macro_f1")}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("-S", dest="extra", action="append", default=[])
    args = p.parse_args(argv)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{ROOT / 'mlflow.db'}")
    stamp = subprocess.run(["date", "+%Y%m%d-%H%M%S"], capture_output=True, text=True).stdout.strip()
    rows = {}
    for n in (1, args.processes):
        name = f"procs{n}-{stamp}"
        run_exp(name, n, args.epochs, args.extra)
        rows[n] = figures(name)
    print(json.dumps(rows, indent=1))
    print("| processes | train wall s | speed-up | val macro-F1 | test acc | test macro-F1 |")
    print("|---|---|---|---|---|---|")
    for n, r in rows.items():
        print(f"| {n} | {r['seconds']:.0f} | {rows[1]['seconds'] / r['seconds']:.2f}x "
              f"| {r['val_macro_f1']:.4f} | {r['accuracy']:.4f} | {r['macro_f1']:.4f} |")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    main(sys.argv[1:])
