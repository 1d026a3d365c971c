#!/usr/bin/env bash
# GPU check (issue 5), one script for a CUDA machine with the project installed:
#   bash benchmarks/gpu.sh bench [speed/throughput.py flags]  # bert-base-sized random weights, bf16:
#                                     # samples/s and MFU (e.g. --gpu-variants ours ours-batch128)
#   bash benchmarks/gpu.sh pipeline   # wall time of a full BBC `dvc repro` with the packaged MiniLM
#   bash benchmarks/gpu.sh all
# BBC=path/to/bbc (default ../shared/data/bbc); logs go to $OUT (default /tmp/gpu-check).
# On a machine without the project's packages (the workplace's lent GPU machine has torch but
# not DVC or MLflow) the script fills /tmp/site from what was carried: .dev/whl/*.whl installed,
# .dev/site/ copied, .dev/fp16/**.safetensors upcast to float32 at the same path (half-size
# weights to fit the transfer limit; float32 master weights as on any other machine).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-check}"
BBC="$(realpath -m "${BBC:-../shared/data/bbc}")"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:${PYTHONPATH:-}"
PY="$(command -v python || command -v python3)"

setup() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
    | tee "$OUT/nvidia-smi.txt"
  if [ -d .dev/whl ] && [ ! -d /tmp/site/dvc ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .dev/whl/*.whl || exit 1
  fi
  [ -f .dev/bbc.tgz ] && [ ! -d "$BBC" ] && mkdir -p "$BBC" && tar xzf .dev/bbc.tgz -C "$BBC" --strip-components 1
  [ -d .dev/site ] && mkdir -p /tmp/site && cp -r .dev/site/. /tmp/site/
  [ -d .dev/fp16 ] && "$PY" - <<'EOF'
from pathlib import Path
from safetensors.torch import load_file, save_file
for src in Path(".dev/fp16").rglob("*.safetensors"):
    dst = Path("/tmp/site") / src.relative_to(".dev/fp16")
    tensors = {k: v.float() if v.is_floating_point() else v for k, v in load_file(src).items()}
    save_file(tensors, dst, metadata={"format": "pt"})
    print("upcast", src, "->", dst)
EOF
  # dvc.yaml runs `python`; some images only have python3.
  command -v python >/dev/null || { mkdir -p /tmp/site/bin && ln -sf "$PY" /tmp/site/bin/python; }
  if [ -d /tmp/site ]; then export PYTHONPATH="/tmp/site:$PYTHONPATH" PATH="/tmp/site/bin:$PATH"; fi
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers",
transformers.__version__, torch.cuda.get_device_name(0))'
}

bench() {
  "$PY" benchmarks/speed/throughput.py --gpu-bench --bbc "$BBC" --max-lengths 512 --repeats 2 "$@" \
    2>&1 | tee "$OUT/gpu_bench.log"
}

pipeline() {
  # A throwaway git repo when the copy has none: DVC needs one (or core.no_scm).
  [ -d .git ] || { git init -q && echo /.dev/ >>.git/info/exclude && git add -A && git -c user.name=gpu -c user.email=gpu@localhost \
    commit -qm "gpu check" ; } || dvc config --local core.no_scm true
  "$PY" - "$BBC" <<'EOF'
import sys, yaml
p = yaml.safe_load(open("params.yaml"))  # the settings of benchmarks/training/bbc_accuracy.sh
p["ingest"]["source"] = sys.argv[1]
p["tokenize"].update(max_length=256, truncation="head")
p["train"].update(epochs=3, batch_size=16, lr_encoder=1.0e-4)
yaml.safe_dump(p, open("params.yaml", "w"), sort_keys=False)
EOF
  local TIMEFORMAT="%R s"
  # Each output line stamped with the clock, so the log shows where the time went.
  { time dvc repro 2>&1 | while IFS= read -r line; do echo "$(date +%T.%N | cut -c1-12) $line"; done \
      >"$OUT/dvc_repro.log" ; } 2>"$OUT/pipeline.txt"
  tail -3 "$OUT/dvc_repro.log"; echo "full BBC dvc repro: $(cat "$OUT/pipeline.txt")"
  grep -E "Running stage|epoch|test accuracy" "$OUT/dvc_repro.log" | cut -c1-160
  "$PY" -c 'import json; m = json.load(open("reports/metrics.json"))
print({k: m[k] for k in ("accuracy", "macro_f1", "ece", "n_test", "baseline", "gap", "guards")})' \
    | tee -a "$OUT/pipeline.txt"
  for cmd in status repro status repro; do
    { time dvc $cmd >/dev/null 2>&1 ; } 2>&1 | sed "s/^/no-op dvc $cmd: /" | tee -a "$OUT/pipeline.txt"
  done
  cp reports/report.md "$OUT/" 2>/dev/null || true
}

setup
case "${1:-all}" in
  bench) bench "${@:2}" ;;
  pipeline) pipeline ;;
  all) bench; pipeline ;;
  *) echo "usage: bash benchmarks/gpu.sh [bench|pipeline|all]" >&2; exit 2 ;;
esac
