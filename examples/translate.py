"""Train a Japanese→English Transformer, evaluate it, export it and reload the export.

With no arguments (what `make demo` runs) it trains `transformer_tiny` on the embedded
phrasebook (no download), reports BLEU and exact match on the phrasebook's held-out
test split (word combinations never seen together in training), translates a few
sentences including 今日のランチはカレーだ。, exports the `Translator` SavedModel,
reloads it from disk and translates the same sentences again with the reloaded copy.

Examples:
  python examples/translate.py
  python examples/translate.py --corpus-dir ../shared/data/small_parallel_enja \
      --hparams transformer_small --epochs 20 --output runs/enja
  python examples/translate.py --tsv jpn.txt --strategy mirrored --mixed-precision mixed_bfloat16

Everything the script does lives in `tfblocks.pipeline`; BLEU is sacrebleu's corpus
BLEU with its default 13a tokenization.
"""

import argparse
import os
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TFBLOCKS_QUIET", "1")  # no TensorFlow C++ log lines (--verbose)

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the reload)

from tfblocks import evaluation, pipeline, text
from tfblocks.models.hparams import parse_overrides
from tfblocks.text import RUNNING_EXAMPLE


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--corpus-dir", help="folder with {train,dev,test}.{ja,en}")
    data.add_argument("--tsv", help="Tatoeba/manythings file: English<TAB>Japanese<TAB>...")
    parser.add_argument("--hparams", default="transformer_tiny", help="t2t preset name")
    parser.add_argument(
        "--hparams-override",
        default=pipeline.DEMO_OVERRIDES,
        help="comma-separated key=value HParams overrides (default: %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens per batch")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--tokenizer-model", default="bpe", choices=["bpe", "unigram"])
    parser.add_argument(
        "--strategy", default="auto", choices=["auto", "default", "mirrored", "multi_worker", "tpu"]
    )
    parser.add_argument(
        "--mixed-precision", default=None, choices=["mixed_float16", "mixed_bfloat16"]
    )
    parser.add_argument(
        "--static-shapes",
        action="store_true",
        help="pad batches to max_length and compile the train step once with XLA",
    )
    parser.add_argument(
        "--max-train-minutes", type=float, default=None, help="stop training after this long"
    )
    parser.add_argument("--output", help="checkpoints, logs, tokenizer, export, metrics.json")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--limit-train", type=int, default=None, help="use only N train pairs")
    parser.add_argument("--limit-test", type=int, default=None, help="evaluate only N pairs")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.mixed_precision:
        keras.config.set_dtype_policy(args.mixed_precision)
    output = args.output or tempfile.mkdtemp(prefix="tfblocks-translate-")
    timer = pipeline.Timer()

    with timer("data"):
        splits = text.load_splits(args.corpus_dir, args.tsv, seed=args.seed)
        splits["train"] = splits["train"][: args.limit_train]
        splits["test"] = splits["test"][: args.limit_test]
        tokenizer, _ = pipeline.tokenizers_for(
            splits, args.vocab_size, args.tokenizer_model, output
        )
    sizes = {k: len(v) for k, v in splits.items()}
    print(f"pairs {sizes}; shared vocabulary {tokenizer.vocabulary_size} ({args.tokenizer_model})")

    overrides = parse_overrides(args.hparams_override)
    hp = tfblocks.hparams(args.hparams, vocab_size=tokenizer.vocabulary_size, **overrides)
    with timer("train"):
        model, history = pipeline.train(
            splits,
            tokenizer,
            hp,
            args.epochs,
            args.batch_tokens,
            args.strategy,
            output,
            args.seed,
            static_shapes=args.static_shapes,
            time_limit=args.max_train_minutes * 60 if args.max_train_minutes else None,
        )
    print(f"{args.hparams}: {model.count_params():,} parameters")

    translator = pipeline.make_translator(
        model, tokenizer, hp.max_length, args.beam_size, args.alpha
    )
    with timer("evaluate"):
        metrics, hypotheses = evaluation.evaluate(translator, splits["test"])
    print(f"test BLEU {metrics['bleu']} ({metrics['bleu_signature']}), exact match "
          f"{metrics['exact_match']:.4f} over {metrics['sentences']} sentences")  # fmt: skip
    for (source, reference), hypothesis in list(zip(splits["test"], hypotheses, strict=True))[:3]:
        print(f"  {source}\n    reference:   {reference}\n    translation: {hypothesis}")
    samples = [RUNNING_EXAMPLE[0]] + [source for source, _ in splits["test"][:2]]

    with timer("export"):
        path = translator.export(os.path.join(output, "export"))
    with timer("reload"):
        reloaded = tf.saved_model.load(path).signatures["serving_default"]
        again = reloaded(text=tf.constant(samples))["translation"].numpy()
    in_memory = translator(samples).numpy()
    print(f"exported to {path}; translations (in memory | reloaded SavedModel):")
    for sample, a, b in zip(samples, in_memory, again, strict=True):
        print(f"  {sample} -> {a.decode()} | {b.decode()}")

    metrics.update(
        preset=args.hparams,
        hparams_override=args.hparams_override,
        epochs=len(history.history["loss"]),
        final_loss=history.history["loss"][-1],
        parameters=model.count_params(),
        samples={t: b.decode() for t, b in zip(samples, again, strict=True)},
        reload_matches=bool((in_memory == again).all()),
        seconds={k: round(v, 1) for k, v in timer.seconds.items()},
    )
    print(f"wall time per phase (s): {metrics['seconds']}")
    print(f"metrics written to {pipeline.write_metrics(output, metrics)}")


if __name__ == "__main__":
    main()
