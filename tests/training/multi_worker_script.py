"""Subprocess body for test_multi_worker: one worker of a two-worker `model.fit`.

Usage: `python -m tests.training.multi_worker_script OUT.npz` from the repository root,
with `TF_CONFIG` set. From the same initial weights it trains three times on the same
global batches of 16 (padding uneven across the workers' halves, so a wrongly scaled
gradient shows):

1. `MultiWorkerMirroredStrategy`, `compile_transformer(jit_compile=True)`: per-replica
   XLA (`tfblocks.training.xla_step`);
2. the same strategy with `jit_compile=False` (Keras' own step);
3. this process alone, no strategy, on the whole global batch.

Saves the weights of run 1 and prints one JSON line: histories, `jit_compile` flags,
and the largest weight differences between the runs.
"""

import json
import os
import sys


def main(out):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

    from tests.fixtures import synthetic_dataset, tiny_hparams, tiny_model
    from tfblocks.training import xla_step
    from tfblocks.training.distribute import get_strategy

    strategy = get_strategy("multi_worker")
    hp = tiny_hparams(24)
    dataset = synthetic_dataset(32, 9, 24, batch_size=16)  # uneven padding
    initial = tiny_model(hp, seed=0).get_weights()

    def train(jit_compile, distributed):
        with strategy.scope() if distributed else tf.distribute.get_strategy().scope():
            model = tiny_model(hp, weights=initial, jit_compile=jit_compile, learning_rate=3e-3)
        history = model.fit(dataset, epochs=2, verbose=0, shuffle=False).history
        return model, history

    xla, xla_history = train(jit_compile=True, distributed=True)
    step = getattr(xla, xla_step.ATTRIBUTE, None)
    plain, plain_history = train(jit_compile=False, distributed=True)
    single, single_history = train(jit_compile=False, distributed=False)

    def max_diff(a, b):
        return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))

    np.savez(out, *xla.get_weights())
    print(
        json.dumps(
            {
                "replicas": strategy.num_replicas_in_sync,
                "jit_compile": [bool(xla.jit_compile), bool(plain.jit_compile)],
                "xla_traces": step.train_gradients.experimental_get_tracing_count() if step else 0,
                "history": xla_history,
                "plain_history": plain_history,
                "single_history": single_history,
                "xla_vs_plain": max_diff(xla.get_weights(), plain.get_weights()),
                "xla_vs_single": max_diff(xla.get_weights(), single.get_weights()),
                "moved": max_diff(single.get_weights(), initial),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
