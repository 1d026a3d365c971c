"""Timing and child processes, the same for every benchmark: a stage in a fresh process (wall
seconds, peak RSS), a measurement in a child that answers one JSON line, best-of runs taking
turns, the params a work folder's stages read, and the printed Markdown table.

Each script under benchmarks/<area>/ starts with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing

and imports this module first: it puts this checkout's src/ and root first on sys.path, so a
benchmark measures the code beside it, never an installed textclf.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT), str(ROOT / "src")):  # src/ ends up first
    if _path in sys.path:
        sys.path.remove(_path)
    sys.path.insert(0, _path)

log = logging.getLogger("timing")
RESULT = "RESULT "  # the prefix of a child's answer line

# The stage, then its own peak RSS from /proc (VmHWM): wait4's ru_maxrss would also count the
# benchmark's memory, which the child inherits at fork, before its exec.
CHILD = """import runpy, sys
module = sys.argv.pop(1)
sys.argv[0] = module
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    print("peak_kib", peak, file=sys.stderr)
"""


def stage(name: str, work: Path, *args: str, params: str | Path = "params.yaml", timeout: float | None = None,
          code: Path = ROOT) -> tuple[float | None, float | None]:
    """`python -m stages.NAME --params PARAMS ARGS` in `work`, a fresh process as dvc runs it: the
    stages of `code` (this checkout unless told), offline, a work-local MLflow store (never the
    repository's) -> (wall seconds, peak RSS GiB); (None, None) past `timeout`. Its log goes to
    work/NAME.log as it runs (`tail -f` it), its tail into the error where it fails."""
    env = {**os.environ, "PYTHONPATH": f"{code / 'src'}:{code}", "HF_HUB_OFFLINE": "1",
           "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    cmd = [sys.executable, "-c", CHILD, f"stages.{name}", "--params", str(params), *args]
    log_file = work / f"{name}.log"
    started = time.perf_counter()
    with log_file.open("w") as err:
        try:
            proc = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err, timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s stopped after %.0f s", name, timeout)
            return None, None
    seconds = time.perf_counter() - started
    stderr = log_file.read_text(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{name} failed in {work}:\n{stderr[-3000:]}")
    log.info("%s (%s): %.1f s", name, params, seconds)
    return seconds, int(stderr.rsplit("peak_kib", 1)[1]) / 2**20


def answer(result: dict) -> None:
    """A child's answer to child(): its last line on stdout."""
    print(RESULT + json.dumps(result), flush=True)


def child(*args: str) -> dict | None:
    """`python ARGS` in a fresh process, so that thread pools, allocator caches and peak RSS never
    carry over from one measurement to the next -> its answer(), or None (its stderr logged)."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        log.error("%s failed (exit %d):\n%s", " ".join(args)[:300], proc.returncode, proc.stderr[-3000:])
        return None
    return json.loads(lines[-1][len(RESULT):])


def best_run(runs: list[dict], key: str = "samples_per_s") -> dict:
    """The fastest of repeated runs: noise on a shared machine only ever slows a run down."""
    best = max(runs, key=lambda r: r[key])
    return {**best, "all": [round(r[key], 2) for r in runs]}


def rotated(items: list, shift: int) -> list:
    """`items` starting at position `shift`: who runs first changes every repeat, so a
    load change on the machine does not always hit the same contender."""
    shift %= len(items)
    return items[shift:] + items[:shift]


def goal(name: str, value: float | None, target: float, extra_ok: bool = True, note: str = "",
         at_most: bool = False) -> dict:
    """One pass/fail line: value >= target (<= with at_most) and `extra_ok` (e.g. equal
    loss); value None -> SKIP with the reason in `note`."""
    bound = f"{'<=' if at_most else '>='} {target:g}"
    if value is None:
        return {"goal": name, "value": "n/a", "target": bound, "result": "SKIP", "note": note}
    ok = (value <= target if at_most else value >= target) and extra_ok
    return {"goal": name, "value": f"{value:.2f}", "target": bound,
            "result": "PASS" if ok else "FAIL", "note": note}


def with_overrides(params: dict, overrides: list[str]) -> dict:
    """Each key=value (a dotted key, a YAML value, as --set and the presets write them) set in
    `params`; a key params.yaml does not have is an error, not a silent new param."""
    for item in overrides:
        key, value = item.split("=", 1)
        *path, last = key.split(".")
        node = params
        for part in path:
            node = node[part]
        if last not in node:
            raise SystemExit(f"{item}: no param {key} in params.yaml")
        node[last] = yaml.safe_load(value)
    return params


def params_for(source: Path, overrides: list[str]) -> dict:
    """The repository's params.yaml reading `source`, with each key=value override."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["ingest"]["source"] = str(source)
    return with_overrides(params, overrides)


def write_if_changed(path: Path, params: dict) -> bool:
    """Write params to path -> whether they differ from what was there (outputs made with the
    old ones are stale)."""
    text = yaml.safe_dump(params, sort_keys=False)
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def table(rows: list[dict], columns: list[str]) -> str:
    """Rows of dicts -> a Markdown table (floats: 3 decimals below 10, else 1)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
