"""What a `Transformer` reads: padding masks, teacher forcing, and the checks of its inputs.

`padding_mask` and `shift_right` are public (`tfblocks.models`): decoding and alignment
build the decoder's inputs with them as the model does. The checks raise a ValueError that
names the argument and echoes what it got, before any layer runs.
"""

import keras
from keras import ops

from tfblocks.ids import (
    BOS_ID,
    PACKED_LM_FEATURES,
    PACKED_SOURCE_FEATURES,
    PACKED_TARGET_FEATURES,
    PAD_ID,
)


def padding_mask(ids):
    """Boolean `[B, L]` mask, True where `ids != PAD_ID`."""
    return ops.not_equal(ids, PAD_ID)


def shift_right(ids, start_id=BOS_ID, segment_ids=None, positions=None):
    """Teacher forcing: `[y0, y1, …, y_{T-1}]` → `[start_id, y0, …, y_{T-2}]`.

    For packed rows give the `segment_ids` and `positions` of `ids`: each pair then starts
    with `start_id` (where its position is 0) and padding (segment 0) stays `PAD_ID`.

    Example:

    >>> import numpy as np
    >>> ids = np.array([[7, 1, 8, 9, 1, 0]])
    >>> shift_right(ids).numpy().tolist()
    [[3, 7, 1, 8, 9, 1]]
    >>> shift_right(ids, segment_ids=np.array([[1, 1, 2, 2, 2, 0]]),
    ...             positions=np.array([[0, 1, 0, 1, 2, 0]])).numpy().tolist()
    [[3, 7, 3, 8, 9, 0]]
    """
    ids = ops.cast(ids, "int32")
    start = ops.full_like(ids[:, :1], start_id)  # [B, 1]
    shifted = ops.concatenate([start, ids[:, :-1]], axis=1)  # [B, T]
    if segment_ids is None and positions is None:
        return shifted
    if segment_ids is None or positions is None:
        raise ValueError(
            "`segment_ids` and `positions` go together (packed rows), got only "
            f"{'segment_ids' if positions is None else 'positions'}."
        )
    shifted = ops.where(ops.equal(positions, 0), ops.cast(start_id, "int32"), shifted)
    return ops.where(ops.equal(segment_ids, 0), ops.cast(PAD_ID, "int32"), shifted)


def check_ids(name, ids):
    """Integer ids of rank 2 (`[B, L]`), else a ValueError naming `name` and the shape."""
    if len(ids.shape) != 2:
        raise ValueError(f"`{name}` must be int ids of shape [batch, length], got {ids.shape}.")
    if "int" not in keras.backend.standardize_dtype(ids.dtype):
        raise ValueError(f"`{name}` must be integer token ids, got dtype {ids.dtype}.")
    return ids


def check_packed(segments_name, segments, positions_name, positions):
    """Segment ids and positions of packed rows come together, or not at all."""
    if (segments is None) != (positions is None):
        given, absent = (
            (segments_name, positions_name)
            if positions is None
            else (positions_name, segments_name)
        )
        raise ValueError(f"Packed rows need `{absent}` with `{given}`, got {absent}=None.")


def check_decode_arguments(
    model,
    *,
    encoder_output,
    cache,
    index,
    return_attention_scores,
    segment_ids,
    positions,
    source_segment_ids,
):
    """Checks that the arguments of `model.decode` (documented there) go together."""
    if model.has_input and encoder_output is None and cache is None:
        raise ValueError(
            f"Model '{model.name}' is an encoder–decoder: `decode` needs the "
            "`encoder_output` of `encode`, got encoder_output=None."
        )
    if not model.has_input and encoder_output is not None:
        raise ValueError(
            f"Model '{model.name}' is decoder-only: it takes no `encoder_output`, got "
            f"one of shape {tuple(encoder_output.shape)}."
        )
    check_packed("segment_ids", segment_ids, "positions", positions)
    if cache is not None:
        if return_attention_scores:
            raise ValueError("`return_attention_scores` is not supported with a `cache`.")
        if segment_ids is not None:
            raise ValueError("`segment_ids` (packed rows) is not supported with a `cache`.")
        if index is None:
            raise ValueError("`index` is required with a `cache`, got index=None.")
        if len(cache) != len(model.decoder_blocks):
            raise ValueError(
                f"`cache` must hold one entry per decoder block ({len(model.decoder_blocks)}), "
                f"got {len(cache)}."
            )
    if segment_ids is not None and model.has_input and source_segment_ids is None:
        raise ValueError(
            "Packed rows of an encoder–decoder need `source_segment_ids` with "
            "`segment_ids`, got source_segment_ids=None."
        )


def packed_features(features, has_input):
    """The packed features a model's call reads (t2t's `*_segmentation` / `*_position`).

    Args:
        features: the dict a packed dataset yields (`make_dataset(shapes="packed")`).
        has_input: True for an encoder–decoder, False for a language model.

    Returns:
        `(source, target)`: each `(ids, segment_ids, positions)`, int `[B, L]`; `source`
        is None for a language model, whose target is the `"ids"` feature.
    """
    if has_input:
        source_names = ("inputs", *PACKED_SOURCE_FEATURES)
        target_names = ("targets", *PACKED_TARGET_FEATURES)
    else:
        source_names, target_names = (), ("ids", *PACKED_LM_FEATURES)
    names = (*source_names, *target_names)
    missing = [name for name in names if name not in features]
    if missing:
        raise ValueError(
            f"Packed rows need the features {list(names)}; missing {missing}, got "
            f"{sorted(features)}."
        )
    source = tuple(features[name] for name in source_names) or None
    return source, tuple(features[name] for name in target_names)
