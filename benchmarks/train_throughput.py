"""Training-step throughput: tfblocks vs an identically shaped keras-hub Transformer.

Measures target tokens per second of one full training step (forward, loss,
backward, Adam update, metrics: the `train_function` that `model.fit` runs, called
through `train_on_batch`, compiled with XLA) for

- A = tfblocks: `build_transformer(hp)` + `compile_transformer(model, hp,
  jit_compile=True)` (t2t smoothed cross-entropy, masked accuracy, perplexity);
- B = keras-hub: the same encoder–decoder made of `keras_hub.layers`
  `TokenAndPositionEmbedding` (one, shared by source, target and the tied softmax),
  `TransformerEncoder` / `TransformerDecoder` (`normalize_first=True`, i.e. Pre-LN,
  LayerNorm epsilon 1e-6, same dropout) and a final LayerNorm per stack, compiled
  with the same Adam and learning-rate schedule, `SparseCategoricalCrossentropy
  (from_logits=True, ignore_class=0)` and `SparseCategoricalAccuracy`, XLA on.

Same vocabulary, hidden size, heads, filter size, layers, batch, lengths and dropout
rate; the differences that remain are each library's own: keras-hub's attention
projections have biases, its positions are learned embeddings (t2t: no biases,
sinusoids), and it has no dropout inside the FFN (t2t's `relu_dropout`, 0.1 in both
presets; `--dropout 0` turns every dropout of both models off).

Each round runs A then B (then the matmul probe) for `--steps` steps each, after
`--warmup` untimed steps; the figures are medians over rounds. Tokens are target
positions: batch × length per step (the batches have no padding).

MFU (model FLOPs utilisation) = 3 × forward FLOPs of one step (matrix products only,
`tfblocks.cost.model_cost` × batch) / step time / the matmul rate measured in the same
rounds (an `--matmul-size`² float32 `tf.matmul` under XLA).

Run:  python benchmarks/train_throughput.py                 # shapes a and b
      python benchmarks/train_throughput.py --shapes a --rounds 7
      python benchmarks/train_throughput.py --quick         # seconds-long smoke run
"""

import argparse
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

from tfblocks import BOS_ID, PAD_ID, build_transformer, compile_transformer, hparams
from tfblocks.cost import model_cost, total
from tfblocks.training import learning_rate_schedule

# name -> (preset, hparams overrides, batch, length)
SHAPES = {
    "a": (
        "transformer_small",
        {"vocab_size": 8000, "num_encoder_layers": 3, "num_decoder_layers": 3},
        32,
        64,
    ),
    "b": ("transformer_base", {}, 8, 64),
    "quick": (
        "transformer_tiny",
        {"vocab_size": 500, "hidden_size": 64, "filter_size": 128, "num_heads": 2},
        4,
        16,
    ),
}


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
    """The `build_transformer(hp)` architecture made of keras-hub layers."""
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
        jit_compile=True,
    )
    return model


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


def shape_hparams(name, dropout=None):
    """`(preset, hp, batch, length)` of a `SHAPES` entry; `dropout` sets every rate."""
    preset, overrides, batch, length = SHAPES[name]
    if dropout is not None:
        rates = ("layer_prepostprocess_dropout", "attention_dropout", "relu_dropout")
        overrides = {**overrides, **dict.fromkeys(rates, dropout)}
    return preset, hparams(preset, **overrides), batch, length


def run_shape(name, args, probe, matmul_rate):
    preset, hp, batch, length = shape_hparams(name, args.dropout)
    batch = args.batch or batch
    length = args.length or length
    x, y = make_batch(hp, batch, length)
    keras.utils.set_random_seed(0)
    models = {
        "tfblocks": compile_transformer(build_transformer(hp), hp, jit_compile=True),
        "keras-hub": compile_keras_hub_transformer(build_keras_hub_transformer(hp, length), hp),
    }
    print(f"\nshape {name}: {describe(preset, hp, batch, length)}")
    for label, model in models.items():
        start = time.perf_counter()
        for _ in range(args.warmup):
            loss = model.train_on_batch(x, y, return_dict=True)["loss"]
        print(
            f"  {label}: {model.count_params():,} params, loss {loss:.3f}, "
            f"warm-up (incl. XLA compile) {time.perf_counter() - start:.1f} s"
        )

    seconds = {label: [] for label in models}
    for round_ in range(args.rounds):
        for label, model in models.items():  # A B A B …
            seconds[label].append(time_steps(model, x, y, args.steps))
        matmul_rate.append(probe())
        print(
            f"  round {round_ + 1}/{args.rounds}: "
            + ", ".join(f"{label} {s[-1] * 1e3:.0f} ms/step" for label, s in seconds.items())
            + f", matmul {matmul_rate[-1] / 1e9:.1f} GFLOP/s"
        )

    model_flops = 3 * total(model_cost(hp, length, length)).flops * batch
    rate = statistics.median(matmul_rate)
    rows = {}
    for label, values in seconds.items():
        step = statistics.median(values)
        rows[label] = {
            "step_ms": step * 1e3,
            "tokens_per_s": batch * length / step,
            "spread": (max(values) - min(values)) / step,
            "mfu": model_flops / step / rate,
        }
    return {"hp": hp, "batch": batch, "length": length, "flops": model_flops, "rows": rows}


def print_table(results, matmul_rate, matmul_size, dtype="float32"):
    rate = statistics.median(matmul_rate)
    print(
        f"\nmatmul rate ({dtype} {matmul_size}² tf.matmul, XLA): median {rate / 1e9:.1f} "
        f"GFLOP/s over {len(matmul_rate)} probes"
    )
    header = (
        f"{'shape':<6}{'model':<11}{'ms/step':>9}{'tokens/s':>11}{'spread':>8}"
        f"{'GFLOP/step':>12}{'MFU':>7}{'tfblocks/keras-hub':>20}"
    )
    print(header)
    print("-" * len(header))
    for name, result in results.items():
        rows = result["rows"]
        ratio = rows["tfblocks"]["tokens_per_s"] / rows["keras-hub"]["tokens_per_s"]
        for label, row in rows.items():
            print(
                f"{name:<6}{label:<11}{row['step_ms']:>9.1f}{row['tokens_per_s']:>11.0f}"
                f"{row['spread']:>8.0%}{result['flops'] / 1e9:>12.1f}{row['mfu']:>7.1%}"
                + (f"{ratio:>19.3f}×" if label == "tfblocks" else "")
            )
    print(
        "ms/step and tokens/s: medians over rounds; spread: (max - min) / median; "
        "MFU: 3 × forward matmul FLOPs (tfblocks.cost) / step time / matmul rate."
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["a", "b"])
    parser.add_argument("--rounds", type=int, default=5, help="A B rounds (median over them)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (XLA compile)")
    parser.add_argument("--batch", type=int, help="override the shapes' batch size")
    parser.add_argument("--length", type=int, help="override the shapes' source/target length")
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument(
        "--dropout",
        type=float,
        help="set every dropout rate of both models to this value (default: the preset's, "
        "0.1; keras-hub has no FFN-inner dropout, t2t's relu_dropout)",
    )
    parser.add_argument(
        "--mixed-precision",
        choices=["mixed_bfloat16", "mixed_float16"],
        help="Keras dtype policy of both models (default float32); the matmul probe and "
        "MFU then use the compute dtype",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: a tiny shape, 2 rounds of 1 step"
    )
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "warmup", "matmul_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.quick:
        args.shapes, args.rounds, args.steps, args.warmup = ["quick"], 2, 1, 1
        args.matmul_size = 256
    return args


def main(argv=None):
    args = parse_args(argv)
    policy = args.mixed_precision or "float32"
    keras.mixed_precision.set_global_policy(policy)  # both models follow it
    compute_dtype = keras.mixed_precision.global_policy().compute_dtype
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, keras-hub "
        f"{keras_hub.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, {policy}, XLA (jit_compile=True)"
    )
    probe = matmul_probe(args.matmul_size, tf.as_dtype(compute_dtype))
    matmul_rate = []  # GFLOP/s probes, one per round, shared by all shapes
    results = {name: run_shape(name, args, probe, matmul_rate) for name in args.shapes}
    print_table(results, matmul_rate, args.matmul_size, compute_dtype)


if __name__ == "__main__":
    main()
