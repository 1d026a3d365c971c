#!/usr/bin/env bash
# Issue 59's acceptance run: the whole pipeline with params.yaml's defaults and only ingest.source
# changed (`dvc exp run -S ingest.source=...`), in a fresh clone of this repository's HEAD, then
# each stage's wall time from DVC's log and the served model against the baseline from metrics.json.
#   bash benchmarks/recipes/pipeline.sh CORPUS_FOLDER WORK_DIR [-S key=value ...]
# (a recipe's params after the two folders go to `dvc exp run` as they are)
# e.g. .venv/bin/python benchmarks/corpora.py fortunes /tmp/fortunes-full
#      bash benchmarks/recipes/pipeline.sh /tmp/fortunes-full /tmp/accept-fortunes
set -euo pipefail
corpus=$(realpath "$1"); work=$2; shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work"
git clone -q "$root" "$work/repo"
cd "$work/repo"
export PATH="$root/.venv/bin:$PATH" HF_HUB_OFFLINE=1  # dvc runs each stage's python from PATH
export PYTHONPATH="$work/repo/src"  # the clone's package, not the editable install's working tree
# each stage's start, stamped: the stage's wall time is the gap to the next stamp
dvc exp run -S "ingest.source=$corpus" "$@" -n accept 2>&1 | while IFS= read -r line; do
  printf '%s %s\n' "$(date +%s)" "$line"; done > "$work/repro.log"
python - "$work/repro.log" reports/metrics.json <<'PY'
import json, re, sys
stamps = [(int(t), rest) for t, _, rest in (l.partition(" ") for l in open(sys.argv[1], newline="\n"))]  # tqdm: \r
starts = [(t, m.group(1)) for t, rest in stamps if (m := re.match(r"Running stage '(\w+)'", rest))]
for (t, name), (t2, _) in zip(starts, starts[1:] + [(stamps[-1][0], "")]):
    print(f"{name:10s} {(t2 - t) / 60:6.1f} min")
m = json.load(open(sys.argv[2]))
base, blend, cmp = m["baseline"], m.get("blend"), m["comparison"]
print(f"fine-tune test accuracy / macro-F1 {m['accuracy']:.4f} / {m['macro_f1']:.4f}; "
      f"vs baseline: {cmp['verdict']} (McNemar p {cmp['mcnemar_p']:.3g})")
print(f"baseline  test accuracy / macro-F1 {base['accuracy']:.4f} / {base['macro_f1']:.4f}")
if blend:
    print(f"served blend (w {blend['weight']}) {blend['accuracy']:.4f} / {blend['macro_f1']:.4f}; "
          f"vs baseline: {blend['comparison']['verdict']} (McNemar p {blend['comparison']['mcnemar_p']:.3g})")
print(f"served format {m['serving']['format']}; n_test {m['n_test']}")
PY
