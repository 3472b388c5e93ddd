"""`FusedAdam`: Keras' Adam with each variable's update as one TensorFlow kernel.

`keras.optimizers.Adam.update_step` builds the update of every variable from about twenty
separate ops (the bias-correction powers, the two moment updates, the step). In a
training step traced as a graph that is Python work at every trace, and without XLA each
op runs as its own kernel over the variable. TensorFlow's `ResourceApplyAdam` kernel does
the same update in one pass — same formula, same order of operations:

    lr_t = lr · √(1 − β₂ᵗ) / (1 − β₁ᵗ)
    m   += (g − m) · (1 − β₁)
    v   += (g² − v) · (1 − β₂)
    var −= lr_t · m / (√v + ε)

with t = `iterations + 1`, as Keras' Adam — and as t2t's `adam` (`LazyAdamOptimizer`,
whose dense update is this kernel; t2t made its embedding gradients dense, so all its
updates took it). One difference in rounding: the kernel computes 1 − β in the
variable's dtype, Keras in Python floats (float32 1 − 0.999 is 0.00099998713, 1.3e-5
from 0.001), so the moments differ by about 1e-5 relatively with β₂ = 0.999. A
`tf.IndexedSlices` gradient (an embedding lookup) is summed into its dense form first,
which gives dense Adam's update; Keras' Adam squares each slice before summing a repeated
row's, which gives that row another second moment.
XLA compiles the kernel too (`jit_compile=True` steps). Under another Keras backend (JAX)
the update and the accumulation are Keras' own (the same formulas; no `tf.distribute`
there); the schedule and the moving average behave as described below.

Everything around the update — learning-rate schedules, `clipnorm`, loss scaling
(`mixed_float16`), `tf.distribute` aggregation — is Keras' own. `amsgrad=True` and
variables of other dtypes than float16 / float32 / float64 take Keras' update (bfloat16
among them: TensorFlow has no GPU kernel of `ResourceApplyAdam` for it; `mixed_bfloat16`
keeps float32 variables). What it saves is tracing time, which every `fit` pays once,
not step time.

For gradient accumulation and weight averaging it departs from Keras' optimizer:

- `gradient_accumulation_steps=n` (t2t's `optimizer_multistep_accumulate_steps`): the
  optimizer updates the weights on every n-th call with the mean of the n gradients it
  received (each the gradient of its micro-batch's token mean, so micro-batches weigh
  equally whatever their token counts, as in t2t's `MultistepAdamOptimizer`). Keras'
  own accumulation fails under `MirroredStrategy` (it calls `merge_call` inside a
  `tf.cond`); here the gradients are summed over the replicas first, every call, and
  the choice between accumulating and updating is made in the cross-replica context.
  `iterations` counts updates, and a learning-rate schedule is evaluated at
  `iterations` (Keras passes it the micro-batch count). Under loss scaling a
  micro-batch whose gradients overflow is skipped (the next one takes its place).
  Gradient clipping and weight decay are not supported with it.
- `use_ema=True, ema_momentum=d`: an exponential moving average of the trained
  variables, `average ← d · average + (1 − d) · variable` after every update (the first
  update sets it to the variable), kept among the optimizer's variables, so a saved
  training state holds it. `tfblocks.training.averaged_weights(model)` reads it. Unlike
  Keras, `fit` does not end by overwriting the weights with their averages
  (`finalize_variable_values` does nothing): training that continues with another `fit`
  continues from the trained weights.
"""

import keras
import tensorflow as tf

from tfblocks import _backend

_FUSED_DTYPES = (tf.float16, tf.float32, tf.float64)


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (in a `tf.distribute`
    update, the current device's component)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable(package="tfblocks")
class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` whose per-variable update is TensorFlow's fused Adam kernel.

    Same arguments and variables (`m`, `v` per trainable variable, `iterations`) as Keras'
    Adam, and its results up to the rounding of 1 − β in the variable's dtype; see the
    module docstring, also for `gradient_accumulation_steps` (updates with the mean
    gradient of n calls, also under `tf.distribute`; the schedule counts updates) and
    `use_ema` (read with `averaged_weights`; `fit` leaves the trained weights in place).
    `compile_transformer` uses it.

    Example:
    >>> import numpy as np
    >>> w = keras.Variable(np.ones(3, "float32"))
    >>> opt = FusedAdam(learning_rate=0.1)
    >>> opt.apply([keras.ops.convert_to_tensor(np.array([1.0, -1.0, 0.0], "float32"))], [w])
    >>> [round(float(x), 4) for x in keras.ops.convert_to_numpy(w)]
    [0.9, 1.1, 1.0]
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        changes = ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay")
        used = {name: getattr(self, name) for name in changes if getattr(self, name)}
        if self.gradient_accumulation_steps and used:
            raise ValueError(
                "`gradient_accumulation_steps` does not support gradient clipping or weight "
                f"decay, got gradient_accumulation_steps={self.gradient_accumulation_steps} "
                f"with {', '.join(f'{k}={v!r}' for k, v in used.items())}."
            )

    def update_step(self, gradient, variable, learning_rate):
        if not _backend.is_tensorflow():  # JAX: Keras' update, the same formula
            return super().update_step(gradient, variable, learning_rate)
        dtype = tf.as_dtype(variable.dtype)
        if self.amsgrad or dtype not in _FUSED_DTYPES:
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable),
            m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),  # IndexedSlices: dense
        )

    def _get_current_learning_rate(self):
        # Keras evaluates a schedule at the call count; under accumulation that counts
        # micro-batches, and t2t's schedules count updates (`iterations`).
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def finalize_variable_values(self, var_list):
        """Does nothing: the weights stay the trained ones after `fit` (Keras would
        overwrite them with their moving averages); see `averaged_weights`."""

    # Gradient accumulation that works under tf.distribute --------------------------------

    def _backend_apply_gradients(self, grads, trainable_variables):
        if not self.gradient_accumulation_steps or not _backend.is_tensorflow():
            # Keras' own accumulation where there is no tf.distribute (JAX): also the
            # mean of n gradients, with `iterations` counting updates.
            return super()._backend_apply_gradients(grads, trainable_variables)
        variables = [_tf_variable(v) for v in trainable_variables]
        accumulators = [
            _tf_variable(self._accumulated_gradients[self._get_variable_index(v)])
            for v in trainable_variables
        ]
        # Summed over the replicas on every call, outside any condition: an all-reduce
        # (a merge_call) cannot sit in a branch of a tf.cond in the replica context.
        reduced = self._all_reduce_sum_gradients(list(zip(grads, variables, strict=True)))
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._accumulate_or_update,
            self._distribution_strategy,
            [g for g, _ in reduced],
            variables,
            accumulators,
        )

    def _accumulate_or_update(self, distribution, grads, variables, accumulators):
        """In the cross-replica context: adds the summed gradients to the accumulators, or
        on every n-th call updates the variables with the mean and clears them."""
        steps = self.gradient_accumulation_steps

        def add(accumulator, gradient):
            accumulator.assign_add(_dense(gradient, accumulator.dtype))

        def update(variable, gradient, accumulator, learning_rate):
            mean = (_dense(gradient, accumulator.dtype) + accumulator) / steps
            self.update_step(mean, variable, learning_rate)
            accumulator.assign(tf.zeros_like(accumulator))

        def accumulate():
            for gradient, accumulator in zip(grads, accumulators, strict=True):
                distribution.extended.update(accumulator, add, args=(gradient,), group=False)

        def apply():
            learning_rate = self.learning_rate
            for gradient, variable, accumulator in zip(grads, variables, accumulators, strict=True):
                distribution.extended.update(
                    variable, update, args=(gradient, accumulator, learning_rate), group=False
                )
            if self.use_ema:
                self._update_averages(distribution)

        tf.cond(tf.equal((self._iterations + 1) % steps, 0), apply, accumulate)

    def _update_averages(self, distribution):
        """The moving averages after an update (Keras': the first update sets them)."""
        momentum = tf.where(tf.equal(self.iterations, 0), 0.0, self.ema_momentum)

        def average(moving, variable):
            decay = tf.cast(momentum, moving.dtype)
            moving.assign(decay * moving + (1 - decay) * variable)

        for variable, moving in zip(
            self._trainable_variables, self._model_variables_moving_average, strict=True
        ):
            if moving is not None:
                distribution.extended.update(
                    _tf_variable(moving), average, args=(_tf_variable(variable),), group=False
                )


def _tf_variable(variable):
    """The TensorFlow (possibly distributed) variable of a Keras variable."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def _dense(gradient, dtype):
    return tf.cast(tf.convert_to_tensor(gradient), dtype)  # IndexedSlices: summed rows
