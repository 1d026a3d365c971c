"""What evaluate's one-document-per-call check costs against the batched pass it is compared
with, and what it finds (docs/serving.md): each format of an export scores N texts in batches
(OnnxPredictor, as served) and then one text per call, in the same run.

    OMP_NUM_THREADS=1 TEXTCLF_ONNX_THREADS=1 .venv/bin/python benchmarks/single_calls.py \\
        --export models/export --corpus bbc --docs 200
    ... --corpus fortunes --docs 2000 --batch-size 32

Prints per format: seconds batched and one per call, their ratio, and the documents whose
probabilities differ by more than SAME_ANSWER_ATOL (and by how much at most).
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
FORTUNES = Path("/usr/share/games/fortunes")
BBC = ROOT.parent / "shared" / "data" / "bbc"


def texts_of(corpus: str) -> list[str]:
    if corpus == "bbc":
        return [p.read_text(errors="replace") for p in sorted(BBC.glob("*/*.txt"))]
    out = []
    for path in sorted(FORTUNES.iterdir()):
        if path.suffix not in (".dat", ".u8") and path.is_file() and not path.is_symlink():
            out += [t.strip() for t in re.split(r"^%$", path.read_text(errors="replace"), flags=re.M) if t.strip()]
    return out


def main() -> None:
    from textclf.data.tokenizing import encode_texts
    from textclf.inference.frames import SAME_ANSWER_ATOL
    from textclf.inference.onnx_predictor import OnnxPredictor
    from textclf.model.export import format_folder
    from textclf.model.exported import read_export

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", required=True, help="an export folder (models/export)")
    parser.add_argument("--corpus", choices=("bbc", "fortunes"), default="bbc")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
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
