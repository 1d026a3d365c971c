"""Spark scoring against `predict --table` (issue 43): the same Parquet table of short made-up
texts (benchmarks/scale/table_scoring.py's, 2 % null or empty) scored by the same logged model, each
command in a fresh process on this machine.

    .venv/bin/python benchmarks/scale/spark_scoring.py --model models:/textclf@champion   # after make repro
    .venv/bin/python benchmarks/scale/spark_scoring.py --rows 100000 --master 'local[2]'

The table is written in row groups of 25 x 4 096 rows, so that each Spark partition starts where a
--table chunk starts: both then give the model the same batches, and an int8 model (whose
probabilities depend on the rows scored with them) must give the same numbers, which is checked
column by column. Per command: wall time (start-up and model loading included), documents/s,
and the peak resident memory of each process (VmHWM: --table's one process; Spark's JVM and each
Python worker, sampled every 0.2 s over the process tree).
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402
from table_scoring import write_table  # noqa: E402  (the same table)

ROW_GROUP = 25 * 4096  # a whole number of --table chunks (CHUNK_ROWS) and Spark batches
log = logging.getLogger("spark_scoring")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models:/textclf@champion", help="a logged model (URI or pyfunc folder)")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--work", default=None, help="keep the table and predictions here (default: a temp dir)")
    return p.parse_args(argv)


def tree(pid: int) -> list[int]:
    """pid and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def peak_kib(pid: int) -> tuple[str, int] | None:
    """(command name, VmHWM in KiB) of a live process."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields["Name"].strip(), int(fields.get("VmHWM", "0 kB").split()[0])


def run(cmd: list[str]) -> tuple[float, dict[int, tuple[str, int]]]:
    """-> (wall seconds, {pid: (name, peak KiB)}) of the command's process tree."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    peaks: dict[int, tuple[str, int]] = {}
    while proc.poll() is None:
        for pid in tree(proc.pid):
            seen = peak_kib(pid)
            if seen and seen[1] >= peaks.get(pid, ("", 0))[1]:
                peaks[pid] = seen
        time.sleep(0.2)
    if proc.returncode:
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(cmd)}")
    return time.monotonic() - started, peaks


def memory(peaks: dict[int, tuple[str, int]]) -> str:
    """The processes over 50 MiB, largest first."""
    big = sorted((kib // 1024, name) for name, kib in peaks.values() if kib > 50 * 1024)[::-1]
    return ", ".join(f"{name} {mib} MiB" for mib, name in big)


def differences(local: Path, spark: Path) -> dict[str, int]:
    """Rows that differ, per column (0 everywhere: identical), Spark's output in its order."""
    a = pq.read_table(local)
    b = pq.read_table(spark).cast(a.schema)  # Spark names a list's item `element`
    if a.num_rows != b.num_rows:
        raise SystemExit(f"{spark} holds {b.num_rows} rows, --table {a.num_rows}")
    out = {}
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if pa.types.is_list(x.type):  # compare lists as their JSON-ish text
            x, y = pc.cast(x, pa.list_(pa.string())).to_pylist(), pc.cast(y, pa.list_(pa.string())).to_pylist()
            out[name] = sum(u != v for u, v in zip(x, y))
            continue
        same = pc.fill_null(pc.equal(x, y), False)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        out[name] = a.num_rows - pc.sum(pc.or_(same, both_null)).as_py()
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        table, local, spark = Path(tmp) / "in.parquet", Path(tmp) / "table.parquet", Path(tmp) / "spark"
        write_table(table, args.rows, ROW_GROUP)
        py = sys.executable
        t_wall, t_mem = run([py, "-m", "textclf.predict", args.model, "--table", str(table), "--id-column", "id",
                             "--out", str(local)])
        s_wall, s_mem = run([py, "-m", "textclf.spark", args.model, str(table), "--id-column", "id",
                             "--out", str(spark), "--master", args.master])
        diff = differences(local, spark)
        log.info("%d rows, %s: --table %.1f s, %.0f docs/s (%s); Spark %s %.1f s, %.0f docs/s (%s); "
                 "Spark / --table %.2fx; rows that differ: %s", args.rows, args.model, t_wall, args.rows / t_wall,
                 memory(t_mem), args.master, s_wall, args.rows / s_wall, memory(s_mem), t_wall / s_wall,
                 "none" if not any(diff.values()) else diff)


if __name__ == "__main__":
    main()
