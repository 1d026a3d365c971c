"""How well each ONNX quantization agrees with PyTorch, and how fast it runs, on many classes
with small margins (issue 39 item 7): Debian's fortunes (42 classes of short texts) and BBC.

    .venv/bin/python benchmarks/serving/int8_agreement.py train --corpus fortunes --work /tmp/fortunes
    .venv/bin/python benchmarks/serving/int8_agreement.py measure --work /tmp/fortunes [--docs 400]

train: the corpus (fortunes: built from the Debian package `fortunes` + `fortunes-min`, one
class per file of /usr/share/games/fortunes, texts split on lines holding only `%`; never
committed), then the real stages ingest, tokenize, split, train in --work, once: the model
folder stays there for `measure`. Defaults: the issue's setting, the default recipe at
tokenize.max_length 64 for three epochs (BBC: pass --max-length 128 --epochs 1).
measure: every quantization variant of that model's float32 export, on the test split: the
share of test labels agreeing with PyTorch and with float32 ONNX, the largest probability
difference to PyTorch, the largest move of a text's probabilities between scored alone and
in a batch (of 16, shuffled, between the two longest test texts: issue 51), and documents/s on
--docs test texts (each contender in turn, best of --repeats) with the ratio to float32 ONNX and
to PyTorch, all in the same run. "alone" variants score every text in its own run.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC, fortunes_corpus  # noqa: E402

log = logging.getLogger("int8-agreement")


def train(args) -> None:
    import yaml

    from stages import ingest, split, tokenize
    from stages import train as train_stage
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    source = fortunes_corpus(work / "corpus", params["ingest"]["min_per_class"]) if args.corpus == "fortunes" else BBC
    params["ingest"]["source"] = str(source)
    params["tokenize"]["max_length"] = args.max_length
    params["train"].update(epochs=args.epochs, max_steps=args.max_steps)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    p = ["--params", str(work / "params.yaml")]
    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
    tokenize.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json", "--histogram", "h.csv"])
    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
    train_stage.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                          "--curve", "curve.csv", "--guards", "guards.json", "--movement", "mv.csv",
                          "--run-file", "run.json", "--checkpoint-dir", "ckpt"])


def weight_nodes(fp32: Path) -> dict[str, int | None]:
    """The graph's MatMul/Gemm nodes with a weight (an initializer) -> their encoder layer, or
    None outside the encoder layers (the pooler, the classifier, a head's own layers)."""
    import onnx
    graph = onnx.load(str(fp32), load_external_data=False).graph
    weights = {init.name for init in graph.initializer}
    out = {}
    for node in graph.node:
        if node.op_type in ("MatMul", "Gemm") and any(i in weights for i in node.input):
            layer = re.search(r"/encoder/layer\.(\d+)/", node.name)
            out[node.name] = int(layer.group(1)) if layer else None
            if node.op_type == "Gemm":  # dynamic quantization renames a Gemm it turns into a MatMul
                out[node.name + "_MatMul"] = out[node.name]
    return out


def variants(fp32: Path, calib: list[list[int]]) -> dict:
    """name -> callable(target path) writing that quantization of `fp32`."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)
    import numpy as np

    class Calibration(CalibrationDataReader):
        """Training documents, one per run (unpadded: the ranges a served text's activations take)."""

        def __init__(self):
            self.rewind()

        def get_next(self):
            return next(self.rows, None)

        def rewind(self):
            self.rows = iter([{"input_ids": np.asarray([r], dtype=np.int64),
                               "attention_mask": np.ones((1, len(r)), dtype=np.int64)} for r in calib])

    nodes = weight_nodes(fp32)
    last = max(v for v in nodes.values() if v is not None)
    head = [n for n, layer in nodes.items() if layer is None]
    ends = [n for n, layer in nodes.items() if layer in (0, last)]

    def dynamic(**kw):
        return lambda t: quantize_dynamic(str(fp32), str(t), weight_type=QuantType.QInt8, **kw)

    def static(**kw):
        return lambda t: quantize_static(str(fp32), str(t), Calibration(), quant_format=QuantFormat.QDQ,
                                         activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                         calibrate_method=CalibrationMethod.MinMax, **kw)
    from textclf.model.export import quantize_int8
    return {
        "per-row activations (shipped)": lambda t: quantize_int8(fp32, t),
        "dynamic per-channel (before)": dynamic(per_channel=True),
        "dynamic, MatMul only (embeddings, head float32)": dynamic(per_channel=True, op_types_to_quantize=["MatMul"],
                                                                   nodes_to_exclude=head),
        "dynamic, head + first/last layer float32": dynamic(per_channel=True, nodes_to_exclude=head + ends),
        "static QDQ per-channel MinMax, MatMul": static(per_channel=True, op_types_to_quantize=["MatMul"],
                                                        nodes_to_exclude=head),
    }


ALONE = "dynamic per-channel, every text alone"  # today's file, one text per run: invariant too


def largest_move(predictor, test: list, rng) -> float:
    """The largest probability difference of 16 test texts of spread lengths between each
    scored alone and scored in one batch, shuffled, and each between the two longest."""
    import numpy as np
    order = np.argsort([len(r) for r in test])
    rows = [test[i] for i in order[np.linspace(0, len(test) - 3, 16).astype(int)]]
    longs = [test[order[-1]], test[order[-2]]]
    alone = np.concatenate([predictor.proba_of_ids([r]) for r in rows])
    perm = rng.permutation(len(rows))
    ways = [predictor.proba_of_ids(rows), predictor.proba_of_ids([rows[i] for i in perm])[np.argsort(perm)],
            np.concatenate([predictor.proba_of_ids([longs[0], r, longs[1]])[1:2] for r in rows])]
    return max(float(np.abs(w - alone).max()) for w in ways)


def docs_per_s(run, rows: list, best: float) -> float:
    start = time.perf_counter()
    run(rows)
    return max(best, len(rows) / (time.perf_counter() - start))


def measure(args) -> None:
    import numpy as np
    import torch

    from textclf.files import read_json
    from textclf.inference.onnx_predictor import OnnxPredictor
    from textclf.inference.proba import predict_proba
    from textclf.model.batching import read_token_splits
    from textclf.model.checksums import write_checksums
    from textclf.model.export import export_model, format_folder
    from textclf.model.modeling import load_classifier, load_tokenizer, pad_id
    work = Path(args.work).resolve()
    torch.set_num_threads(args.threads)
    os.environ["TEXTCLF_ONNX_THREADS"] = str(args.threads)
    model, labels = load_classifier(work / "model")
    splits = read_token_splits(str(work / "t.parquet"), str(work / "sp.parquet"), labels, names=("train", "test"))[0]
    test, train_ids = splits["test"].input_ids, list(splits["train"].input_ids)
    rng = np.random.default_rng(0)
    calib = [list(train_ids[i]) for i in rng.choice(len(train_ids), args.calibration, replace=False)]
    pad = pad_id(load_tokenizer(str(work / "model")))
    torch_probs = predict_proba(model, test, 16, pad, torch.device("cpu"))  # (N, C)
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "export"
        export_model(work / "model", export, "onnx-int8")
        folders = {"float32": format_folder(export, "onnx", Path(tmp) / "float32")}
        for name, write in variants(export / "model.onnx", calib).items():
            folder = format_folder(export, "onnx", Path(tmp) / f"v{len(folders)}")
            start = time.perf_counter()
            write(folder / "model.onnx")
            write_checksums(folder)
            log.warning("%s: quantized in %.1f s", name, time.perf_counter() - start)
            folders[name] = folder
        predictors = {name: OnnxPredictor(f, 16) for name, f in folders.items()}
        predictors[ALONE] = OnnxPredictor(folders["dynamic per-channel (before)"], 1)
        moves = {name: largest_move(p, list(test), rng) for name, p in predictors.items()}
        probs = {name: p.proba_of_ids(test) for name, p in predictors.items()}
        speed_rows = [test[i] for i in rng.choice(len(test), min(args.docs, len(test)), replace=False)]
        runs = {"pytorch": lambda rows: predict_proba(model, rows, 16, pad, torch.device("cpu")),
                **{name: p.proba_of_ids for name, p in predictors.items()}}
        speed = dict.fromkeys(runs, 0.0)
        for rep in range(args.repeats):  # contenders in turn, each rotation starting elsewhere
            names = list(runs)[rep % len(runs):] + list(runs)[:rep % len(runs)]
            for name in names:
                speed[name] = docs_per_s(runs[name], speed_rows, speed[name])
    ref, f32 = torch_probs.argmax(axis=1), probs["float32"].argmax(axis=1)
    n = len(ref)
    print(f"\n{work.name}: {n} test documents, {len(labels)} classes, PyTorch accuracy "
          f"{(ref == np.asarray(splits['test'].labels)).mean():.4f}; {len(speed_rows)} documents timed, "
          f"{args.threads} threads, best of {args.repeats}\n")
    print("| variant | agreement with PyTorch | with float32 ONNX | largest prob diff | moved by its batch | docs/s | "
          "/ float32 ONNX | / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| PyTorch | | | | | {speed['pytorch']:.1f} | {speed['pytorch'] / speed['float32']:.2f}x | 1.00x |")
    for name, pr in probs.items():
        got = pr.argmax(axis=1)
        print(f"| {name} | {(got == ref).sum()} / {n} ({(got == ref).mean():.2%}) | {(got == f32).mean():.2%} | "
              f"{np.abs(pr - torch_probs).max():.4f} | {moves[name]:.2g} | {speed[name]:.1f} | "
              f"{speed[name] / speed['float32']:.2f}x | "
              f"{speed[name] / speed['pytorch']:.2f}x |")
    log.info("params: %s", read_json(work / "model" / "params.json").get("train"))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["train", "measure"])
    parser.add_argument("--work", required=True)
    parser.add_argument("--corpus", choices=["fortunes", "bbc"], default="fortunes")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=0, help="train.max_steps (0: the epochs decide)")
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calibration", type=int, default=200, help="training documents static QDQ calibrates on")
    args = parser.parse_args()
    {"train": train, "measure": measure}[args.mode](args)
