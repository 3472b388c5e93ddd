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


def updates_and_rate(optimizer):
    """`(updates, learning_rate)` of a Keras `optimizer` now: its update count
    (`iterations`, restored with a continued run's state) and the learning rate its
    schedule gives at that count (the next update's); `(None, None)` without an optimizer.

    Example:

    >>> updates_and_rate(keras.optimizers.SGD(learning_rate=0.5))
    (0, 0.5)
    """
    if optimizer is None or not hasattr(optimizer, "iterations"):
        return None, None
    return int(optimizer.iterations.numpy()), float(optimizer.learning_rate)


class EpochProgress(keras.callbacks.ProgbarLogger):
    """Keras' progress bar, headed with the epoch numbers of a whole run, each epoch's
    line ending with the optimizer's update count and learning rate.

    A run that calls `fit` once per epoch (`fit(initial_epoch=e, epochs=e + 1)`) would
    print `Epoch e+1/e+1` (and no header for the first); with this callback in `fit`'s
    callbacks every epoch is headed `Epoch e+1/total_epochs`, a continued run included.
    The epoch's line (`verbose=2`: `12/12 - 3s - 250ms/step - loss: 4.3786 - ...`) ends
    with ` - updates: N - learning_rate: R` (`updates_and_rate`: the updates of the whole
    run so far, and the rate of the next one); with the bar (`verbose=1`) they follow on
    a line of their own.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(0.01), "mse")
    >>> x = np.zeros((4, 2), "float32")
    >>> _ = model.fit(x, x[:, :1], initial_epoch=1, epochs=2, verbose=2,
    ...               callbacks=[EpochProgress(total_epochs=5)])  # doctest: +ELLIPSIS
    Epoch 2/5
    1/1 - ...s - ...s/step - loss: 0.0000e+00 - updates: 1 - learning_rate: 1.000e-02
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
        self._start = time.perf_counter()
        if self.verbose:
            print(f"Epoch {epoch + 1}/{self.epochs}", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        updates, rate = updates_and_rate(getattr(self.model, "optimizer", None))
        if self.verbose != 2 or updates is None:
            super().on_epoch_end(epoch, logs)
            if self.verbose and updates is not None:
                print(f"updates: {updates} - learning_rate: {rate:.3e}", flush=True)
            return
        steps = self.target or self.seen
        seconds = time.perf_counter() - self._start
        step = seconds / max(steps, 1)
        parts = [f"{steps}/{steps}", f"{seconds:.0f}s",
                 f"{step * 1000:.0f}ms/step" if step < 1 else f"{step:.0f}s/step"]  # fmt: skip
        parts += [f"{name}: {_metric(value)}" for name, value in (logs or {}).items()]
        parts += [f"updates: {updates}", f"learning_rate: {rate:.3e}"]
        print(" - ".join(parts), flush=True)


def _metric(value):
    """A metric's value as Keras' progress bar writes it: 4 decimals, or 4 significant
    digits with an exponent when it is as small as 0.001 or smaller.

    >>> _metric(4.37859), _metric(0.0001234), _metric(2)
    ('4.3786', '1.2340e-04', '2.0000')
    """
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.4f}" if value > 1e-3 else f"{value:.4e}"
