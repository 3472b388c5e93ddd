"""How fast one beam-search step runs against the matmul it cannot beat, by batch size.

A beam-search step of an encoder–decoder runs the decoder on one new position of
`rows` = sentences × beam hypotheses (self-attention over the cache, cross-attention,
FFN per layer, then the logits `[rows, d] × [d, V]` and their log-softmax). Its matrix
products are most of its work, so a step cannot run faster than its FLOPs at the CPU's
matmul rate for those shapes. For each number of sentences (`--sentences`, beam 4) this
script times, XLA-compiled, a loop of `--steps` decoding steps of a model (`--preset`, a
preset folder such as `benchmarks/enja.sh`'s `model/`, or an untrained
`--hparams`) through `Decoder.step_function`, exactly as beam search calls it, and,
alternating with it, a loop of the same number of bare logits matmuls `[rows, d] ×
[d, V]`. It prints the step's time, its matmul FLOPs (the projections, FFN and logits;
the attention products over the cache are left out) per second, and the bare
matmul's rate: the ratio of the two is how close the step runs to its matmuls.

Run:  python benchmarks/step_rate.py --preset /tmp/enja/model
      python benchmarks/step_rate.py --quick
"""

import argparse
import statistics
import time

import numpy as np
import tensorflow as tf
from train_throughput import load

import tfblocks
from tfblocks.decoding.decoder import Decoder

BEAM = 4


def step_loop(decoder, sentences, source_length, steps, cache_length):
    """An XLA-compiled loop of `steps` beam steps for `sentences` random sources."""
    rows = sentences * BEAM
    vocab = decoder.model.vocab_size

    @tf.function(jit_compile=True, autograph=False)
    def run(source_ids):
        step_fn, state = decoder.step_function(source_ids, repeat=BEAM, max_length=cache_length)
        state = tf.nest.map_structure(lambda x: tf.repeat(x, BEAM, axis=0), state)
        ids = tf.fill([rows, 1], 5)

        def body(index, total, state):
            logits, state = step_fn(ids, index, state)
            return index + 1, total + tf.nn.log_softmax(logits), state

        zeros = tf.zeros([rows, vocab])
        _, total, _ = tf.while_loop(lambda i, *_: i < steps, body, (tf.constant(0), zeros, state))
        return total

    source = np.random.default_rng(0).integers(3, vocab, size=(sentences, source_length))
    return lambda: run(tf.constant(source, tf.int32))


def matmul_loop(rows, depth, vocab, steps):
    """An XLA-compiled loop of `steps` products `[rows, depth] × [depth, vocab]`."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(rows, depth)), tf.float32)
    w = tf.constant(rng.normal(size=(vocab, depth)), tf.float32)  # stored as the embedding

    @tf.function(jit_compile=True, autograph=False)
    def run(x, w):
        def body(index, total):
            shifted = x + tf.cast(index, tf.float32) * 1e-3  # a different product each step
            return index + 1, total + tf.matmul(shifted, w, transpose_b=True)

        _, total = tf.while_loop(lambda i, _: i < steps, body, (0, tf.zeros([rows, vocab])))
        return total

    return lambda: run(x, w)


def step_flops(hp, rows):
    """Matmul FLOPs of one decoder step: per layer the q/k/v/output (self) and q/output
    (cross) projections and the FFN, then the logits."""
    d, f = hp.hidden_size, hp.filter_size
    per_layer = 4 * d * d + 2 * d * d + 2 * d * f
    return 2 * rows * (hp.num_decoder_layers * per_layer + d * hp.vocab_size)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="a preset folder (default: an untrained --hparams)")
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--sentences", type=int, nargs="+", default=[32, 16, 8, 4, 2, 1])
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--cache-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smoke run: a tiny model")
    args = parser.parse_args(argv)
    if args.quick:
        args.preset, args.hparams, args.vocab_size = None, "transformer_tiny", 64
        args.sentences, args.source_length, args.steps, args.rounds = [2], 5, 2, 1
        args.cache_length = 8
    print(f"start {load()}")
    if args.preset:
        model, _, hp = tfblocks.load_preset(args.preset)
    else:
        hp = tfblocks.hparams(args.hparams, vocab_size=args.vocab_size)
        model = tfblocks.build_transformer(hp)
    decoder = Decoder(model, max_length=args.cache_length)
    print(
        f"{args.preset or args.hparams}: d {hp.hidden_size}, filter {hp.filter_size}, "
        f"{hp.num_decoder_layers} decoder layers, vocabulary {hp.vocab_size}; beam {BEAM}, "
        f"source length {args.source_length}, cache {args.cache_length}, {args.steps} steps a call"
    )
    print(f"{'rows':>5} {'step ms':>8} {'step GFLOP/s':>13} {'logits GFLOP/s':>15} {'ratio':>6}")
    for sentences in args.sentences:
        rows = sentences * BEAM
        loops = {
            "step": step_loop(decoder, sentences, args.source_length, args.steps,
                              args.cache_length),
            "matmul": matmul_loop(rows, hp.hidden_size, hp.vocab_size, args.steps),
        }  # fmt: skip
        for loop in loops.values():
            loop().numpy()  # compiles
        seconds = {name: [] for name in loops}
        for _ in range(args.rounds):
            for name, loop in loops.items():
                start = time.perf_counter()
                loop().numpy()
                seconds[name].append((time.perf_counter() - start) / args.steps)
        step = statistics.median(seconds["step"])
        matmul = statistics.median(seconds["matmul"])
        step_rate = step_flops(hp, rows) / step / 1e9
        matmul_rate = 2 * rows * hp.hidden_size * hp.vocab_size / matmul / 1e9
        print(
            f"{rows:>5} {step * 1e3:>8.3f} {step_rate:>13.1f} {matmul_rate:>15.1f} "
            f"{step_rate / matmul_rate:>6.2f}"
        )
    print(f"end {load()}")


if __name__ == "__main__":
    main()
