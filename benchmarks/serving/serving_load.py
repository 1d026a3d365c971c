"""`mlflow models serve` under load, per format (benchmarks/serving/serving_formats.py serve): each
format's pyfunc logged into a temp store, served on 127.0.0.1 with 1 and 4 workers (threads
per worker: the cores shared out), 8 concurrent clients each sending one short text per
request for --seconds -> requests/s, p50 / p99 latency, errors."""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

log = logging.getLogger("serving-load")
SHORT = ["Shares in the carmaker fell after it cut its profit forecast for the year.",
         "The striker scored twice as the home side won the cup final.",
         "The new phone has a faster chip and a better camera, the firm said.",
         "The minister said the bill would be put to a vote next week."]
CLIENTS, WORKERS = 8, (1, 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def logged_models(model_dir: str, work: Path) -> dict[str, str]:
    import mlflow

    from textclf.inference.serving import log_pyfunc
    from textclf.model.export import export_model
    mlflow.set_tracking_uri(f"sqlite:///{work / 'mlflow.db'}")
    uris = {}
    with mlflow.start_run():
        uris["torch"] = log_pyfunc(model_dir, SHORT[:2]).model_uri
        export_model(model_dir, work / "int8", "onnx-int8")
        uris["onnx-int8"] = log_pyfunc(model_dir, SHORT[:2], work / "int8").model_uri
    return uris


def load(url: str, seconds: float) -> dict:
    latencies: list[float] = []
    errors = [0]
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        body = json.dumps({"dataframe_split": {"columns": ["text"], "data": [[SHORT[k % len(SHORT)]]]}}).encode()
        while time.monotonic() < stop:
            start = time.perf_counter()
            try:
                req = urllib.request.Request(f"{url}/invocations", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as resp:
                    resp.read()
                latencies.append(time.perf_counter() - start)
            except Exception:  # counted: any failed request is an error of the server under load
                errors[0] += 1
    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    begin = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ms = np.asarray(latencies) * 1000
    return {"requests_per_s": len(ms) / (time.monotonic() - begin), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "errors": errors[0]}


def serve(uri: str, workers: int, work: Path, seconds: float) -> dict:
    port = free_port()
    threads = str(max(1, (os.cpu_count() or 2) // workers))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}", "OMP_NUM_THREADS": threads,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # it execs uvicorn
           "TEXTCLF_ONNX_THREADS": threads, "TEXTCLF_SERVE_MAX_ROWS": "1000"}
    cmd = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "-h", "127.0.0.1", "-p", str(port),
           "--workers", str(workers), "--env-manager", "local"]
    with open(work / "serve.log", "a") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start: {(work / 'serve.log').read_text()[-2000:]}")
                time.sleep(0.5)
        load(f"http://127.0.0.1:{port}", 3)  # warm every worker
        return load(f"http://127.0.0.1:{port}", seconds)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)


def main(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        uris = logged_models(args.model_dir, Path(tmp))
        print("| format | workers | requests/s | p50 ms | p99 ms | errors |")
        print("|---|---|---|---|---|---|")
        for fmt, uri in uris.items():
            for workers in WORKERS:
                r = serve(uri, workers, Path(tmp), args.seconds)
                print(f"| {fmt} | {workers} | {r['requests_per_s']:.1f} | {r['p50_ms']:.0f} | "
                      f"{r['p99_ms']:.0f} | {r['errors']} |", flush=True)
