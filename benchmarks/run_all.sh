#!/usr/bin/env bash
# Every table of benchmarks/README.md and the README's Results, measured in one sitting:
# runs each benchmark's full command in turn on this checkout and writes its output to
# OUT_DIR/STEP.txt (with the start, end, load average and exit status of the step), the
# machine and commit to OUT_DIR/header.txt and one line per step to OUT_DIR/summary.txt.
#
# Usage: benchmarks/run_all.sh OUT_DIR [STEP ...]     (default: every step, in this order)
# Steps: header demo enja serve serve_stop_early serve_cold serve_overhead
#        train_throughput scaling seq_scaling input_shapes accelerator_check cli_startup
#        corpus_scale serve_marian backends fresh_demo
# About 100 minutes on 2 cores (enja trains 45 minutes); run it on an otherwise idle machine
# and copy the tables from OUT_DIR. A step that fails is recorded and the next one runs.
# The serve steps decode with the model that the enja step trained (OUT_DIR/enja/model;
# SERVE_PRESET=DIR for another). fresh_demo clones this checkout and runs `make demo`
# there, which installs its packages (it needs the package index). demo, fresh_demo and
# enja refuse an OUT_DIR that already holds their folder (demo, clone, enja): their figures
# are those of a run from an empty folder. Environment: PYTHON (default .venv/bin/python),
# ENJA_DATA (small_parallel_enja, as enja.sh reads it).
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [STEP ...]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
STEPS=(header demo enja serve serve_stop_early serve_cold serve_overhead train_throughput
  scaling seq_scaling input_shapes accelerator_check cli_startup corpus_scale serve_marian
  litert backends fresh_demo)
[ $# -gt 0 ] && STEPS=("$@")
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
DATA="${ENJA_DATA:-$ROOT/../shared/data/small_parallel_enja}"
PRESET="${SERVE_PRESET:-$OUT/enja/model}"
cd "$ROOT" || exit 2

now() { echo "$(date -u '+%Y-%m-%d %H:%M:%S') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

header() {
  echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + local changes')"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)," \
    "family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)," \
    "model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | cut -d: -f2 | xargs)," \
    "$(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB"
  echo "flags$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
    grep -E '^(avx2|fma|avx512f|avx512_bf16|avx512_vnni|amx_bf16)$' | sed 's/^/ /' | tr -d '\n')"
  echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$PYTHON" -c 'import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in
      ("tensorflow", "keras", "keras-hub", "ctranslate2", "sacrebleu")))'
}

fresh() {  # a run folder that must start empty: never someone's earlier run
  if [ -e "$1" ]; then
    echo "$1 exists: remove it or choose another OUT_DIR" >&2
    return 1
  fi
}

demo() {
  fresh "$OUT/demo" &&
    /usr/bin/time -f "wall %e s" "$PYTHON" examples/translate.py --output "$OUT/demo"
}

fresh_demo() {
  fresh "$OUT/clone" && git clone -q "$ROOT" "$OUT/clone" &&
    /usr/bin/time -f "make demo from a fresh clone: wall %e s" make -C "$OUT/clone" demo
}

train_throughput() {
  "$PYTHON" benchmarks/train_throughput.py --recipes layers --shapes a base big --rounds 3 --steps 2
}

scaling() { "$PYTHON" benchmarks/scaling.py; }

seq_scaling() { "$PYTHON" benchmarks/seq_scaling.py; }

input_shapes() {
  "$PYTHON" benchmarks/input_shapes.py --corpus-dir "$DATA" --limit-train 10000 --epochs 2 \
    --modes dynamic,buckets-xla,packed,packed-xla --bleu-sentences 100
}

corpus_scale() { "$PYTHON" benchmarks/corpus_scale.py --sizes 100000,2000000 --timeout 900; }

enja() {
  fresh "$OUT/enja" && PYTHON="$PYTHON" ENJA_DATA="$DATA" benchmarks/enja.sh "$OUT/enja" &&
    cat "$OUT/enja/metrics.json"
}

serve() {
  "$PYTHON" benchmarks/serve.py --preset "$PRESET" --data "$DATA" --rounds 3 \
    --batch1-sentences 100 --engines "Translator,SavedModel,SavedModel no-XLA,CT2 float32,CT2 int8"
}

serve_stop_early() {
  "$PYTHON" benchmarks/serve.py --preset "$PRESET" --data "$DATA" --rounds 3 \
    --batch1-sentences 20 --engines "SavedModel,CT2 float32" --beam-only --stop-early
}

serve_cold() {
  "$PYTHON" benchmarks/serve.py --preset "$PRESET" --data "$DATA" --rounds 3 --cold --stop-early
}

serve_overhead() {
  "$PYTHON" benchmarks/serve.py --preset "$PRESET" --data "$DATA" --rounds 3 --overhead
}

serve_marian() { "$PYTHON" benchmarks/serve.py --marian-base --rounds 2 --sentences 128; }

litert() { "$PYTHON" benchmarks/litert.py --preset "$PRESET" --data "$DATA" --rounds 3; }

backends() { "$PYTHON" benchmarks/backends.py --shape base --rounds 3; }

accelerator_check() { "$PYTHON" benchmarks/accelerator_check.py; }

cli_startup() { "$PYTHON" benchmarks/cli_startup.py --rounds 10; }

for step in "${STEPS[@]}"; do
  if ! declare -F "$step" >/dev/null; then
    echo "$0: unknown step $step" >&2
    exit 2
  fi
done
for step in "${STEPS[@]}"; do
  echo "$step: start $(now)"
  if [ "$step" = header ]; then
    header >"$OUT/header.txt" 2>&1
    status=$?
    cat "$OUT/header.txt"
  else
    (
      echo "# $step: start $(now)"
      "$step"
      status=$?
      echo "# $step: end $(now), exit $status"
      exit $status
    ) >"$OUT/$step.txt" 2>&1
    status=$?
  fi
  echo "$step: exit $status, end $(now)" | tee -a "$OUT/summary.txt"
done
