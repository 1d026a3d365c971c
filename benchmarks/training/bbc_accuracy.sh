#!/usr/bin/env bash
# Accuracy benchmark: the whole pipeline on the real BBC corpus with the recipe in
# benchmarks/bbc.preset, once per split seed (0-4), as queued DVC experiments; prints model
# vs TF-IDF per seed, mean ± sd and the paired difference's 95 % t-interval.
#   bash benchmarks/training/bbc_accuracy.sh [--name bbc] [--seeds 0 1 2] [-S key=value ...]
# The runs are in MLflow too (mlflow ui in the project root).
set -euo pipefail
cd "$(dirname "$0")/../.."
BBC="$(realpath "${BBC:-../shared/data/bbc}")"
export PATH="$PWD/.venv/bin:$PATH"
time python -m textclf.multiseed --source "$BBC" --preset benchmarks/bbc.preset "$@"
