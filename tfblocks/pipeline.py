"""The translation job end to end: corpus → tokenizer → `fit` → evaluation → export.

`examples/translate.py` is a thin command line over these functions, so every step
can also be imported and reused: `load_splits` reads the embedded phrasebook or a real
corpus, `train` fits `build_transformer` with the t2t recipe (resumable through
`keras.callbacks.BackupAndRestore` when given an output directory), `evaluate`
scores translations with sacrebleu's corpus BLEU (its default `13a` tokenization,
the WMT standard for English output) and the exact-match rate, and `Timer` keeps the
wall time of each phase.
"""

import dataclasses
import json
import os
import random
import time

import keras
import sacrebleu

from tfblocks.export import Translator
from tfblocks.models.hparams import HParams, hparams
from tfblocks.models.transformer import build_transformer
from tfblocks.text import (
    SubwordTokenizer,
    load_phrasebook,
    make_dataset,
    read_parallel,
    read_tsv,
    train_tokenizers,
)
from tfblocks.training import compile_transformer, get_strategy

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


class TimeLimit(keras.callbacks.Callback):
    """Stops `fit` at the first batch that ends after `seconds` of training."""

    def __init__(self, seconds):
        super().__init__()
        if not seconds > 0:
            raise ValueError(f"`seconds` must be > 0, got seconds={seconds!r}.")
        self.seconds = seconds
        self.stopped_early = False

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if time.perf_counter() - self._start > self.seconds:
            self.model.stop_training = True
            self.stopped_early = True


def parse_overrides(text):
    """Parses `"key=value,key=value"` into typed `HParams` overrides.

    Values are converted to the type of the field's default (bool accepts
    true/false/1/0). Unknown keys raise `ValueError` listing the valid ones.
    """
    if not text:
        return {}
    fields = {f.name: f for f in dataclasses.fields(HParams)}
    defaults = dataclasses.asdict(hparams("transformer_tiny"))
    overrides = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise ValueError(f"`--hparams-override` items must be key=value, got {item!r}.")
        if key not in fields:
            raise ValueError(
                f"Unknown hparams field {key!r} in --hparams-override; valid: {sorted(fields)}."
            )
        kind = type(defaults[key])
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"`{key}` must be true or false, got {key}={value!r}.")
            overrides[key] = value.lower() in ("true", "1")
        else:
            try:
                overrides[key] = kind(value)
            except ValueError as error:
                raise ValueError(
                    f"`{key}` must be a {kind.__name__}, got {key}={value!r}."
                ) from error
    return overrides


def _split_pairs(pairs, seed, held_out=0.02):
    """Deterministic train/dev/test split for a corpus that comes as one file."""
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    n = max(1, int(len(pairs) * held_out / 2))
    return {"train": pairs[2 * n :], "dev": pairs[:n], "test": pairs[n : 2 * n]}


def load_splits(corpus_dir=None, tsv=None, source="ja", target="en", seed=0):
    """Train/dev/test `(source, target)` pairs.

    Args:
        corpus_dir: a folder with line-aligned `{train,dev,test}.{source,target}`
            files (e.g. small_parallel_enja; spaces in `.ja` files are removed).
        tsv: a Tatoeba/manythings file `English<TAB>Japanese<TAB>attribution`;
            2 % of it is held out for dev and test.
        source: source language suffix.
        target: target language suffix.
        seed: seed of the phrasebook / of the TSV split.

    Returns:
        `{"train": [...], "dev": [...], "test": [...]}`; the embedded phrasebook when
        neither `corpus_dir` nor `tsv` is given.
    """
    if corpus_dir and tsv:
        raise ValueError("Give either `corpus_dir` or `tsv`, not both.")
    if corpus_dir:
        return {
            split: list(
                read_parallel(
                    os.path.join(corpus_dir, f"{split}.{source}"),
                    os.path.join(corpus_dir, f"{split}.{target}"),
                )
            )
            for split in ("train", "dev", "test")
        }
    if tsv:
        columns = {"en": 0, "ja": 1}
        corpus = read_tsv(tsv, src_column=columns[source], tgt_column=columns[target])
        return _split_pairs(corpus, seed)
    return load_phrasebook(seed=seed)


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


def evaluate(translator, pairs, batch_size=256):
    """Translates `pairs`' sources; returns `(metrics, hypotheses)`.

    Metrics: `bleu` (sacrebleu corpus BLEU, 13a tokenization, cased), `exact_match`
    (share of translations equal to the reference after stripping spaces at the
    ends), and `sentences`.
    """
    sources = [s for s, _ in pairs]
    references = [t for _, t in pairs]
    hypotheses = []
    for start in range(0, len(sources), batch_size):
        batch = translator(sources[start : start + batch_size]).numpy()
        hypotheses.extend(h.decode("utf-8") for h in batch)
    metric = sacrebleu.BLEU(tokenize="13a")
    bleu = metric.corpus_score(hypotheses, [references])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    metrics = {
        "bleu": round(bleu.score, 2),
        "bleu_signature": str(metric.get_signature()),
        "exact_match": exact / max(len(pairs), 1),
        "sentences": len(pairs),
    }
    return metrics, hypotheses


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
