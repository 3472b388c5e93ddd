"""The translation job end to end: corpus → tokenizer → `fit` → evaluation → export.

`examples/translate.py` is a thin command line over these functions, so every step
can also be imported and reused: `tokenizers_for` trains (or reloads) the shared
tokenizer, `train` fits `build_transformer` with the t2t recipe (resumable through
`keras.callbacks.BackupAndRestore` when given an output directory), `write_metrics`
writes metrics.json, and `Timer` keeps the wall time of each phase. The other steps
live where they belong: `tfblocks.text.load_splits` (corpora),
`tfblocks.models.hparams.parse_overrides`, `tfblocks.training.callbacks.TimeLimit` and
`tfblocks.evaluation` (BLEU, chrF; the only importer of sacrebleu).
"""

import json
import os
import time

import keras

from tfblocks.export import Translator
from tfblocks.models.builders import build_transformer
from tfblocks.text import (
    SubwordTokenizer,
    make_dataset,
    train_tokenizers,
)
from tfblocks.training import compile_transformer, get_strategy
from tfblocks.training.callbacks import TimeLimit

# The demo's defaults: a shorter warm-up and a lower constant than t2t's 8000 / 2.0,
# which are tuned for hundreds of thousands of steps; peak rate ≈ 1.9e-3 at d=128.
DEMO_OVERRIDES = "learning_rate_warmup_steps=200,learning_rate_constant=0.35,max_length=32"


class Timer:
    """Wall time of named phases: `with timer("train"): ...`, then `timer.seconds`."""

    def __init__(self):
        self.seconds = {}

    def __call__(self, phase):
        timer = self

        class _Phase:
            def __enter__(self):
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                elapsed = time.perf_counter() - self.start
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + elapsed

        return _Phase()


def tokenizers_for(splits, vocab_size, model_type, output_dir=None):
    """A shared tokenizer trained on the training split, reused from `output_dir` if saved."""
    path = os.path.join(output_dir, "tokenizer.model") if output_dir else None
    if path and os.path.exists(path):
        tokenizer = SubwordTokenizer.load(path)
        return tokenizer, tokenizer
    tokenizer, _ = train_tokenizers(splits["train"], vocab_size=vocab_size, model_type=model_type)
    if path:
        os.makedirs(output_dir, exist_ok=True)
        tokenizer.save(path)
    return tokenizer, tokenizer


def train(
    splits,
    tokenizer,
    hp,
    epochs,
    batch_tokens,
    strategy="auto",
    output_dir=None,
    seed=0,
    static_shapes=False,
    time_limit=None,
):
    """Fits `build_transformer(hp)` on `splits["train"]`; returns `(model, history)`.

    With `output_dir`, training is resumable (`BackupAndRestore` in
    `output_dir/backup`) and writes TensorBoard logs to `output_dir/logs`.

    `static_shapes=False` batches by length buckets without XLA (every new batch
    shape would cost an XLA compilation); `static_shapes=True` pads every batch to
    `[batch_tokens // max_length, max_length]` and compiles the step once with XLA
    (what TPUs need). `time_limit` (seconds) stops training after the first batch
    that ends past it (the epoch in progress is cut short).
    """
    keras.utils.set_random_seed(seed)
    strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
    replicas = strategy.num_replicas_in_sync
    data = make_dataset(
        splits["train"],
        tokenizer,
        tokenizer,
        batch_tokens=batch_tokens * replicas,
        max_length=hp.max_length,
        seed=seed,
        static_shapes=static_shapes,
    )
    dev = make_dataset(
        splits["dev"], tokenizer, tokenizer, batch_tokens=batch_tokens, max_length=hp.max_length,
        shuffle=False, static_shapes=static_shapes,
    )  # fmt: skip
    with strategy.scope():
        model = build_transformer(hp)
        compile_transformer(model, hp, jit_compile=static_shapes)
    callbacks = [TimeLimit(time_limit)] if time_limit else []
    if output_dir:
        callbacks += [
            keras.callbacks.BackupAndRestore(os.path.join(output_dir, "backup")),
            keras.callbacks.TensorBoard(os.path.join(output_dir, "logs"), write_graph=False),
        ]
    history = model.fit(
        data, validation_data=dev, epochs=epochs, callbacks=callbacks, shuffle=False, verbose=1
    )
    return model, history


def make_translator(model, tokenizer, max_length, beam_size, alpha):
    """A `Translator` for the trained model (beam_size 1 = greedy)."""
    return Translator(model, tokenizer, tokenizer, max_length, beam_size=beam_size, alpha=alpha)


def write_metrics(output_dir, metrics):
    """Writes `metrics.json` into `output_dir` atomically; returns its path."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "metrics.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(metrics, f, ensure_ascii=False, indent=2)
    os.replace(path + ".tmp", path)
    return path
