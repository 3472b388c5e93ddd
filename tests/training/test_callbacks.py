"""`ExactSteps`: an epoch of a dataset of unknown length counts the updates that ran."""

import warnings

import keras
import numpy as np
import tensorflow as tf

from tfblocks.training.callbacks import ExactSteps


def _fit(dataset, callbacks):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input([4]), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    with warnings.catch_warnings():  # the end of an epoch of unknown length, as expected
        warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
        model.fit(dataset, epochs=3, verbose=0, callbacks=callbacks, shuffle=False)
    return int(model.optimizer.iterations.numpy()), model.get_weights()[0]


def test_an_epoch_of_unknown_length_counts_its_batches_only():
    rng = np.random.default_rng(0)
    x, y = rng.random((20, 4), "float32"), rng.random((20, 1), "float32")
    known = tf.data.Dataset.from_tensor_slices((x, y)).batch(6)  # 4 batches an epoch
    unknown = known.filter(lambda *_: True)  # the same batches, of unknown number
    assert int(unknown.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    steps, weights = _fit(known, [])
    assert steps == 12
    exact, exact_weights = _fit(unknown, [ExactSteps()])
    assert exact == 12 and np.allclose(exact_weights, weights)
    assert _fit(known, [ExactSteps()])[0] == 12  # a known length: nothing to do
