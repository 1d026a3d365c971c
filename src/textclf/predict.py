"""Predict labels for new texts with a model folder written by the train stage.

    python -m textclf.predict models/model article1.txt article2.txt
    python -m textclf.predict models:/textclf@champion article1.txt   # from the model registry
    cat headlines.txt | python -m textclf.predict models/model      # one text per line
    python -m textclf.predict models/model --table in.parquet --out preds.parquet   # a table

Prints one tab-separated line per input: source, label, probability of that label (a
multi-label model: its labels as a JSON list, '["politics", "sport"]', and the probability
of exactly that set), then the prediction set as a JSON list (single-label) and needs_review
(true / false), as the model's recorded review decides (models/export and a logged model:
the export stage's serve.coverage and serve.review_below; models/model: their defaults);
--coverage and --review-below override it. Probabilities are calibrated where the model
carries a temperature (docs/calibration.md).
With --table (CSV, TSV, JSON Lines or Parquet), writes every row's predictions to --out
instead (docs/table_scoring.md). The MLflow pyfunc (textclf.inference.serving) loads through
the same loader, so every path gives the same answer for the same text (docs/serving.md).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from textclf.data.text import decode
from textclf.inference.loading import load_predictor
from textclf.inference.table_scores import open_table, score_table
from textclf.errors import UserError
from textclf.stage import run_stage, setup_logging


def read_inputs(files: list[str]) -> tuple[list[str], list[str]]:
    """-> (sources, texts): each FILE is one text; with no FILE (or `-`), each non-empty
    line of stdin is one text."""
    if not files or files == ["-"]:
        text, how = decode(sys.stdin.buffer.read())  # the rules files get: UTF-8, else cp1252
        if text is None:
            raise UserError(f"stdin is not text ({how}); pipe plain text, one text per line.")
        lines = [line.strip() for line in text.splitlines()]
        kept = [(f"stdin:{n}", line) for n, line in enumerate(lines, 1) if line]
        if not kept:
            raise UserError("stdin holds no text (empty or whitespace-only); pipe one text "
                             "per line, or pass text files.")
        return [s for s, _ in kept], [t for _, t in kept]
    texts = []
    for name in files:
        path = Path(name)
        if not path.is_file():
            raise UserError(f"{name} is not a file; pass text files, or pipe lines into stdin.")
        text, how = decode(path.read_bytes())
        if text is None:
            raise UserError(f"{name} is not text ({how}); pass plain text files.")
        if not text.strip():
            raise UserError(f"{name} is empty or whitespace-only; there is nothing to classify.")
        texts.append(text)
    return list(files), texts


def check_table_args(args: argparse.Namespace) -> None:
    """--table and its options go together, and never with text files."""
    if not args.table:
        given = [o for o, v in (("--out", args.out), ("--text-column", args.text_column),
                                ("--id-column", args.id_column)) if v]
        if given:
            raise UserError(f"{', '.join(given)}: for tables only; add --table in.parquet, or "
                            "leave them out to classify text files.")
        return
    if args.files:
        raise UserError("pass either text files or --table, not both; score the files and the "
                        "table in two runs.")
    if not args.out:
        raise UserError("--table needs --out preds.parquet, the file the predictions go to.")
    if Path(args.out).suffix.lower() != ".parquet":
        raise UserError(f"--out {args.out}: predictions are written as Parquet; name a file "
                        "ending in .parquet.")
    if Path(args.out).resolve() == Path(args.table).resolve():
        raise UserError(f"--out {args.out} is the table itself; name another file.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="model folder (models/model) or MLflow model URI "
                                          "(models:/textclf@champion)")
    parser.add_argument("files", nargs="*", help="text files; none or `-` reads lines from stdin")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--table", help="score every row of this .csv, .tsv, .jsonl or .parquet")
    parser.add_argument("--text-column", help="the table's text column (default: text)")
    parser.add_argument("--id-column", help="keep only this column of the table (default: all)")
    parser.add_argument("--out", help="with --table: the .parquet file the predictions go to")
    parser.add_argument("--coverage", type=float,
                        help="answer with prediction sets holding the true label this often, e.g. 0.9 "
                             "(default: as the model records, serve.coverage)")
    parser.add_argument("--review-below", type=float,
                        help="flag needs_review under this calibrated top probability (default: as the "
                             "model records, serve.review_below)")
    args = parser.parse_intermixed_args(argv)  # text files may follow the options
    if args.batch_size < 1:
        raise UserError(f"--batch-size={args.batch_size}; use a positive number.")
    check_table_args(args)
    if args.table:
        setup_logging()  # the closing count of scored and skipped rows is an info line
        table = open_table(args.table, args.text_column or "text", args.id_column or "")
        score_table(table, load_predictor(args.model_dir, args.batch_size, args.coverage, args.review_below),
                    args.out)
        return
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    sources, texts = read_inputs(args.files)
    predictor = load_predictor(args.model_dir, args.batch_size, args.coverage, args.review_below)
    frame = predictor.predict(texts)  # multi-label: `label` is the label set, '["politics", "sport"]'
    sets = (json.dumps(list(s)) for s in frame["labels"]) if "set_size" in frame else None
    for i, (source, label, prob) in enumerate(zip(sources, frame["label"], frame["probability"])):
        extra = (f"\t{next(sets)}" if sets else "") + (
            f"\t{str(bool(frame['needs_review'].iat[i])).lower()}" if "needs_review" in frame else "")
        sys.stdout.write(f"{source}\t{label}\t{prob:.4f}{extra}\n")


# Scoring keeps nothing of an interrupted run and no pipeline stage runs it: it starts over.
INTERRUPTED = ("predict keeps nothing of an interrupted run (--out is written whole or not at all; "
               "scoring does not resume): rerun the same command to score from the start")

if __name__ == "__main__":
    run_stage(main, INTERRUPTED)
