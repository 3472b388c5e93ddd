"""What the decoding tests share: random sources, a fake step function whose logits
depend on the whole prefix (with its NumPy twin), and NumPy references of a model's
log-probabilities. The trained `reverser` model is a fixture (conftest.py)."""

import keras
import numpy as np
import tensorflow as tf

import tfblocks

VOCAB = 16


def sources(rng, n, low=4, high=VOCAB, max_len=7):
    """Random source ids ending with EOS, right-padded with 0."""
    lengths = rng.integers(2, max_len, size=n)
    out = np.zeros((n, max_len + 1), "int32")
    for row, length in enumerate(lengths):
        out[row, :length] = rng.integers(low, high, size=length)
        out[row, length] = tfblocks.EOS_ID
    return out


def penalized(scores, ids, alpha):
    lengths = np.minimum((ids != 0).sum(-1), ids.shape[1])
    return scores / ((5.0 + lengths) / 6.0) ** alpha


def sequence_log_prob(model, source, ids):
    """Sum of log p(token) over each row of `ids` up to its EOS, by teacher forcing."""
    logits = keras.ops.convert_to_numpy(model({"inputs": source, "targets": ids}))
    logits[..., [tfblocks.PAD_ID, tfblocks.BOS_ID]] = -1e9
    logits = logits - logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    return (picked * (ids != 0)).sum(-1)


HASH = 1009  # the fake model's "context" is a running hash of the ids it was fed


def fake_model(vocab, seed):
    """Random logits that depend on the whole prefix, as a step function and in NumPy."""
    table = np.random.default_rng(seed).normal(scale=3.0, size=(HASH, vocab)).astype("float32")

    def step_fn(ids, index, state):
        state = (state * 7 + ids[:, 0] + 1) % HASH  # [N]: the state beam search must reorder
        return keras.ops.take(table, state, axis=0), state

    def numpy_logits(prefix):
        h = 0
        for token in [tfblocks.BOS_ID, *prefix]:
            h = (h * 7 + int(token) + 1) % HASH
        return table[h].astype("float64")

    return step_fn, numpy_logits


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def count_model_step_traces(*decoders):
    """A list that counts, per decoder, the traces of its model step (from now on)."""
    counts = [0] * len(decoders)

    def counting(i, graph):
        def step_graph(*args):
            counts[i] += 1
            return graph(*args)

        return step_graph

    for i, decoder in enumerate(decoders):
        decoder._model_step_graph = counting(i, decoder._model_step_graph)
    return counts


def traced_decode(decoder, search):
    """`decoder.decode(search, source_ids)` inside one `tf.function` of any batch size and
    width, as a `Translator` without XLA decodes: traced once for every batch (an eager
    call of a Decoder without XLA traces its search again for each new shape)."""
    return tf.function(
        lambda source_ids: decoder.decode(search, source_ids),
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
        autograph=False,
    )
