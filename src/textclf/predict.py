"""Predict labels for new texts with a model folder written by the train stage.

    python -m textclf.predict models/model article1.txt article2.txt
    python -m textclf.predict models:/textclf@champion article1.txt   # from the model registry
    cat headlines.txt | python -m textclf.predict models/model      # one text per line

Prints one tab-separated line per input: source, label, probability of that label.
The MLflow pyfunc (textclf.inference.serving) wraps the same Predictor, so both give the same numbers.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from textclf.data.text import decode
from textclf.inference.model_uri import model_folder
from textclf.inference.predictor import Predictor
from textclf.common import UserError, run_stage


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="model folder (models/model) or MLflow model URI "
                                          "(models:/textclf@champion)")
    parser.add_argument("files", nargs="*", help="text files; none or `-` reads lines from stdin")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    if args.batch_size < 1:
        raise UserError(f"--batch-size={args.batch_size}; use a positive number.")
    sources, texts = read_inputs(args.files)
    frame = Predictor(model_folder(args.model_dir), args.batch_size).predict(texts)
    for source, label, prob in zip(sources, frame["label"], frame["probability"]):
        sys.stdout.write(f"{source}\t{label}\t{prob:.4f}\n")


if __name__ == "__main__":
    run_stage(main)
