#!/usr/bin/env bash
# Accuracy benchmark: the whole pipeline on the real BBC corpus with CPU-friendly settings,
# as a DVC experiment in a temporary copy (the workspace is left alone).
#   bash benchmarks/bbc_accuracy.sh [extra -S overrides...]
# Then: .venv/bin/dvc exp show ; the run is in MLflow (mlflow ui in the project root).
set -euo pipefail
cd "$(dirname "$0")/.."
BBC="$(realpath "${BBC:-../shared/data/bbc}")"
export PATH="$PWD/.venv/bin:$PATH"
time dvc exp run --temp \
  -S "ingest.source=$BBC" \
  -S tokenize.max_length=256 -S tokenize.truncation=head \
  -S train.epochs=3 -S train.batch_size=16 -S train.lr_encoder=1.0e-4 \
  "$@"
dvc exp show --only-changed --drop 'confusion.*|per_class.*'
