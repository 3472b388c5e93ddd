"""The tiny Transformer and the synthetic data that the training tests and their scripts share.

The scripts under tests/training/ run as `python -m tests.training.NAME` from the
repository root, so they import this module as the tests do. TensorFlow and Keras are
imported only when a function needs them: a script sets up its devices first.
"""

import numpy as np

# `transformer_tiny` cut down to one encoder and one decoder layer of width 32.
TINY = {"hidden_size": 32, "filter_size": 64, "num_encoder_layers": 1, "num_decoder_layers": 1}
NO_DROPOUT = {"layer_prepostprocess_dropout": 0.0, "attention_dropout": 0.0, "relu_dropout": 0.0}
FIRST_ID = 4  # ids 0-3 are PAD, EOS, UNK, BOS


def tiny_hparams(vocab_size=16, *, dropout=False, **overrides):
    """`hparams("transformer_tiny")` with `TINY`'s sizes and `overrides`; no dropout (so
    that runs on different setups can be compared) unless `dropout`."""
    from tfblocks.models import hparams

    settings = {**TINY, **({} if dropout else NO_DROPOUT), **overrides}
    return hparams("transformer_tiny", vocab_size=vocab_size, **settings)


def tiny_model(hp, *, seed=None, weights=None, **compile_args):
    """`build_transformer(hp)`, in the current strategy's scope.

    `seed`: `keras.utils.set_random_seed(seed)` first. `weights` (a `get_weights()` list)
    replace the initial ones. With `compile_args` the model is compiled with
    `compile_transformer(model, hp, **compile_args)`.
    """
    from tfblocks.models import build_transformer
    from tfblocks.training import compile_transformer

    if seed is not None:
        import keras

        keras.utils.set_random_seed(seed)
    model = build_transformer(hp)
    if weights is not None:
        model.set_weights(weights)
    if compile_args:
        compile_transformer(model, hp, **compile_args)
    return model


def synthetic_pairs(n, length, vocab_size, *, seed=0, padded=True):
    """`(x, y)` of a reversal task: `x = {"inputs": src, "targets": y}` and `y` = each row
    of `src` reversed, int32 `[n, length]`.

    `src` holds random ids from `FIRST_ID` to `vocab_size - 1` (`np.random.default_rng
    (seed)`). With `padded` each row keeps a random 2 to `length` of them and is padded with
    0 after that, so the rows of a batch, and the halves of a batch split between replicas,
    hold different numbers of tokens.
    """
    rng = np.random.default_rng(seed)
    src = rng.integers(FIRST_ID, vocab_size, (n, length)).astype("int32")
    if padded:
        lengths = rng.integers(2, length + 1, n)
        src[np.arange(length)[None, :] >= lengths[:, None]] = 0
    tgt = src[:, ::-1].copy()
    return {"inputs": src, "targets": tgt}, tgt


def synthetic_dataset(n, length, vocab_size, *, batch_size, seed=0, padded=True):
    """`synthetic_pairs(...)` as a `tf.data.Dataset` of batches of `batch_size`, in order."""
    import tensorflow as tf

    pairs = synthetic_pairs(n, length, vocab_size, seed=seed, padded=padded)
    return tf.data.Dataset.from_tensor_slices(pairs).batch(batch_size)
