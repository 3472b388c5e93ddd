"""The decoding tests' trained model, made once per test process, and `eagerly`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.decoding.searches import VOCAB, sources


@pytest.fixture(scope="session")
def reverser():
    """A one-layer model trained to reverse its input (about ten seconds of training).

    Shared by the decoding tests that only decode with it (once per test process).
    Trained without XLA: for this tiny model compiling the train step costs more than it
    saves.
    """
    keras.utils.set_random_seed(0)
    hp = tfblocks.hparams(
        "transformer_tiny",
        vocab_size=VOCAB,
        hidden_size=64,
        filter_size=128,
        num_encoder_layers=1,
        num_decoder_layers=1,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
    )
    model = tfblocks.build_transformer(hp)
    tfblocks.compile_transformer(
        model, hp, learning_rate=3e-3, jit_compile=False, steps_per_execution=16
    )
    rng = np.random.default_rng(0)
    source = sources(rng, 4096)
    target = np.zeros_like(source)
    for row, ids in enumerate(source):
        n = int(np.argmax(ids == tfblocks.EOS_ID))
        target[row, :n] = ids[:n][::-1]
        target[row, n] = tfblocks.EOS_ID
    model.fit({"inputs": source, "targets": target}, target, batch_size=64, epochs=4, verbose=0)
    return model


@pytest.fixture
def eagerly():
    """Searches run step by step in Python: for these tiny models, tracing each search's
    loop into a graph costs far more than running it."""
    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)
