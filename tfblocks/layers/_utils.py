"""Helpers shared by the tfblocks layers: argument and input checks, the one mask contract.

Mask contract (GUIDE §5.5): masks are boolean, ``True`` means "may attend / is a real
token". Padding masks are ``[B, T]``; attention masks are ``[B, T, S]``. An explicit
padding mask replaces the Keras implicit mask (``x._keras_mask``) of the same tensor;
an explicit attention mask is combined (logical AND) with the padding masks and the
causal mask. Everything is merged in :func:`merge_attention_masks`.
"""

import keras
import ml_dtypes
import numpy as np
import tensorflow as tf
from keras import ops

from tfblocks._checks import (  # noqa: F401  (the layers' checks: one home)
    check_bool,
    check_choice,
    check_non_negative_int,
    check_optional_positive_int,
    check_positive_int,
    check_rate,
)


def _shape(x):
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


def check_rank(name, x, layout):
    """Raises `ValueError` unless `x` has one axis per entry of `layout`.

    Example: `check_rank("query", query, ("batch", "length", "dim"))`; the message
    names the argument, the expected layout and the shape it got.
    A `"..."` in `layout` stands for any number of further axes.
    """
    shape = _shape(x)
    if "..." in layout:
        if len(shape) < len(layout) - 1:
            raise ValueError(
                f"`{name}` must have rank >= {len(layout) - 1} [{', '.join(layout)}], "
                f"got {name}.shape={shape}."
            )
    elif len(shape) != len(layout):
        raise ValueError(
            f"`{name}` must have rank {len(layout)} [{', '.join(layout)}], "
            f"got {name}.shape={shape}."
        )


def check_last_dim(name, x, expected, built_for="the layer was built for it"):
    """Raises `ValueError` when the static last dimension of `x` is not `expected`."""
    shape = _shape(x)
    if shape and shape[-1] is not None and expected is not None and shape[-1] != expected:
        raise ValueError(
            f"`{name}` must have last dimension {expected} ({built_for}), got {name}.shape={shape}."
        )


def check_same_dim(axis, what, named):
    """Raises `ValueError` when the static sizes of axis `axis` differ across `named`.

    `named` maps argument names to tensors (None entries are skipped). Unknown (None)
    sizes are skipped too, so symbolic inputs with a free batch pass.
    """
    known = {name: _shape(x) for name, x in named.items() if x is not None}
    if len({shape[axis] for shape in known.values() if shape[axis] is not None}) > 1:
        names = ", ".join(f"`{name}`" for name in known)
        shapes = " and ".join(f"{name}.shape={shape}" for name, shape in known.items())
        raise ValueError(f"{names} must have the same {what}, got {shapes}.")


def is_concrete(x):
    """True when `x` holds values now: a NumPy array or an eager tensor (not a graph)."""
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        return True
    return tf.executing_eagerly() and hasattr(x, "numpy") and not isinstance(x, keras.KerasTensor)


def check_token_ids(name, ids, vocab_size):
    """Checks token ids: an integer dtype always; values in `[0, vocab_size)` eagerly.

    Inside a `tf.function` or XLA the values cannot be checked without a host sync
    (and an XLA gather clamps or wraps an id out of range silently), so there the data
    paths that feed ids are responsible for the range.
    """
    dtype = keras.backend.standardize_dtype(
        ids.dtype if hasattr(ids, "dtype") else np.asarray(ids).dtype
    )
    if "int" not in dtype:
        raise ValueError(
            f"`{name}` must be integer token ids, got dtype {dtype} "
            f"({name}.shape={_shape(ids)}); cast ids with ops.cast(ids, 'int32')."
        )
    if not is_concrete(ids):
        return
    values = np.asarray(ops.convert_to_numpy(ids) if hasattr(ids, "numpy") else ids)
    if values.size == 0:
        return
    low, high = values.min(), values.max()
    if low < 0 or high >= vocab_size:
        bad = values[(values < 0) | (values >= vocab_size)]
        raise ValueError(
            f"`{name}` must lie in [0, vocab_size={vocab_size}), got {bad.size} id(s) outside "
            f"it (min={low}, max={high}, e.g. {bad.ravel()[:3].tolist()})."
        )


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


def segment_mask(query_segments, key_segments):
    """Boolean `[B, T, S]`: query i may attend key j when both belong to the same segment.

    Segment ids are ints `[B, T]` and `[B, S]`, 1, 2, … for the pairs packed into a row
    and 0 for padding (t2t's `*_segmentation` features); padding attends nothing and is
    never attended.

    Example:

    >>> import numpy as np
    >>> segment_mask(np.array([[1, 1, 2, 0]]), np.array([[1, 2, 2]])).numpy().astype(int)[0]
    array([[1, 0, 0],
           [1, 0, 0],
           [0, 1, 1],
           [0, 0, 0]])
    """
    query_segments = ops.expand_dims(query_segments, -1)  # [B, T, 1]
    key_segments = ops.expand_dims(key_segments, -2)  # [B, 1, S]
    return ops.logical_and(
        ops.equal(query_segments, key_segments), ops.not_equal(key_segments, 0)
    )  # [B, T, S]


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
