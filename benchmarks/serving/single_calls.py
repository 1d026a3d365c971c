"""What evaluate's one-document-per-call check costs against the batched pass it is compared
with, and what it finds (docs/serving.md): each format of an export scores N texts in batches
(OnnxPredictor, as served) and then one text per call, in the same run.

    OMP_NUM_THREADS=1 TEXTCLF_ONNX_THREADS=1 .venv/bin/python benchmarks/serving/single_calls.py \\
        --export models/export --corpus bbc --docs 200
    ... --corpus fortunes --docs 2000 --batch-size 32

Prints per format: seconds batched and one per call, their ratio, and the documents whose
probabilities differ by more than SAME_ANSWER_ATOL (and by how much at most).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
import timing  # noqa: E402,F401  puts this checkout's src/ first: its textclf, not an installed one
from corpora import fortune_texts, sample_texts  # noqa: E402


def texts_of(corpus: str) -> list[str]:
    if corpus == "bbc":
        return sample_texts()
    return [t for texts in fortune_texts().values() for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", required=True, help="an export folder (models/export)")
    parser.add_argument("--corpus", choices=("bbc", "fortunes"), default="bbc")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    from textclf.data.tokenizing import encode_texts
    from textclf.inference.frames import SAME_ANSWER_ATOL
    from textclf.inference.onnx_predictor import OnnxPredictor
    from textclf.model.export import format_folder
    from textclf.model.exported import read_export

    texts = texts_of(args.corpus)
    random.Random(0).shuffle(texts)
    texts = texts[:args.docs]
    meta = read_export(args.export)
    formats = [meta["format"]] + ([meta["fallback"]["format"]] if meta.get("fallback") else [])
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in formats:
            predictor = OnnxPredictor(format_folder(args.export, fmt, Path(tmp) / fmt), args.batch_size)
            ids = encode_texts(predictor.tokenizer, texts, predictor.max_length, predictor.truncation).ids
            start = time.perf_counter()
            batched = predictor.proba_of_ids(ids)
            batched_s, start = time.perf_counter() - start, time.perf_counter()
            alone = np.concatenate([predictor.proba_of_ids([row]) for row in ids])
            alone_s = time.perf_counter() - start
            gaps = np.abs(batched - alone).max(axis=1)
            print(f"{fmt}: {len(texts)} {args.corpus} texts (mean {np.mean([len(r) for r in ids]):.0f} tokens): "
                  f"batched {batched_s:.2f} s, one per call {alone_s:.2f} s ({alone_s / batched_s:.2f}x); "
                  f"{int((gaps > SAME_ANSWER_ATOL).sum())} differ by more than {SAME_ANSWER_ATOL:g}, "
                  f"at most {gaps.max():.3g}")


if __name__ == "__main__":
    main()
