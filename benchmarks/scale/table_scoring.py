"""Batch scoring of a large table (issue 31): `python -m textclf.predict MODEL --table` on a
Parquet table of short synthetic texts, in a fresh process per size.

    .venv/bin/python benchmarks/scale/table_scoring.py [--model models/model] [--rows 1000000]
        [--batch-size 32] [--work DIR]
    .venv/bin/python benchmarks/scale/table_scoring.py --rows 10000 100000   # memory flat in the size?

The texts are 6 to 24 words drawn from a made-up vocabulary (no corpus text), about 2% of
them empty or null so that the skip counts run too. Per size: wall time of the scoring
process (model loading included), documents/s, and its peak RSS (ru_maxrss from wait4, the
scoring process alone), and the texts' mean length in the model's tokens; the output is
checked to hold one row per input row.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402
SEED = 2026
GEN_BATCH = 100_000
SYLLABLES = ["ka", "lo", "mi", "ten", "ra", "vo", "sel", "du", "pa", "rin", "ge", "tho", "an", "bel",
             "cor", "fi", "nu", "ost", "we", "zy"]
log = logging.getLogger("table_scoring")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "models" / "model"),
                   help="model folder or MLflow model URI (default: models/model, after `make repro`)")
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--work", default=None, help="keep the tables and predictions here (default: a temp dir)")
    return p.parse_args(argv)


def vocabulary(rng: np.random.Generator, size: int = 5_000) -> np.ndarray:
    """Made-up words of 1 to 4 syllables."""
    counts = rng.integers(1, 5, size)
    return np.array(["".join(rng.choice(SYLLABLES, n)) for n in counts])


def write_table(path: Path, rows: int, batch: int = GEN_BATCH) -> None:
    """`rows` rows of (id, text) written `batch` at a time (a row group each), so memory stays
    flat here too."""
    rng = np.random.default_rng(SEED)
    words = vocabulary(rng)
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, batch):
            n = min(batch, rows - start)
            lengths = rng.integers(6, 25, n)
            texts: list[str | None] = [" ".join(rng.choice(words, k)) for k in lengths]
            for i in np.flatnonzero(rng.random(n) < 0.02):
                texts[i] = None if i % 2 else ""
            writer.write_table(pa.table({"id": np.arange(start, start + n), "text": texts}, schema=schema))


def mean_tokens(model: str, table: Path, sample: int = 2_000) -> float | None:
    """Tokens per text of the first `sample` texts, as the model's tokenizer splits them (a
    made-up word is several word pieces): docs/s depends on it. None for a model URI."""
    if not (Path(model) / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    first = next(pq.ParquetFile(table).iter_batches(sample, columns=["text"]))
    texts = [t for t in first.column(0).to_pylist() if t]
    return float(np.mean([len(ids) for ids in AutoTokenizer.from_pretrained(model)(texts)["input_ids"]]))


def score(model: str, table: Path, out: Path, batch_size: int) -> tuple[float, float]:
    """-> (wall seconds, peak RSS in MiB) of one scoring process."""
    cmd = [sys.executable, "-m", "textclf.predict", model, "--table", str(table), "--id-column", "id",
           "--out", str(out), "--batch-size", str(batch_size)]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage, which Popen.wait drops
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait again
    if proc.returncode:
        raise SystemExit(f"scoring failed (exit {proc.returncode}): {' '.join(cmd)}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


@contextlib.contextmanager
def work_dir(work: str | None):
    """--work, made if missing and kept (the tables and predictions stay there), or a temp dir;
    a --work that cannot be one is one line, not a traceback."""
    if work is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield tmp
        return
    try:
        Path(work).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SystemExit(f"--work {work}: cannot make it a folder ({err.strerror}); name a folder "
                         "this user can write.") from None
    yield work


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with work_dir(args.work) as tmp:
        for rows in args.rows:
            table, out = Path(tmp) / f"texts-{rows}.parquet", Path(tmp) / f"preds-{rows}.parquet"
            write_table(table, rows)
            wall, rss = score(args.model, table, out, args.batch_size)
            written = pq.ParquetFile(out).metadata.num_rows
            if written != rows:
                raise SystemExit(f"{out} holds {written} rows, not {rows}")
            tokens = mean_tokens(args.model, table)
            log.info("%d rows (%s tokens a text), batch size %d: %.1f s, %.0f docs/s, peak RSS %.0f MiB "
                     "(%s)", rows, "?" if tokens is None else f"{tokens:.1f}", args.batch_size, wall,
                     rows / wall, rss, args.model)


if __name__ == "__main__":
    main()
