"""Pre-LN vs Post-LN, with and without learning-rate warm-up, on the phrasebook.

The study notes ask whether Pre-LN (LayerNorm before each sub-layer, t2t v2+) trains
more easily than the paper's Post-LN (LayerNorm after the residual add); Xiong et al.
(2020) found that Post-LN needs a warm-up and fails without one at a high learning rate.
This script trains the same encoder–decoder four ways on the embedded Japanese→English
phrasebook: Pre-LN / Post-LN × warm-up / none. Everything else is equal: seed (same
data order), model size, number of steps and peak learning rate. "Warm-up" is a linear
ramp from 0 to the peak over `--warmup-steps`, then constant; "none" starts at the
peak. The loss is t2t's label-smoothed cross-entropy (0 = perfect), accuracy is the
teacher-forced token accuracy on the dev split.

Writes the folder `--output-dir` as a whole: pre_vs_post_ln.png (training loss every
`--log-every` steps), pre_vs_post_ln.md and pre_vs_post_ln.csv (final train loss, dev
loss, dev accuracy). The folder must be new, empty or an earlier output of this script
(checked before training); it appears complete or not at all, and a folder holding
anything else is refused, never overwritten.

Run:  python examples/pre_vs_post_ln.py [--steps 300] [--learning-rate 3e-3]
      [--warmup-steps 100] [--layers 2] [--output-dir runs/pre_vs_post_ln]
"""

import argparse
import csv
import math
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tfblocks import text

# tfblocks' internal writer of whole folders (the exports use it too); not public API.
from tfblocks._files import check_directory, replace_directory

KIND = "tfblocks-pre-vs-post-ln"  # what the output folder's marker file names

# (label, norm_first, with warm-up)
RUNS = [
    ("Pre-LN", True, True),
    ("Pre-LN", True, False),
    ("Post-LN", False, True),
    ("Post-LN", False, False),
]


def datasets(args):
    """Shared BPE tokenizer, then static-shape train (repeated) and dev datasets."""
    splits = text.load_phrasebook(seed=args.seed, size=args.phrasebook_size)
    tokenizer, _ = text.train_tokenizers(splits["train"], args.vocab_size, model_type="bpe")
    kwargs = {"batch_tokens": args.batch_tokens, "max_length": 16, "shapes": "max_length"}
    train = text.make_dataset(splits["train"], tokenizer, tokenizer, seed=args.seed, **kwargs)
    dev = text.make_dataset(splits["dev"], tokenizer, tokenizer, shuffle=False, **kwargs)
    if not len(dev):
        raise ValueError("The dev split fills no batch: raise --phrasebook-size or --vocab-size.")
    return tokenizer.vocabulary_size, train.repeat(), dev


def train(args, vocab_size, train_data, dev_data, norm_first, warmup):
    """Trains one model; returns (steps, training losses, dev metrics)."""
    keras.utils.set_random_seed(args.seed)
    hp = tfblocks.hparams(
        args.hparams,
        vocab_size=vocab_size,
        norm_first=norm_first,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
    )
    # CosineDecay with alpha=1 never decays: a linear warm-up to the peak, then constant.
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=1, alpha=1.0, warmup_target=args.learning_rate, warmup_steps=warmup
    )
    model = tfblocks.build_transformer(hp)
    learning_rate = schedule if warmup else args.learning_rate
    tfblocks.compile_transformer(
        model, hp, jit_compile=args.jit_compile, learning_rate=learning_rate
    )
    epochs = args.steps // args.log_every  # a Keras "epoch" = one point of the curve
    history = model.fit(
        train_data, epochs=epochs, steps_per_epoch=args.log_every, verbose=0, shuffle=False
    )
    dev = model.evaluate(dev_data, verbose=0, return_dict=True)
    steps = [args.log_every * (i + 1) for i in range(epochs)]
    return steps, history.history["loss"], dev


def write_outputs(results, args):
    """The loss-curve PNG and the Markdown / CSV tables, as the folder `--output-dir`."""
    path = replace_directory(
        args.output_dir, lambda staging: _write(results, args, staging), KIND, arg="--output-dir"
    )
    print(f"wrote {path}")


def _write(results, args, folder):
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, (steps, losses, _) in results.items():
        style = "-" if name.startswith("Pre") else "--"
        ax.plot(steps, [min(x, 20.0) for x in losses], style, label=name)  # NaN leaves a gap
    ax.set(xlabel="training step", ylabel="smoothed cross-entropy (train)", yscale="log")
    layers = f"{args.layers}+{args.layers} layers"
    ax.set_title(f"phrasebook ja→en, {args.hparams}, {layers}, peak lr {args.learning_rate:g}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "pre_vs_post_ln.png"), dpi=100)
    plt.close(fig)
    header = ["run", "final train loss", "dev loss", "dev accuracy"]
    rows = [
        [name, f"{losses[-1]:.4f}", f"{dev['loss']:.4f}", f"{dev['accuracy']:.4f}"]
        for name, (_, losses, dev) in results.items()
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|---:|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    with open(os.path.join(folder, "pre_vs_post_ln.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(folder, "pre_vs_post_ln.csv"), "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    parser.add_argument("--hparams", default="transformer_tiny")
    parser.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--batch-tokens", type=int, default=1024, help="64 pairs × 16 tokens")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--phrasebook-size", type=int, default=25_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--output-dir", default="runs/pre_vs_post_ln")
    args = parser.parse_args()
    try:  # a folder that would be refused is refused now, not after the training
        check_directory(args.output_dir, KIND, arg="--output-dir")
    except ValueError as error:
        parser.error(str(error))

    vocab_size, train_data, dev_data = datasets(args)
    results = {}
    for norm, norm_first, with_warmup in RUNS:
        name = f"{norm}, {'warm-up ' + str(args.warmup_steps) if with_warmup else 'no warm-up'}"
        start = time.perf_counter()
        warmup = args.warmup_steps if with_warmup else 0
        results[name] = train(args, vocab_size, train_data, dev_data, norm_first, warmup)
        losses = results[name][1]
        print(
            f"{name}: train loss {losses[0]:.3f} → {losses[-1]:.3f}, "
            f"{'finite' if all(map(math.isfinite, losses)) else 'NaN'}, "
            f"{time.perf_counter() - start:.0f} s"
        )
    write_outputs(results, args)


if __name__ == "__main__":
    main()
