"""Keras callbacks of the training recipe."""

import math
import time

import keras


class TimeLimit(keras.callbacks.Callback):
    """Stops `fit` at the first batch that ends after `seconds` of training.

    The time counts within epochs (from each epoch's start to its end, validation
    included), so what a callback does between the epochs of one `fit` (dev BLEU, saving
    the run) does not use up the limit.

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
        self._used = 0.0  # seconds of the finished epochs
        self._start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self._used += time.perf_counter() - self._start

    def on_train_batch_end(self, batch, logs=None):
        if self._used + time.perf_counter() - self._start > self.seconds:
            self.model.stop_training = True
            self.stopped_early = True


class ExactSteps(keras.callbacks.Callback):
    """Keeps `optimizer.iterations` at the updates that ran, for datasets of unknown length.

    On such a dataset (a streamed corpus; a distributed one, whose length `fit` is not
    told) Keras' `fit` learns that the epoch is over from a last call that finds no batch,
    and that call adds one to `optimizer.iterations` without an update: a learning-rate
    schedule of the step (t2t's) would drift one step an epoch. This callback reads the
    count after each batch of such an epoch and puts the epoch's last one back at its end.
    With a known number of steps it does nothing.

    Example:

    >>> callback = ExactSteps()
    >>> callback.params = {"steps": 100}
    >>> callback.on_epoch_begin(0)
    >>> callback.watching
    False
    """

    def __init__(self):
        super().__init__()
        self.watching = False
        self._last = None

    def on_epoch_begin(self, epoch, logs=None):
        self.watching = self.params.get("steps") is None
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        if self.watching:
            self._last = int(self.model.optimizer.iterations.numpy())

    def on_epoch_end(self, epoch, logs=None):
        iterations = self.model.optimizer.iterations
        if self.watching and self._last is not None and int(iterations.numpy()) != self._last:
            iterations.assign(self._last)


class FiniteLoss(keras.callbacks.Callback):
    """Stops `fit` at the first batch whose loss is not finite (NaN or infinite).

    Unlike Keras' `TerminateOnNaN` it remembers where: `failure` is None while the loss
    is finite, else `(epoch, step, loss)` (1-based epoch and step of the epoch), so the
    caller can turn the stop into an error instead of saving the broken weights.

    Example:

    >>> guard = FiniteLoss()
    >>> guard.on_epoch_begin(0)
    >>> guard.on_train_batch_end(6, {"loss": float("nan")})
    >>> guard.failure
    (1, 7, nan)
    """

    def __init__(self):
        super().__init__()
        self.failure = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.failure is None:
            self.failure = (self._epoch + 1, batch + 1, float(loss))
            if self.model is not None:
                self.model.stop_training = True


class EpochProgress(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, headed with the epoch numbers of a whole run.

    A run that calls `fit` once per epoch (`fit(initial_epoch=e, epochs=e + 1)`) would
    print `Epoch e+1/e+1` (and no header for the first); with this callback in `fit`'s
    callbacks every epoch is headed `Epoch e+1/total_epochs`, a continued run included.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> x = np.zeros((4, 2), "float32")
    >>> _ = model.fit(x, x[:, :1], initial_epoch=1, epochs=2, verbose=2,
    ...               callbacks=[EpochProgress(total_epochs=5)])  # doctest: +ELLIPSIS
    Epoch 2/5
    ...
    """

    def __init__(self, total_epochs):
        super().__init__()
        if isinstance(total_epochs, bool) or not isinstance(total_epochs, int) or total_epochs < 1:
            raise ValueError(f"`total_epochs` must be a positive int, got {total_epochs!r}.")
        self.total_epochs = total_epochs

    def set_params(self, params):
        super().set_params(params)
        self.epochs = self.total_epochs

    def on_epoch_begin(self, epoch, logs=None):
        self._reset_progbar()
        self._maybe_init_progbar()
        if self.verbose:
            print(f"Epoch {epoch + 1}/{self.epochs}", flush=True)
