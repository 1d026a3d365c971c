"""The served formats side by side in one run (issue 31): PyTorch float32 (the Predictor the
torch pyfunc runs), ONNX float32, ONNX int8 (OnnxPredictor, what the ONNX pyfunc runs; per-row
activation scales), the int8 shipped before issue 51 (ONNX Runtime's dynamic quantization, one
scale per batch), both ONNX formats after ONNX Runtime's transformer optimizer, and
transformers.pipeline on the same model.

    .venv/bin/python benchmarks/serving/serving_formats.py speed [--model-dir models/model] [--docs 160]
        [--lengths 128 256]
    .venv/bin/python benchmarks/serving/serving_formats.py accuracy [--seeds 0 1 2 3 4] [--epochs 1]
    .venv/bin/python benchmarks/serving/serving_formats.py serve [--model-dir models/model] [--seconds 30]

speed: documents/s on BBC articles at batch 1 and 16, max_length --lengths, each contender
in its own process with --threads threads, contenders alternating, the best of --repeats.
accuracy: per split seed, the real stages on BBC (ingest, tokenize, split, train, export,
evaluate) in a temp folder; the test accuracy of PyTorch, ONNX float32 and int8, the label
agreement with PyTorch and the paired verdict (evaluate's serving check).
serve: `mlflow models serve` of each format's pyfunc, 1 and 4 workers, 8 concurrent clients
each sending one short text per request for --seconds: requests/s, p50 and p99, errors.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/serving/: int8_variants
from timing import ROOT, answer, child, rotated  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC, sample_texts  # noqa: E402

FORMATS = ("onnx", "onnx-int8")
DYNAMIC = "int8 dynamic (before)"  # the int8 export of main before issue 51, for the cost of invariance
OPT_F32, OPT_INT8 = "onnx optimized", "int8 optimized"  # after ONNX Runtime's transformer optimizer
log = logging.getLogger("serving-formats")


def contender(spec: dict) -> dict:
    """One contender, one setting, in this process -> {docs_per_s}."""
    import torch
    torch.set_num_threads(spec["threads"])
    os.environ["TEXTCLF_ONNX_THREADS"] = str(spec["threads"])
    texts = sample_texts(spec["docs"])
    bs, ml = spec["batch_size"], spec["max_length"]
    if spec["contender"] == "pipeline":
        from transformers import pipeline
        pipe = pipeline("text-classification", model=spec["model_dir"], device="cpu")
        run = lambda batch: pipe(batch, batch_size=bs, truncation=True, max_length=ml, top_k=None)  # noqa: E731
    else:
        from textclf.inference.loading import load_predictor
        folder = spec["model_dir"] if spec["contender"] == "torch" else spec["exports"][spec["contender"]]
        predictor = load_predictor(folder, bs)
        predictor.max_length = ml  # type: ignore[attr-defined]
        run = predictor.predict_proba
    run(texts[:4])  # warm-up: first-call allocations and kernel choices
    start = time.perf_counter()
    for i in range(0, len(texts), max(bs, 16)):  # requests of one batch (or 16 texts at batch 1)
        if bs == 1:
            for t in texts[i:i + 16]:
                run([t])
        else:
            run(texts[i:i + bs])
    return {"docs_per_s": len(texts) / (time.perf_counter() - start)}


def exports_of(model_dir: str, work: Path) -> dict[str, str]:
    from textclf.model.export import export_model
    out = {}
    for fmt in FORMATS:
        export_model(model_dir, work / fmt, fmt)
        out[fmt] = str(work / fmt)
    out[DYNAMIC] = str(dynamic_int8(work, work / "dynamic"))
    out.update(optimized_exports(model_dir, work))
    return out


def optimized_exports(model_dir: str, work: Path) -> dict[str, str]:
    """Both formats again after ONNX Runtime's transformer optimizer (issue 61 item 2: BERT
    fusions, attention included; int8 quantizes the optimized graph's remaining MatMuls by rows)."""
    import shutil

    from int8_variants import optimized
    from textclf.model.checksums import write_checksums
    from textclf.model.quantize import quantize_rows
    config = json.loads((Path(model_dir) / "config.json").read_text())
    graph = optimized(work / "onnx" / "model.onnx", work / "optimized.onnx", True, config)
    out = {}
    for fmt, name in (("onnx", OPT_F32), ("onnx-int8", OPT_INT8)):
        folder = work / f"{fmt}-optimized"
        shutil.copytree(work / fmt, folder)
        if fmt == "onnx":
            shutil.copyfile(graph, folder / "model.onnx")
        else:
            quantize_rows(graph, folder / "model.int8.onnx")
        write_checksums(folder)
        out[name] = str(folder)
    return out


def dynamic_int8(work: Path, folder: Path) -> Path:
    """The int8 export again, its file quantized as before issue 51: ONNX Runtime's dynamic
    quantization, weights per channel, one activation scale per batch."""
    import shutil

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from textclf.model.checksums import write_checksums
    shutil.copytree(work / "onnx-int8", folder)
    quantize_dynamic(str(work / "onnx-int8" / "model.onnx"), str(folder / "model.int8.onnx"),
                     weight_type=QuantType.QInt8, per_channel=True)
    write_checksums(folder)
    return folder


def speed(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        exports = exports_of(args.model_dir, Path(tmp))
        contenders = ["pipeline", "torch", *FORMATS, DYNAMIC, OPT_F32, OPT_INT8]
        rows = []
        for ml in args.lengths:
            for bs in (1, 16):
                best = {c: 0.0 for c in contenders}
                for rep in range(args.repeats):
                    for c in rotated(contenders, rep):
                        spec = {"contender": c, "model_dir": args.model_dir, "exports": exports, "batch_size": bs,
                                "max_length": ml, "threads": args.threads, "docs": args.docs if bs > 1 else args.docs // 2}
                        result = child(__file__, "child", json.dumps(spec))
                        if result is None:
                            sys.exit(f"{c} failed (its error above)")
                        best[c] = max(best[c], result["docs_per_s"])
                rows.append((ml, bs, best))
    print("| max_length | batch | " + " | ".join(f"{c} docs/s" for c in best)
          + " | int8 / pipeline | int8 / torch | before / pipeline | int8 / before | optimized float32 / float32 "
          "| optimized int8 / pipeline |")
    print("|---" * (len(best) + 8) + "|")
    for ml, bs, best in rows:
        print(f"| {ml} | {bs} | " + " | ".join(f"{v:.1f}" for v in best.values())
              + f" | {best['onnx-int8'] / best['pipeline']:.2f}x | {best['onnx-int8'] / best['torch']:.2f}x"
              + f" | {best[DYNAMIC] / best['pipeline']:.2f}x | {best['onnx-int8'] / best[DYNAMIC]:.2f}x"
              + f" | {best[OPT_F32] / best['onnx']:.2f}x | {best[OPT_INT8] / best['pipeline']:.2f}x |")


def before(work: Path, p: list[str], evaluate) -> dict:
    """The int8 export quantized as before issue 51 (dynamic_int8), checked by evaluate as the
    shipped one is."""
    folder = dynamic_int8(work, work / "int8-dynamic")
    evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                       "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                       "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", str(folder),
                       "--data-diff", "diff.json", "--metrics", "m-pc.json", "--confusion", "conf.csv",
                       "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet"])
    return json.loads((work / "m-pc.json").read_text())["serving"]


def accuracy(args) -> None:
    import numpy as np
    import yaml

    from stages import baseline, evaluate, export, ingest, split, tokenize, train
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        for seed in args.seeds:
            work = Path(tmp) / f"seed{seed}"
            work.mkdir()
            os.chdir(work)
            params = yaml.safe_load((ROOT / "params.yaml").read_text())
            params["ingest"]["source"] = str(BBC)
            params["tokenize"]["max_length"] = args.max_length
            params["split"]["seed"] = seed
            params["train"].update(epochs=args.epochs, batch_size=16, lr_encoder=1e-4)
            params["evaluate"]["register"] = False
            p = ["--params", str(work / "params.yaml")]
            result = {}
            for fmt in FORMATS:
                params["serve"]["format"] = fmt
                (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
                if fmt == FORMATS[0]:
                    ingest.main(p + ["--corpus", "c.parquet", "--report", "r.json"])
                    tokenize.main(p + ["--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json",
                                       "--histogram", "h.csv"])
                    split.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"])
                    train.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                                    "--curve", "curve.csv", "--guards", "guards.json", "--movement", "mv.csv",
                                    "--run-file", "run.json", "--checkpoint-dir", "ckpt"])
                    baseline.main(p + ["--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                                       "--predictions", "bp.parquet"])
                export.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                                 "--out", fmt])
                evaluate.main(p + ["--tokens", "t.parquet", "--splits", "sp.parquet", "--model-dir", "model",
                                   "--run-file", "run.json", "--guards", "guards.json", "--baseline", "b.json",
                                   "--baseline-predictions", "bp.parquet", "--corpus", "c.parquet", "--export", fmt,
                                   "--data-diff", "diff.json", "--metrics", f"m-{fmt}.json", "--confusion", "conf.csv",
                                   "--per-class", "pc.csv", "--per-class-json", "pc.json", "--predictions", "pred.parquet"])
                metrics = json.loads((work / f"m-{fmt}.json").read_text())
                result["torch"], result["n"] = metrics["accuracy"], metrics["n_test"]
                result[fmt] = metrics["serving"]
            result[DYNAMIC] = before(work, p, evaluate)
            rows.append((seed, result))
            log.warning("seed %d: %s", seed, json.dumps(result))
    kinds = ("onnx-int8", DYNAMIC)
    print("| split seed | test docs | torch acc | onnx acc | onnx agreement | "
          + " | ".join(f"{k} {c}" for k in kinds for c in ("acc", "agreement", "largest prob diff", "verdict", "served")) + " |")
    print("|---" * (5 + 5 * len(kinds)) + "|")
    for seed, r in rows:
        cells = [f"{100 * r[k]['accuracy']:.2f} | {100 * r[k]['agreement']:.2f} % | {r[k]['max_prob_diff']:.4f} | "
                 f"{r[k]['verdict']} | {r[k]['format']}" for k in kinds]
        print(f"| {seed} | {r['n']} | {100 * r['torch']:.2f} | {100 * r['onnx']['accuracy']:.2f} | "
              f"{100 * r['onnx']['agreement']:.2f} % | " + " | ".join(cells) + " |")
    mean = lambda key, k: 100 * float(np.mean([r[k][key] if k != "torch" else r["torch"] for _, r in rows]))  # noqa: E731
    print(f"| mean | | {mean('accuracy', 'torch'):.2f} | {mean('accuracy', 'onnx'):.2f} | "
          f"{mean('agreement', 'onnx'):.2f} % | "
          + " | ".join(f"{mean('accuracy', k):.2f} | {mean('agreement', k):.2f} % | | |" for k in kinds) + " |")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if sys.argv[1:2] == ["child"]:
        answer(contender(json.loads(sys.argv[2])))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["speed", "accuracy", "serve"])
    parser.add_argument("--model-dir", default=str(ROOT / "models" / "model"))
    parser.add_argument("--docs", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256], help="speed: the max_lengths")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    {"speed": speed, "accuracy": accuracy, "serve": lambda a: __import__("serving_load").main(a)}[args.mode](args)
