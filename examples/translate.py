"""Train a Japanese→English Transformer, evaluate it, export it and reload the export.

This is `tfblocks-train` (the console script installed with the package; see
`tfblocks-train --help` for every flag). With no arguments (what `make demo` runs) it
trains `transformer_tiny` on the embedded phrasebook (no download), reports BLEU, chrF
and exact match on the held-out test split, translates 今日のランチはカレーだ。,
writes the model and the SavedModel into the run folder, reloads the SavedModel and
translates again.

Examples:
  python examples/translate.py
  python examples/translate.py --corpus-dir ../shared/data/small_parallel_enja \
      --hparams transformer_small --epochs 20 --output runs/enja
  python examples/translate.py --tsv jpn.txt --source-column 1 --target-column 0 \
      --strategy mirrored --dtype-policy mixed_bfloat16
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from tfblocks.cli.train import run  # isort: skip  (first, so that TensorFlow loads quietly)

if __name__ == "__main__":
    run()
