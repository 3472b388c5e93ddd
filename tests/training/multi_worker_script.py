"""Subprocess body for test_multi_worker: one worker of a two-worker `model.fit`.

Usage: `python multi_worker_script.py OUT.npz` with `TF_CONFIG` set. Saves the final
weights and prints the history as the last JSON line.
"""

import json
import os
import sys


def main(out):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import numpy as np
    import tensorflow as tf

    from tfblocks.models import build_transformer, hparams
    from tfblocks.training import compile_transformer
    from tfblocks.training.distribute import get_strategy

    strategy = get_strategy("multi_worker")
    keras.utils.set_random_seed(0)
    hp = hparams(
        "transformer_tiny",
        vocab_size=24,
        hidden_size=32,
        filter_size=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
    )
    rng = np.random.default_rng(0)
    src = rng.integers(4, 24, (32, 9)).astype("int32")
    tgt = src[:, ::-1].copy()
    dataset = tf.data.Dataset.from_tensor_slices(({"inputs": src, "targets": tgt}, tgt))
    with strategy.scope():
        model = build_transformer(hp)
        compile_transformer(model, hp, learning_rate=3e-3)
    history = model.fit(dataset.batch(16), epochs=2, verbose=0, shuffle=False).history
    np.savez(out, *model.get_weights())
    print(json.dumps({"history": history, "replicas": strategy.num_replicas_in_sync}))


if __name__ == "__main__":
    main(sys.argv[1])
