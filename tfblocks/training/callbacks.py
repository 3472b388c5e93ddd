"""Keras callbacks of the training recipe."""

import time

import keras


class TimeLimit(keras.callbacks.Callback):
    """Stops `fit` at the first batch that ends after `seconds` of training.

    Example:

    >>> limit = TimeLimit(seconds=60)
    >>> limit.stopped_early
    False
    """

    def __init__(self, seconds):
        super().__init__()
        if not seconds > 0:
            raise ValueError(f"`seconds` must be > 0, got seconds={seconds!r}.")
        self.seconds = seconds
        self.stopped_early = False

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if time.perf_counter() - self._start > self.seconds:
            self.model.stop_training = True
            self.stopped_early = True
