"""Training-step throughput: tfblocks vs an identically shaped keras-hub Transformer.

Measures target tokens per second of one full training step (forward, loss,
backward, Adam update: the `train_function` that `model.fit` runs, called through
`train_on_batch`, compiled with XLA) of

- tfblocks: `build_transformer(hp)`;
- keras-hub: the same encoder–decoder made of `keras_hub.layers`
  `TokenAndPositionEmbedding` (one, shared by source, target and the tied softmax),
  `TransformerEncoder` / `TransformerDecoder` (`normalize_first=True`, i.e. Pre-LN,
  LayerNorm epsilon 1e-6) and a final LayerNorm per stack.

Two recipes, reported in separate tables:

- `layers` (the like-for-like comparison): both models get exactly the same work
  apart from the layers themselves — `SparseCategoricalCrossentropy(from_logits=True,
  ignore_class=0)`, `Adam(1e-4)` (Keras defaults otherwise), no metrics, XLA, dropout
  0.1 on the residuals, the embeddings and the attention weights, and no dropout
  inside the FFN on either side (keras-hub has none; tfblocks' `relu_dropout` is set
  to 0). What still differs is each library's own design: keras-hub's attention
  projections have biases and its positions are learned (t2t: no biases, sinusoids).
- `t2t`: tfblocks with its full recipe, `compile_transformer(hp)` (t2t smoothed
  cross-entropy, masked accuracy, perplexity, the preset's dropouts including
  `relu_dropout`, t2t's Adam and learning-rate schedule) against keras-hub with
  Keras' cross-entropy and accuracy, the same Adam and schedule and the same
  residual/attention dropout. Not the same work (the loss and the FFN dropout
  differ): it shows what a user of each library runs, not whose layers are faster.

Shapes: `a` (vocab 8000, d 256, 4 heads, filter 1024, 3+3 layers, batch 32 × 64),
`base` (transformer_base width: vocab 8000, d 512, 8 heads, filter 2048, 6+6, batch
8 × 64), `big` (transformer_big width: vocab 8000, d 1024, 16 heads, filter 4096, 6+6,
batch 4 × 64, sized for a 23 GiB, 2-core machine and a few minutes per run).

Each round runs tfblocks then keras-hub (then the matmul probe) for `--steps` steps
each, after `--warmup` untimed steps. Reported: the median step time of each model,
its spread ((max - min) / median over rounds), and the median of the per-round
ratios keras-hub time / tfblocks time (with their min–max): a machine that slows
down during a round slows both models of that round. Tokens are target positions:
batch × length per step (the batches have no padding). The load average before and
after the run is printed: figures from a loaded machine are not quiet-machine figures.

MFU (model FLOPs utilisation) = 3 × forward FLOPs of one step (matrix products only,
`tfblocks.models.complexity.model_cost` × batch, the same count for both models) / step time / the
matmul rate measured in the same rounds (an `--matmul-size`² `tf.matmul` under XLA;
the median of that shape's probes, so a load that changes between shapes does not skew
one shape's MFU with another's probes).

Run:  python benchmarks/train_throughput.py                          # a, base, big; both recipes
      python benchmarks/train_throughput.py --recipes layers --rounds 7
      python benchmarks/train_throughput.py --shapes base --recipes t2t
      python benchmarks/train_throughput.py --quick                  # smoke run, both recipes

Figures: benchmarks/README.md.
"""

import argparse
import datetime
import os
import platform
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras import ops
from shapes import SHAPES

from tfblocks import BOS_ID, PAD_ID, build_transformer, compile_transformer, hparams
from tfblocks.models.complexity import model_cost, total
from tfblocks.training import learning_rate_schedule

RECIPES = ("layers", "t2t")
# The `layers` recipe: the dropout both libraries have (residuals, embeddings,
# attention weights) at 0.1, none inside the FFN (keras-hub has no such dropout).
LAYERS_DROPOUT = {
    "layer_prepostprocess_dropout": 0.1,
    "attention_dropout": 0.1,
    "relu_dropout": 0.0,
}
LAYERS_LEARNING_RATE = 1e-4


class _ShiftRight(keras.layers.Layer):
    """Teacher forcing for the peer: [y0 … y_{T-1}] → [BOS, y0 … y_{T-2}]."""

    def call(self, ids):
        start = ops.full_like(ids[:, :1], BOS_ID)  # [B, 1]
        return ops.concatenate([start, ids[:, :-1]], axis=1)  # [B, T]


class _NotPadding(keras.layers.Layer):
    """Boolean padding mask `ids != PAD_ID`, [B, L]."""

    def call(self, ids):
        return ops.not_equal(ids, PAD_ID)


def build_keras_hub_transformer(hp, length):
    """The `build_transformer(hp)` architecture made of keras-hub layers.

    Residual, embedding and attention-weight dropout are `hp.layer_prepostprocess_dropout`
    (keras-hub has one `dropout` argument for both and none inside the FFN).
    """
    layers = keras_hub.layers
    source = keras.Input((length,), dtype="int32", name="inputs")
    target = keras.Input((length,), dtype="int32", name="targets")
    decoder_ids = _ShiftRight(name="shift_right")(target)
    source_mask = _NotPadding(name="source_padding")(source)
    target_mask = _NotPadding(name="target_padding")(decoder_ids)
    embedding = layers.TokenAndPositionEmbedding(
        hp.vocab_size, length, hp.hidden_size, tie_weights=True, name="embedding"
    )
    dropout = hp.layer_prepostprocess_dropout

    x = keras.layers.Dropout(dropout)(embedding(source))  # [B, S, d]
    for i in range(hp.num_encoder_layers):
        x = layers.TransformerEncoder(
            hp.filter_size,
            hp.num_heads,
            dropout=dropout,
            layer_norm_epsilon=1e-6,
            normalize_first=True,
            name=f"encoder_{i}",
        )(x, padding_mask=source_mask)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)

    y = keras.layers.Dropout(dropout)(embedding(decoder_ids))  # [B, T, d]
    for i in range(hp.num_decoder_layers):
        y = layers.TransformerDecoder(
            hp.filter_size,
            hp.num_heads,
            dropout=dropout,
            layer_norm_epsilon=1e-6,
            normalize_first=True,
            name=f"decoder_{i}",
        )(y, x, decoder_padding_mask=target_mask, encoder_padding_mask=source_mask)
    y = keras.layers.LayerNormalization(epsilon=1e-6, name="decoder_norm")(y)
    logits = embedding.token_embedding(y, reverse=True)  # [B, T, vocab], tied
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
    return keras.Model({"inputs": source, "targets": target}, logits, name="keras_hub")


def compile_keras_hub_transformer(model, hp):
    """The peer's side of the `t2t` recipe: t2t's Adam and schedule, Keras' loss."""
    optimizer = keras.optimizers.Adam(
        learning_rate=learning_rate_schedule(hp),
        beta_1=hp.optimizer_adam_beta1,
        beta_2=hp.optimizer_adam_beta2,
        epsilon=hp.optimizer_adam_epsilon,
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=XLA[0],
    )
    return model


# Whether both models train with XLA: [True]; --quick, a smoke run of one step a model,
# sets [False] (the step would spend most of its time compiling).
XLA = [True]


def compile_layers_only(model):
    """The `layers` recipe, identical for both models: Keras loss, Adam(1e-4), XLA."""
    model.compile(
        optimizer=keras.optimizers.Adam(LAYERS_LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD_ID),
        jit_compile=XLA[0],
    )
    return model


def build_models(hp, length, recipe):
    """`{"tfblocks": model, "keras-hub": model}`, compiled for `recipe`."""
    keras.utils.set_random_seed(0)
    if recipe == "layers":
        return {
            "tfblocks": compile_layers_only(build_transformer(hp)),
            "keras-hub": compile_layers_only(build_keras_hub_transformer(hp, length)),
        }
    return {
        "tfblocks": compile_transformer(build_transformer(hp), hp, jit_compile=XLA[0]),
        "keras-hub": compile_keras_hub_transformer(build_keras_hub_transformer(hp, length), hp),
    }


def describe(preset, hp, batch, length):
    """One line with the shape's sizes and dropout rates."""
    return (
        f"{preset} vocab={hp.vocab_size} d={hp.hidden_size} filter={hp.filter_size} "
        f"heads={hp.num_heads} layers={hp.num_encoder_layers}+{hp.num_decoder_layers} "
        f"batch={batch} length={length} dropout (residual/attention/relu)="
        f"{hp.layer_prepostprocess_dropout}/{hp.attention_dropout}/{hp.relu_dropout}"
    )


def make_batch(hp, batch, length, seed=0):
    """Random full-length id batches (ids ≥ 4 avoid PAD/EOS/UNK/BOS)."""
    rng = np.random.default_rng(seed)

    def ids():
        return tf.constant(rng.integers(4, hp.vocab_size, (batch, length)), tf.int32)

    source, target = ids(), ids()
    return {"inputs": source, "targets": target}, target


def time_steps(model, x, y, steps):
    """Mean seconds per training step over `steps` synchronous steps."""
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(x, y)  # returns Python floats: waits for the step
    return (time.perf_counter() - start) / steps


def matmul_probe(size, dtype):
    """A jitted `size`² matmul and a function timing it in FLOP/s."""
    a = tf.random.normal((size, size), dtype=dtype)
    b = tf.random.normal((size, size), dtype=dtype)
    matmul = tf.function(lambda a, b: tf.matmul(a, b), jit_compile=True)
    matmul(a, b).numpy()  # compile

    def flops_per_second(repeats=3):
        start = time.perf_counter()
        for _ in range(repeats):
            matmul(a, b).numpy()
        return 2 * size**3 * repeats / (time.perf_counter() - start)

    return flops_per_second


def shape_hparams(name, recipe="layers", dropout=None):
    """`(preset, hp, batch, length)` of a `SHAPES` entry for `recipe`.

    `layers` sets the dropout rates to `LAYERS_DROPOUT`; `t2t` keeps the preset's.
    `dropout`, when given, sets every rate (both recipes).
    """
    preset, overrides, batch, length = SHAPES[name]
    if recipe == "layers":
        overrides = {**overrides, **LAYERS_DROPOUT}
    if dropout is not None:
        overrides = {**overrides, **dict.fromkeys(LAYERS_DROPOUT, dropout)}
    return preset, hparams(preset, **overrides), batch, length


def load():
    """`"HH:MM:SSZ, load a b c"`: when, and how busy the machine was."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{now}, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}"


def run_shape(name, recipe, args, probe, matmul_rate):
    preset, hp, batch, length = shape_hparams(name, recipe, args.dropout)
    batch = args.batch or batch
    length = args.length or length
    x, y = make_batch(hp, batch, length)
    models = build_models(hp, length, recipe)
    print(f"\n[{recipe}] shape {name}: {describe(preset, hp, batch, length)}  ({load()})")
    for label, model in models.items():
        start = time.perf_counter()
        for _ in range(args.warmup):
            loss = model.train_on_batch(x, y, return_dict=True)["loss"]
        print(
            f"  {label}: {model.count_params():,} params, loss {loss:.3f}, "
            f"warm-up (incl. XLA compile) {time.perf_counter() - start:.1f} s"
        )

    seconds = {label: [] for label in models}
    probes = []  # this shape's matmul rates: its MFU uses them (the load may change)
    for round_ in range(args.rounds):
        for label, model in models.items():  # A B A B …
            seconds[label].append(time_steps(model, x, y, args.steps))
        probes.append(probe())
        matmul_rate.append(probes[-1])
        print(
            f"  round {round_ + 1}/{args.rounds}: "
            + ", ".join(f"{label} {s[-1] * 1e3:.0f} ms/step" for label, s in seconds.items())
            + f", matmul {matmul_rate[-1] / 1e9:.1f} GFLOP/s, load "
            + " ".join(f"{v:.2f}" for v in os.getloadavg())
        )

    model_flops = 3 * total(model_cost(hp, length, length)).flops * batch
    ratios = [b / a for a, b in zip(seconds["tfblocks"], seconds["keras-hub"], strict=True)]
    rows = {}
    for label, values in seconds.items():
        step = statistics.median(values)
        rows[label] = {
            "step_ms": step * 1e3,
            "tokens_per_s": batch * length / step,
            "spread": (max(values) - min(values)) / step,
            "seconds": values,
        }
    del models  # frees the big shape's weights before the next shape
    keras.backend.clear_session()
    return {
        "hp": hp,
        "batch": batch,
        "length": length,
        "flops": model_flops,
        "rows": rows,
        "ratio": statistics.median(ratios),
        "ratio_range": (min(ratios), max(ratios)),
        "matmul_rate": statistics.median(probes),
    }


def print_table(recipe, results):
    print(
        f"\n[{recipe}] "
        + (
            "layers only: identical loss, optimizer and dropout on both sides"
            if recipe == "layers"
            else "full t2t recipe for tfblocks (not the same work as keras-hub's step)"
        )
    )
    header = (
        f"{'shape':<6}{'model':<11}{'ms/step':>9}{'tokens/s':>11}{'spread':>8}"
        f"{'GFLOP/step':>12}{'GFLOP/s':>9}{'MFU':>7}{'ratio range':>14}{'tfblocks/keras-hub':>20}"
    )
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        low, high = result["ratio_range"]
        for label, row in result["rows"].items():
            rate = result["matmul_rate"]
            mfu = result["flops"] / (row["step_ms"] / 1e3) / rate
            print(
                f"{name:<6}{label:<11}{row['step_ms']:>9.1f}{row['tokens_per_s']:>11.0f}"
                f"{row['spread']:>8.0%}{result['flops'] / 1e9:>12.1f}{rate / 1e9:>9.1f}"
                f"{mfu:>7.1%}"
                + (
                    f"{f'{low:.3f}–{high:.3f}':>14}{result['ratio']:>19.3f}×"
                    if label == "tfblocks"
                    else ""
                )
            )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["a", "base", "big"])
    parser.add_argument(
        "--recipes",
        nargs="+",
        choices=RECIPES,
        default=list(RECIPES),
        help="layers: identical loss/optimizer/dropout on both sides; t2t: tfblocks' full recipe",
    )
    parser.add_argument("--rounds", type=int, default=5, help="A B rounds (median over them)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (XLA compile)")
    parser.add_argument("--batch", type=int, help="override the shapes' batch size")
    parser.add_argument("--length", type=int, help="override the shapes' source/target length")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument(
        "--dropout", type=float, help="set every dropout rate of both models to this value"
    )
    parser.add_argument(
        "--mixed-precision",
        choices=["mixed_bfloat16", "mixed_float16"],
        help="Keras dtype policy of both models (default float32); the matmul probe and "
        "MFU then use the compute dtype",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: shape quick (vocab 32, d 16, 1+1 layers, batch 2 × 8), 1 round of "
        "1 step after 1 warm-up step, a 64² matmul probe, no XLA",
    )
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "warmup", "matmul_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.quick:
        args.shapes, args.rounds, args.steps, args.warmup = ["quick"], 1, 1, 1
        args.matmul_size = 64
        XLA[0] = False
    return args


def main(argv=None):
    args = parse_args(argv)
    policy = args.mixed_precision or "float32"
    keras.mixed_precision.set_global_policy(policy)  # both models follow it
    compute_dtype = keras.mixed_precision.global_policy().compute_dtype
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, keras-hub "
        f"{keras_hub.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, {policy}, "
        + ("XLA (jit_compile=True)" if XLA[0] else "no XLA (--quick)")
    )
    print(f"start {load()}")
    probe = matmul_probe(args.matmul_size, tf.as_dtype(compute_dtype))
    matmul_rate = []  # FLOP/s probes, one per round, shared by all shapes and recipes
    results = {
        recipe: {name: run_shape(name, recipe, args, probe, matmul_rate) for name in args.shapes}
        for recipe in args.recipes
    }
    rate = statistics.median(matmul_rate)
    print(
        f"\nmatmul rate ({compute_dtype} {args.matmul_size}² tf.matmul, XLA): median "
        f"{rate / 1e9:.1f} GFLOP/s over {len(matmul_rate)} probes (max "
        f"{max(matmul_rate) / 1e9:.1f})"
    )
    for recipe, shapes in results.items():
        print_table(recipe, shapes)
    print(
        "ms/step, tokens/s: medians over rounds; spread: (max - min) / median; ratio: median "
        "over rounds of keras-hub's step time / tfblocks' in the same round (range: min–max); "
        "GFLOP/s: median matmul rate of the shape's rounds; MFU: 3 × forward matmul FLOPs "
        "(tfblocks.models.complexity) / step time / that rate."
    )
    print(f"end {load()}")


if __name__ == "__main__":
    main()
