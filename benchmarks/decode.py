"""Greedy-decoding throughput: cached (tfblocks) vs uncached (the TF tutorial) vs keras-hub.

Measures generated tokens per second of greedy decoding, `--max-length` (64) tokens
for each of `--batch` (8) random source sentences of `--source-length` (32) ids, for

- A = tfblocks cached: `Decoder(model, max_length).decode(Greedy(), source)` — the encoder runs
  once, each decoder layer's cross-attention k/v are computed once, and each step runs
  the decoder on one new position against a preallocated k/v cache; the whole loop is
  one `tf.while_loop` compiled with XLA.
- B = uncached, what the TensorFlow NMT tutorial ships: a `tf.function` whose loop
  appends each new token to a growing `TensorArray`, re-runs the *whole* model
  (encoder included, as the tutorial's `Translator` does) on the source and the
  prefix so far, and takes the argmax of the last position. Same model and weights as
  A, same PAD/BOS masking as `Decoder` and `tests/decoding/test_decoder.py`. Not XLA-compiled:
  the prefix grows every step, so its shapes are dynamic (the tutorial does not use
  XLA either).
- C = keras-hub: `keras_hub.samplers.GreedySampler` driving a decoder of the same
  shape built from `keras_hub.layers` — one `TokenAndPositionEmbedding` shared by
  source and target, `TransformerEncoder` / `TransformerDecoder`
  (`normalize_first=True`, LayerNorm epsilon 1e-6) with a final LayerNorm per stack,
  and a `Dense(vocab, use_bias=False)` softmax, random weights. It is driven the way
  keras-hub's own `BartSeq2SeqLM.generate_step` drives its decoder:
  `TransformerDecoder.call`'s `self_attention_cache` `[B, 2, T + 1, heads, depth]`
  (updated at `self_attention_cache_update_index`) and `cross_attention_cache`
  `[B, 2, S, heads, depth]`, filled once by a seeding decoder call on BOS with
  `cross_attention_cache_update_index=0` and then reused (`None`) by every step; the
  sampler's loop and the seeding call are compiled together with XLA.

Same vocabulary, hidden size, heads, filter size, layers, batch and source length in
all three. C's outputs differ from A's (other weights, learned positions, biases in
its attention projections): it is a speed comparison of the same-shaped computation.

Equal work: every call of A, B and C generates exactly batch × max_length tokens.
A and B stop early only when every sentence has produced EOS, so the tfblocks model is
given weights where EOS never wins: its softmax row for EOS (the EOS embedding row
when the softmax is tied, as in the presets) is zeroed, so the EOS logit is exactly 0
while the other vocab − 3 candidates (PAD and BOS are masked) are ~N(0, 1) and some is
positive at every step. The script checks this on the warm-up calls (no EOS and no
PAD in A's and B's ids, else it stops with an error; the timed calls decode the same
batch with the same weights) rather than trusting it, and prints how many of A's and
B's tokens agree (same model: 100 %). C is run without `stop_token_ids`, so the
sampler always runs max_length steps. One difference makes C do slightly more work:
its seeding call is one extra decoder position (keras-hub's sampler re-runs the last
prompt token, BOS, as its first step), i.e. 65 decoder positions for 64 tokens. C's
XLA output is also compared once with the same function run without XLA (a check
that the cache is driven correctly).

Each call is timed to completion (`.numpy()`), after one untimed warm-up call per
decoder (tracing and XLA compilation). Each round runs A, B, C `--repeats` times each
in that order; the figures are medians over `--rounds` rounds.

Run:  python benchmarks/decode.py                       # transformer_small, vocab 8000
      python benchmarks/decode.py --rounds 3 --repeats 1
      python benchmarks/decode.py --quick               # seconds-long smoke run

Figures: benchmarks/README.md.
"""

import argparse
import functools
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

from tfblocks import BOS_ID, EOS_ID, PAD_ID, Decoder, build_transformer, hparams
from tfblocks.decoding import Greedy

NEG_INF = -1e9


def silence_eos(model):
    """Zeroes the softmax weights of EOS so its logit is always exactly 0."""
    try:
        layer, row = model.get_layer("softmax"), False  # untied: kernel [d, vocab]
    except ValueError:
        layer, row = model.get_layer("embedding"), True  # tied: embeddings [vocab, d]
    weight = layer.kernel if not row else layer.embeddings
    value = weight.numpy()
    if row:
        value[EOS_ID] = 0.0
    else:
        value[:, EOS_ID] = 0.0
    weight.assign(value)


def make_uncached_greedy(model, max_length):
    """Tutorial-style greedy decoding: the whole model on the whole prefix, every step."""
    never = np.zeros(model.output_shape[-1], "float32")
    never[[PAD_ID, BOS_ID]] = 1.0  # as in `Decoder.step`: PAD and BOS are never generated

    @tf.function
    def greedy(source):
        batch = tf.shape(source)[0]
        output = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
        output = output.write(0, tf.fill([batch], BOS_ID))
        finished = tf.zeros([batch], tf.bool)
        for i in tf.range(max_length):
            decoder_input = tf.transpose(output.stack())  # [i+1, B] -> [B, i+1]: BOS, y0 …
            # The model shifts its targets right itself; rolling left by one undoes that
            # (the BOS that wraps round to the end is the slot the shift drops).
            targets = tf.roll(decoder_input, shift=-1, axis=1)  # [B, i+1]: y0 … y_{i-1}, BOS
            logits = model({"inputs": source, "targets": targets}, training=False)[:, -1]
            logits = tf.where(never > 0, NEG_INF, logits)  # [B, vocab]
            token = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B]
            token = tf.where(finished, PAD_ID, token)
            output = output.write(i + 1, token)
            finished = tf.logical_or(finished, tf.equal(token, EOS_ID))
            if tf.reduce_all(finished):
                break
        ids = tf.transpose(output.stack())[:, 1:]  # [B, steps]
        return tf.pad(ids, [[0, 0], [0, max_length - tf.shape(ids)[1]]])  # [B, max_length]

    return greedy


class KerasHubSeq2Seq:
    """The `build_transformer(hp)` shape made of keras-hub layers, decoded by
    `keras_hub.samplers.GreedySampler` over `TransformerDecoder`'s caches."""

    def __init__(self, hp, source_length, max_length):
        layers = keras_hub.layers
        self.hp, self.max_length = hp, max_length
        self.depth = hp.hidden_size // hp.num_heads
        self.embedding = layers.TokenAndPositionEmbedding(
            hp.vocab_size, max(source_length, max_length + 1), hp.hidden_size, tie_weights=False
        )

        def block(cls):
            return cls(
                hp.filter_size,
                hp.num_heads,
                dropout=hp.layer_prepostprocess_dropout,
                layer_norm_epsilon=1e-6,
                normalize_first=True,
            )

        self.encoder = [block(layers.TransformerEncoder) for _ in range(hp.num_encoder_layers)]
        self.decoder = [block(layers.TransformerDecoder) for _ in range(hp.num_decoder_layers)]
        self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-6)
        self.softmax = keras.layers.Dense(hp.vocab_size, use_bias=False)
        self.sampler = keras_hub.samplers.GreedySampler()
        # Build every layer with one eager forward pass.
        source = tf.fill([1, source_length], 4)
        encoder_output = self.encode(source)
        x = self.embedding(tf.fill([1, 2], 4))
        for layer in self.decoder:
            x = layer(x, encoder_output)
        self.softmax(self.decoder_norm(x))
        self.generate = tf.function(self._generate, jit_compile=True)

    def count_params(self):
        parts = [self.embedding, *self.encoder, *self.decoder]
        parts += [self.encoder_norm, self.decoder_norm, self.softmax]
        return sum(part.count_params() for part in parts)

    def encode(self, source):
        x = self.embedding(source)  # [B, S, d]
        for layer in self.encoder:
            x = layer(x, padding_mask=tf.not_equal(source, PAD_ID))
        return self.encoder_norm(x)  # [B, S, d]

    def step(self, ids, index, caches, encoder_output, source_mask, cross_index):
        """Logits `[B, vocab]` for the token `ids` `[B, 1]` at position `index`."""
        x = self.embedding(ids, start_index=index)  # [B, 1, d]
        new_caches = []
        for layer, (self_cache, cross_cache) in zip(self.decoder, caches, strict=True):
            x, self_cache, cross_cache = layer(
                x,
                encoder_output,
                encoder_padding_mask=source_mask,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                cross_attention_cache_update_index=cross_index,
            )
            new_caches.append((self_cache, cross_cache))
        return self.softmax(self.decoder_norm(x))[:, 0], tuple(new_caches)

    def _generate(self, source):
        batch, source_length = tf.shape(source)[0], tf.shape(source)[1]
        heads, length = self.hp.num_heads, self.max_length + 1
        encoder_output = self.encode(source)
        source_mask = tf.not_equal(source, PAD_ID)  # [B, S]
        empty = (
            tf.zeros([batch, 2, length, heads, self.depth]),  # self-attention k/v
            tf.zeros([batch, 2, source_length, heads, self.depth]),  # cross-attention k/v
        )
        prompt = tf.pad(tf.fill([batch, 1], BOS_ID), [[0, 0], [0, self.max_length]])  # [B, T+1]
        # Seed the caches: BOS's self-attention k/v, every layer's cross-attention k/v.
        _, caches = self.step(
            prompt[:, :1], 0, (empty,) * len(self.decoder), encoder_output, source_mask, 0
        )

        def next_token(prompt, cache, index):
            caches, encoder_output, source_mask = cache
            # The previous token, [B, 1]. Not `prompt[:, index - 1 : index]`: under XLA
            # that slice (static shape [B, None]) gave other tokens than without XLA.
            ids = tf.slice(prompt, [0, index - 1], [-1, 1])
            logits, caches = self.step(ids, index - 1, caches, encoder_output, source_mask, None)
            return logits, None, (caches, encoder_output, source_mask)

        ids = self.sampler(
            next=next_token, prompt=prompt, cache=(caches, encoder_output, source_mask), index=1
        )
        return ids[:, 1:]  # [B, max_length]


def make_source(batch, length, vocab_size, seed):
    """Random full-length sources: ids ≥ 4 (no PAD/EOS/UNK/BOS), ending with EOS."""
    ids = np.random.default_rng(seed).integers(4, vocab_size, (batch, length))
    ids[:, -1] = EOS_ID
    return tf.constant(ids, tf.int32)


def check_full_length(label, ids, max_length):
    """Stops the benchmark unless every sentence got `max_length` tokens."""
    ids = np.asarray(ids)
    if ids.shape[1] != max_length or np.isin(ids, [PAD_ID, EOS_ID]).any():
        raise RuntimeError(
            f"{label}: a sentence stopped before {max_length} tokens (EOS or PAD in its ids), "
            "so the decoders did not do equal work; see silence_eos()."
        )
    return ids


def ids_of(output):
    """The ids of a decoder's output (`Decoder.decode` also returns scores), as NumPy."""
    return np.asarray(output[0] if isinstance(output, tuple) else output)


def time_calls(function, source, repeats):
    """Mean seconds per call, each call run to completion."""
    start = time.perf_counter()
    for _ in range(repeats):
        ids_of(function(source))  # waits for the result
    return (time.perf_counter() - start) / repeats


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="transformer_small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64, help="tokens generated")
    parser.add_argument("--rounds", type=int, default=5, help="A B C rounds (median over them)")
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per decoder per round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: a tiny model, 2 rounds of 1 call"
    )
    args = parser.parse_args(argv)
    for name in ("vocab_size", "batch", "source_length", "max_length", "rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.vocab_size <= 4:
        parser.error(f"--vocab-size must be > 4 (ids 0-3 are special), got {args.vocab_size}")
    return args


def model_hparams(args):
    if args.quick:
        tiny = {"hidden_size": 64, "filter_size": 128, "num_heads": 2}
        args.batch, args.source_length, args.max_length = 2, 8, 8
        args.rounds, args.repeats = 2, 1
        return hparams("transformer_tiny", vocab_size=500, **tiny)
    return hparams(args.preset, vocab_size=args.vocab_size)


def warm_up(decoders, peer, source, length):
    """One untimed call each (tracing, XLA compile); checks equal work and agreement."""
    outputs = {}
    for label, decode in decoders.items():
        start = time.perf_counter()
        outputs[label[0]] = ids_of(decode(source))
        print(f"  warm-up {label}: {time.perf_counter() - start:.1f} s (incl. tracing/compile)")
    a = check_full_length("A", outputs["A"], length)
    b = check_full_length("B", outputs["B"], length)
    assert outputs["C"].shape == a.shape, outputs["C"].shape
    print(f"  A and B agree on {np.mean(a == b):.1%} of tokens (same model; should be 100%)")
    without_xla = ids_of(tf.function(peer.generate.python_function)(source))
    same = np.mean(outputs["C"] == without_xla)
    print(f"  C with XLA and without agree on {same:.1%} of tokens (should be ~100%)")


def run_rounds(decoders, source, rounds, repeats):
    """Seconds per call of each decoder, one entry per round, rounds run A B C A B C …"""
    seconds = {label: [] for label in decoders}
    for round_ in range(rounds):
        for label, decode in decoders.items():
            seconds[label].append(time_calls(decode, source, repeats))
        print(
            f"  round {round_ + 1}/{rounds}: "
            + ", ".join(f"{label[0]} {s[-1] * 1e3:.0f} ms" for label, s in seconds.items())
        )
    return seconds


def report(seconds, tokens, rounds, repeats):
    rate = {}
    print(f"\n{'decoder':<34}{'ms/call':>9}{'tokens/s':>11}{'spread':>8}")
    for label, values in seconds.items():
        median = statistics.median(values)
        rate[label[0]] = tokens / median
        spread = (max(values) - min(values)) / median
        print(f"{label:<34}{median * 1e3:>9.1f}{rate[label[0]]:>11.0f}{spread:>8.0%}")
    print(
        f"({tokens} tokens per call; medians over {rounds} rounds of {repeats} call(s); "
        "spread: (max - min) / median)"
    )
    print(f"cached / uncached (A / B):     {rate['A'] / rate['B']:.2f}×")
    print(f"tfblocks / keras-hub (A / C):  {rate['A'] / rate['C']:.2f}×")
    print(f"target cached ≥ 5× uncached: {'met' if rate['A'] >= 5 * rate['B'] else 'NOT met'}")


def main(argv=None):
    args = parse_args(argv)
    hp = model_hparams(args)
    length = args.max_length
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, keras-hub "
        f"{keras_hub.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, float32\n"
        f"{'quick' if args.quick else args.preset}: vocab={hp.vocab_size} d={hp.hidden_size} "
        f"filter={hp.filter_size} heads={hp.num_heads} "
        f"layers={hp.num_encoder_layers}+{hp.num_decoder_layers} batch={args.batch} "
        f"source_length={args.source_length} tokens generated={length} per sentence"
    )
    keras.utils.set_random_seed(args.seed)
    model = build_transformer(hp)
    silence_eos(model)
    peer = KerasHubSeq2Seq(hp, args.source_length, length)
    print(f"params: tfblocks {model.count_params():,}, keras-hub {peer.count_params():,}")
    source = make_source(args.batch, args.source_length, hp.vocab_size, args.seed)
    decoders = {
        "A tfblocks cached (XLA)": functools.partial(Decoder(model, length).decode, Greedy()),
        "B uncached (tutorial)": make_uncached_greedy(model, length),
        "C keras-hub GreedySampler (XLA)": peer.generate,
    }
    warm_up(decoders, peer, source, length)
    seconds = run_rounds(decoders, source, args.rounds, args.repeats)
    report(seconds, args.batch * length, args.rounds, args.repeats)


if __name__ == "__main__":
    main()
