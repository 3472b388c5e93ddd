#!/usr/bin/env bash
# The README's small_parallel_enja run: train ≤ 45 minutes, evaluate on the test split,
# export. Usage: benchmarks/enja.sh OUTPUT_DIR [extra tfblocks-train flags]
# OUTPUT_DIR is a run folder: rerunning continues it (only figures from a run that
# started in an empty folder belong in the README); OUTPUT_DIR/metrics.json holds
# `bleu`, `chrf`, `history` (dev BLEU and seconds per epoch) and `seconds.train`. Packed
# rows: a higher dev BLEU at 15, 30 and 45 minutes than dynamic batches (benchmarks/README.md).
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUTPUT_DIR [tfblocks-train flags]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${ENJA_DATA:-$ROOT/../shared/data/small_parallel_enja}"
if [ ! -f "$DATA/train.ja" ]; then
  echo "$0: small_parallel_enja not found at $DATA (set ENJA_DATA)" >&2
  exit 2
fi
OUT="$1"
shift
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
exec "$PYTHON" "$ROOT/examples/translate.py" \
  --corpus-dir "$DATA" --hparams transformer_small --vocab-size 8000 \
  --tokenizer-model unigram --batch-tokens 4096 --shapes packed --epochs 200 \
  --max-train-minutes 45 --dev-sentences 500 --early-stopping 5 --average-last 3 \
  --output "$OUT" "$@"
