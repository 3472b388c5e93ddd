"""Position-wise feed-forward network, t2t `common_layers.dense_relu_dense`.

FFN(x) = W₂·act(W₁x + b₁) + b₂ (act: relu, gelu or swish) with dropout (t2t
`relu_dropout`) between the two `keras.layers.Dense`, which multiply the last axis only:
the same two matrices are applied to every position of a `[B, L, d]` tensor.
"""

import keras

from tfblocks.layers import _utils
from tfblocks.layers.dropout import HashDropout

ACTIVATIONS = ("relu", "gelu", "swish", "silu")


@keras.saving.register_keras_serializable(package="tfblocks")
class DenseReluDense(keras.layers.Layer):
    """Two Dense layers with an activation and dropout between them.

    Args:
        filter_size: inner size (t2t `filter_size`, 4 × hidden in the base model).
        output_size: output size; defaults to the input's last dimension.
        activation: `"relu"` (t2t), `"gelu"` (exact, erf form) or `"swish"` / `"silu"`
            (two names of `x · sigmoid(x)`, Marian / OPUS-MT's choice).
        dropout: dropout rate on the inner activations (t2t `relu_dropout`).
        use_bias: whether both Dense layers have biases (t2t: yes).
        kernel_initializer: initializer of both kernels.
        bias_initializer: initializer of both biases.
        **kwargs: base `keras.layers.Layer` arguments.

    Example:

    >>> import numpy as np
    >>> ffn = DenseReluDense(filter_size=2048)
    >>> y = ffn(np.zeros((2, 7, 512), "float32"))
    >>> tuple(y.shape), tuple(ffn.filter_dense.kernel.shape)
    ((2, 7, 512), (512, 2048))
    """

    def __init__(
        self,
        filter_size,
        output_size=None,
        activation="relu",
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filter_size = _utils.check_positive_int("filter_size", filter_size)
        self.output_size = _utils.check_optional_positive_int("output_size", output_size)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"`activation` must be one of {ACTIVATIONS}, got activation={activation!r}."
            )
        self.activation = activation
        self.dropout = _utils.check_rate("dropout", dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.filter_dense = keras.layers.Dense(
            self.filter_size,
            activation=self.activation,
            use_bias=self.use_bias,
            kernel_initializer=_utils.clone_initializer(self.kernel_initializer),
            bias_initializer=_utils.clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="filter_dense",
        )
        self.dropout_layer = HashDropout(self.dropout, dtype=self.dtype_policy, name="relu_dropout")

    def build(self, input_shape):
        self._input_dim = input_shape[-1]
        self.filter_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(
            self.output_size or input_shape[-1],
            use_bias=self.use_bias,
            kernel_initializer=_utils.clone_initializer(self.kernel_initializer),
            bias_initializer=_utils.clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="output_dense",
        )
        self.output_dense.build((*tuple(input_shape[:-1]), self.filter_size))
        self.dropout_layer.build(None)

    def call(self, x, training=None):
        _utils.check_rank("x", x, ("batch", "...", "dim"))
        _utils.check_last_dim("x", x, self._input_dim)
        h = self.filter_dense(x)  # [..., filter_size]
        h = self.dropout_layer(h, training=training)
        return self.output_dense(h)  # [..., output_size]

    def compute_output_shape(self, input_shape):
        return (*tuple(input_shape[:-1]), self.output_size or input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filter_size": self.filter_size,
                "output_size": self.output_size,
                "activation": self.activation,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
