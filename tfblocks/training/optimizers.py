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
XLA compiles the kernel too (`jit_compile=True` steps).

Everything around the update — learning-rate schedules, `clipnorm`, loss scaling
(`mixed_float16`), `tf.distribute` aggregation, EMA, gradient accumulation — is Keras'
own: only `update_step` changes. `amsgrad=True` and variables of other dtypes than
float16 / float32 / float64 take Keras' update (bfloat16 among them: TensorFlow has no
GPU kernel of `ResourceApplyAdam` for it; `mixed_bfloat16` keeps float32 variables).

What it saves is tracing time, which every `fit` pays once, not step time.
"""

import keras
import tensorflow as tf

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
    module docstring.
    `compile_transformer` uses it.

    Example:
    >>> import numpy as np
    >>> w = keras.Variable(np.ones(3, "float32"))
    >>> opt = FusedAdam(learning_rate=0.1)
    >>> opt.apply([keras.ops.convert_to_tensor(np.array([1.0, -1.0, 0.0], "float32"))], [w])
    >>> [round(float(x), 4) for x in keras.ops.convert_to_numpy(w)]
    [0.9, 1.1, 1.0]
    """

    def update_step(self, gradient, variable, learning_rate):
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
