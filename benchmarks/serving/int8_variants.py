"""Which per-row int8 variant agrees with float32 on many classes (issue 61 item 1): the shipped
quantization against ones that keep a MatMul family or an encoder layer in float32, 7-bit
activations, and SmoothQuant's per-channel factors (x / s against s · W, s from training
documents' activation ranges), each measured on a split of a trained model: agreement of labels
with float32 ONNX (which agrees with PyTorch to 1e-5: the export's check), the largest
probability difference, and documents/s against float32 in the same run.

    .venv/bin/python benchmarks/serving/int8_variants.py --model-dir /tmp/accept-fortunes/repo/models/model \\
        --tokens /tmp/accept-fortunes/repo/data/processed/tokens.parquet \\
        --splits /tmp/accept-fortunes/repo/data/processed/splits.parquet

(the model folder, tokens and splits of `benchmarks/recipes/pipeline.sh`'s run, or any
pipeline's models/model and data/processed). Every variant quantizes rows alone, so each is
batch-invariant by construction, as the shipped one is.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: timing
from timing import ROOT  # noqa: E402,F401  (first: this checkout's textclf)

log = logging.getLogger("int8-variants")
FAMILIES = {"query/key/value": "/attention/self/", "attention output": "/attention/output/dense/",
            "FFN in": "/intermediate/dense/", "FFN out": "/output/dense/"}


def in_family(name: str, part: str) -> bool:
    return part in name and not (part == "/output/dense/" and "/attention/" in name)


def activation_ranges(fp32: Path, rows: list) -> dict:
    """Each weight MatMul's input -> its (K,) largest |x| per channel over `rows` (token id
    lists, one run each, unpadded: what a served text's activations take)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    model = onnx.load(str(fp32))
    weights = {i.name for i in model.graph.initializer}
    inputs = sorted({n.input[0] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights})
    model.graph.output.extend(onnx.helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None) for x in inputs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    found: dict = {}
    for r in rows:
        feed = {"input_ids": np.asarray([r], np.int64), "attention_mask": np.ones((1, len(r)), np.int64)}
        outs = session.run(inputs, {k: v for k, v in feed.items() if k in names})
        for x, v in zip(inputs, outs):
            m = np.abs(v.reshape(-1, v.shape[-1])).max(axis=0)
            found[x] = np.maximum(found.get(x, m), m)
    return found


def smooth_factors(fp32: Path, ranges: dict, alpha: float) -> dict:
    """SmoothQuant: s_j = max|x_j|^α / max|W_j|^(1−α), over every weight that input feeds."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    graph = onnx.load(str(fp32)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    wmax: dict = {}
    for n in graph.node:
        if n.op_type == "MatMul" and n.input[1] in weights and weights[n.input[1]].ndim == 2:
            m = np.abs(weights[n.input[1]]).max(axis=1)
            wmax[n.input[0]] = np.maximum(wmax.get(n.input[0], m), m)
    return {x: np.clip(ranges[x] ** alpha / np.maximum(wmax[x], 1e-8) ** (1 - alpha), 1e-2, 1e2).astype(np.float32)
            for x in wmax}


def optimized(fp32: Path, target: Path, attention: bool, config: dict) -> Path:
    """ONNX Runtime's transformer optimizer (BERT fusions: skip-LayerNorm, bias-GELU, embedding
    LayerNorm and, with `attention`, the fused Attention, whose query/key/value weights are no
    MatMul the per-row quantizer replaces) -> target."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    options = FusionOptions("bert")
    options.enable_attention = attention
    optimize_model(str(fp32), model_type="bert", num_heads=config["num_attention_heads"],
                   hidden_size=config["hidden_size"], optimization_options=options).save_model_to_file(str(target))
    return target


def weights_only(fp32: Path, target: Path) -> None:
    """Each MatMul weight rounded to per-channel int8 and back, activations float: what the
    weights' rounding alone moves (ONNX Runtime folds the dequantized weights: float32 speed)."""
    import onnx
    from onnx import numpy_helper

    from textclf.model.quantize import int8_columns
    model = onnx.load(str(fp32))
    feeds = {n.input[1] for n in model.graph.node if n.op_type == "MatMul"}
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if init.name in feeds and w.ndim == 2:
            q, scale = int8_columns(w)
            init.CopyFrom(numpy_helper.from_array((q * scale).astype(w.dtype), init.name))
    onnx.save(model, str(target))


def variants(fp32: Path, ranges: dict, layers: int) -> dict:
    """name -> quantize_rows keyword arguments (`optimize`: the graph optimizer first, with or
    without attention fusion; `float32`: no quantization)."""
    out: dict = {"per-row int8 (shipped)": {}}
    for attention in (False, True):
        how = "with" if attention else "without"
        out[f"float32, optimizer {how} attention fusion"] = {"optimize": attention, "float32": True}
        out[f"per-row int8, optimizer {how} attention fusion"] = {"optimize": attention}
    for fam, part in FAMILIES.items():
        out[f"{fam} float32"] = {"keep_float": lambda n, part=part: in_family(n, part)}
    for k in range(layers):
        out[f"layer {k} float32"] = {"keep_float": lambda n, k=k: f"/layer.{k}/" in n}
    out["int8 weights only, float activations"] = {"weights_only": True}
    out["7-bit activations"] = {"levels": 63}
    for alpha in (0.5, 0.8):
        out[f"SmoothQuant α {alpha}"] = {"smooth": smooth_factors(fp32, ranges, alpha)}
    out["SmoothQuant α 0.5, 7-bit"] = {"smooth": smooth_factors(fp32, ranges, 0.5), "levels": 63}
    return out


def cascade(probs, ref, taus=(0.02, 0.05, 0.1, 0.2)) -> list:
    """Each text answered by int8, but by float32 where int8's top-two margin is under tau ->
    [(tau, agreement with float32, share of texts scored again)]: per text, so batch-invariant."""
    import numpy as np
    top = np.sort(probs, axis=1)[:, -2:]
    again = (top[:, 1] - top[:, 0])[:, None] < np.asarray(taus)[None, :]  # (N, taus)
    same = probs.argmax(axis=1) == ref.argmax(axis=1)
    return [(tau, float((same | again[:, k]).mean()), float(again[:, k].mean())) for k, tau in enumerate(taus)]


def main() -> None:
    import numpy as np

    from textclf.inference.onnx_predictor import OnnxPredictor
    from textclf.model.batching import read_token_splits
    from textclf.model.checksums import write_checksums
    from textclf.model.export import export_model
    from textclf.model.modeling import load_classifier
    from textclf.model.quantize import quantize_rows
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--splits", required=True)
    p.add_argument("--split", default="validation")
    p.add_argument("--docs", type=int, default=0, help="the split's first N documents (0: all)")
    p.add_argument("--calibration", type=int, default=200, help="training documents for SmoothQuant's ranges")
    p.add_argument("--only", nargs="*", help="variant names to run (default: all)")
    args = p.parse_args()
    labels = load_classifier(args.model_dir)[1]
    config = json.loads((Path(args.model_dir) / "config.json").read_text())  # heads and width, for the optimizer
    splits = read_token_splits(args.tokens, args.splits, labels, names=(args.split, "train"))[0]
    ids = list(splits[args.split].input_ids)[:args.docs or None]
    rng = np.random.default_rng(0)
    train_ids = list(splits["train"].input_ids)
    calib = [list(train_ids[i]) for i in rng.choice(len(train_ids), min(args.calibration, len(train_ids)), replace=False)]
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "float32"
        export_model(args.model_dir, export, "onnx")
        start = time.perf_counter()
        ref = OnnxPredictor(export).proba_of_ids(ids)
        f32_speed = len(ids) / (time.perf_counter() - start)
        ranges = activation_ranges(export / "model.onnx", calib)
        layers = 1 + max(int(n.split("/layer.")[1].split("/")[0]) for n in ranges if "/layer." in n)
        top = np.sort(ref, axis=1)[:, -2:]
        margins = top[:, 1] - top[:, 0]
        print(f"\n{len(ids)} {args.split} documents, {len(labels)} classes; float32 ONNX {f32_speed:.1f} docs/s; "
              "top-two probability margin under 0.01 / 0.02 / 0.05: " +
              " / ".join(f"{(margins < m).mean():.2%}" for m in (0.01, 0.02, 0.05)) + "\n")
        print("| variant | agreement with float32 | largest prob diff | docs/s | / float32 |\n|---|---|---|---|---|")
        cascades: list = []
        for name, kw in variants(export / "model.onnx", ranges, layers).items():
            if args.only and name not in args.only:
                continue
            folder = Path(tmp) / "v"
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(export, folder)
            kw = dict(kw)
            source = export / "model.onnx"
            if "optimize" in kw:
                source = optimized(source, Path(tmp) / "optimized.onnx", kw.pop("optimize"), config)
            if kw.pop("weights_only", False):
                weights_only(source, folder / "model.onnx")
            elif kw.pop("float32", False):
                shutil.copyfile(source, folder / "model.onnx")
            else:
                quantize_rows(source, folder / "model.onnx", **kw)
            write_checksums(folder)
            start = time.perf_counter()
            probs = OnnxPredictor(folder).proba_of_ids(ids)
            speed = len(ids) / (time.perf_counter() - start)
            agree = (probs.argmax(axis=1) == ref.argmax(axis=1)).mean()
            print(f"| {name} | {agree:.2%} | {np.abs(probs - ref).max():.4f} | {speed:.1f} | {speed / f32_speed:.2f}x |",
                  flush=True)
            cascades.append((name, cascade(probs, ref)))
        for name, found in cascades:  # int8, and float32 where int8's top two are closer than tau
            print(f"{name}, float32 again under int8's margin " +
                  "; ".join(f"{tau}: agreement {a:.2%}, {r:.1%} of documents again" for tau, a, r in found))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
