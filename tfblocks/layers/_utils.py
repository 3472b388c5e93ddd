"""Helpers shared by the tfblocks layers: argument checks and the one mask contract.

Mask contract (GUIDE §5.5): masks are boolean, ``True`` means "may attend / is a real
token". Padding masks are ``[B, T]``; attention masks are ``[B, T, S]``. An explicit
padding mask replaces the Keras implicit mask (``x._keras_mask``) of the same tensor;
an explicit attention mask is combined (logical AND) with the padding masks and the
causal mask. Everything is merged in :func:`merge_attention_masks`.
"""

import keras
import ml_dtypes
from keras import ops


def check_positive_int(name, value):
    """Raises `ValueError` unless `value` is a positive int (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {name}={value!r}.")
    return value


def check_optional_positive_int(name, value):
    """Like `check_positive_int` but accepts `None`."""
    if value is None:
        return None
    return check_positive_int(name, value)


def check_rate(name, value):
    """Raises `ValueError` unless `0 <= value < 1` (a dropout rate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {name}={value!r}.")
    return float(value)


def clone_initializer(initializer):
    """A fresh copy of a Keras initializer, so sublayers do not share one instance."""
    return initializer.__class__.from_config(initializer.get_config())


def implicit_mask(x):
    """Returns the Keras implicit mask attached to `x` (`None` when there is none)."""
    if x is None:
        return None
    return getattr(x, "_keras_mask", None)


def check_mask_shape(name, mask, expected):
    """Checks the static shape of a mask against `expected` (None = unknown dim)."""
    shape = tuple(mask.shape)
    if len(shape) != len(expected) or any(
        s is not None and e is not None and s != e for s, e in zip(shape, expected, strict=False)
    ):
        raise ValueError(
            f"`{name}` must have shape {_fmt(expected)} to match the inputs, "
            f"got {name}.shape={shape}."
        )


def _fmt(shape):
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def causal_mask(query_length, key_length):
    """Boolean `[1, T, S]` mask where query position i may attend key positions <= i."""
    rows = ops.expand_dims(ops.arange(query_length), -1)  # [T, 1]
    cols = ops.expand_dims(ops.arange(key_length), 0)  # [1, S]
    return ops.expand_dims(rows >= cols, 0)  # [1, T, S]


def merge_attention_masks(
    query,
    value,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    use_causal_mask=False,
):
    """Merges padding, attention and causal masks into one boolean `[B|1, T, S]` mask.

    Args:
        query: query tensor `[B, T, ...]` (only its shape is used).
        value: key/value tensor `[B, S, ...]` (only its shape is used).
        query_mask: optional boolean `[B, T]`; padded queries attend nothing.
        value_mask: optional boolean `[B, S]`; padded keys are never attended.
        attention_mask: optional boolean `[B, T, S]` (or `[T, S]`).
        use_causal_mask: also forbid attending to later positions.

    Returns:
        A boolean tensor broadcastable to `[B, T, S]`, or `None` when nothing is masked.

    Raises:
        ValueError: a mask whose static shape does not match `query`/`value`.
    """
    batch, t_len, s_len = query.shape[0], query.shape[1], value.shape[1]
    mask = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if query_mask is not None:
        check_mask_shape("query_mask", query_mask, (batch, t_len))
        mask = ops.expand_dims(ops.cast(query_mask, "bool"), -1)  # [B, T, 1]
    if value_mask is not None:
        check_mask_shape("value_mask", value_mask, (batch, s_len))
        mask = _and(mask, ops.expand_dims(ops.cast(value_mask, "bool"), -2))  # [B, 1, S]
    if attention_mask is not None:
        if len(attention_mask.shape) == 2:
            check_mask_shape("attention_mask", attention_mask, (t_len, s_len))
            attention_mask = ops.expand_dims(attention_mask, 0)  # [1, T, S]
        else:
            check_mask_shape("attention_mask", attention_mask, (batch, t_len, s_len))
        mask = _and(mask, ops.cast(attention_mask, "bool"))
    if use_causal_mask:
        mask = _and(mask, causal_mask(ops.shape(query)[1], ops.shape(value)[1]))
    return mask


def large_negative(dtype):
    """A large negative number representable in `dtype` (never -inf, never overflows).

    Half of the dtype's most negative value: adding an attention logit to it cannot
    overflow to -inf, and a row where every position carries it still softmaxes to a
    uniform distribution instead of NaN.
    """
    dtype = keras.backend.standardize_dtype(dtype)
    return float(ml_dtypes.finfo(dtype).min) * 0.5


def masked_softmax(logits, mask=None):
    """Softmax over the last axis in float32, with a boolean mask (True = keep).

    The mask becomes an additive bias of `large_negative("float32")`, so a row with
    nothing to attend gives a uniform distribution, never NaN.
    """
    logits = ops.cast(logits, "float32")
    if logits.shape[-1] == 1:
        # One key: the weight is exactly 1 (keras.ops.softmax warns on a size-1 axis).
        return ops.ones_like(logits)
    if mask is not None:
        logits = logits + ops.where(mask, 0.0, large_negative("float32"))
    return ops.softmax(logits, axis=-1)
