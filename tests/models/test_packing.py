"""Packed rows (t2t `pack_examples`): a pair packed with others gets exactly the logits, loss
and gradients it gets alone in a row, for the encoder–decoder and the language model,
Pre-LN and Post-LN, through the segment features of `Transformer`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfblocks.ids import EOS_ID, PACKED_SOURCE_FEATURES, PACKED_TARGET_FEATURES, PAD_ID
from tfblocks.layers import TransformerBlock, segment_mask
from tfblocks.models.builders import build_language_model, build_transformer
from tfblocks.models.hyperparameters import hparams
from tfblocks.models.transformer import shift_right
from tfblocks.training.losses import smoothed_token_losses

VOCAB = 29
ROW = 16  # positions of a packed row, per side
# (source, target) ids, EOS-terminated; packed in this order they fill two rows.
PAIRS = [
    ([5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID]),
    ([11, 12, EOS_ID], [13, 14, 15, 16, 17, 18, EOS_ID]),
    ([19, EOS_ID], [20, 21, EOS_ID]),
    ([22, 23, 24, 25, 26, 27, EOS_ID], [28, 4, 5, 6, EOS_ID]),
    ([7, 7, EOS_ID], [8, EOS_ID]),
]
ROWS_OF_PAIRS = [[0, 1, 2], [3, 4]]  # which pairs share a row


def _hparams(norm_first, num_encoder_layers=2, **overrides):
    return hparams(
        "transformer_tiny",
        vocab_size=VOCAB,
        hidden_size=32,
        filter_size=64,
        num_heads=4,
        num_encoder_layers=num_encoder_layers,
        num_decoder_layers=2,
        norm_first=norm_first,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
        **overrides,
    )


def _packed_batch():
    """`ROWS_OF_PAIRS` packed by hand (in order, no library code): the six features."""
    features = {
        name: np.zeros((len(ROWS_OF_PAIRS), ROW), "int32")
        for name in ("inputs", "targets", *PACKED_SOURCE_FEATURES, *PACKED_TARGET_FEATURES)
    }
    for r, members in enumerate(ROWS_OF_PAIRS):
        offsets = {"inputs": 0, "targets": 0}
        for segment, pair in enumerate(members, start=1):
            for side, ids in zip(("inputs", "targets"), PAIRS[pair], strict=True):
                start, end = offsets[side], offsets[side] + len(ids)
                features[side][r, start:end] = ids
                features[f"{side}_segmentation"][r, start:end] = segment
                features[f"{side}_position"][r, start:end] = np.arange(len(ids))
                offsets[side] = end
    return features


def _unpacked_batch():
    """Each pair alone in a row of `ROW` positions."""
    rows = {side: np.zeros((len(PAIRS), ROW), "int32") for side in ("inputs", "targets")}
    for i, pair in enumerate(PAIRS):
        for side, ids in zip(("inputs", "targets"), pair, strict=True):
            rows[side][i, : len(ids)] = ids
    return rows


def _per_pair(packed_values):
    """Cut `[rows, ROW, ...]` values of the packed targets back into pairs (a list)."""
    out = []
    for r, members in enumerate(ROWS_OF_PAIRS):
        start = 0
        for pair in members:
            length = len(PAIRS[pair][1])
            out.append((pair, packed_values[r, start : start + length]))
            start += length
    return [values for _, values in sorted(out, key=lambda item: item[0])]


def _loss_and_gradients(model, features, targets):
    """The summed smoothed token loss over real target tokens, per-token losses, gradients."""
    with tf.GradientTape() as tape:
        logits = model(features, training=True)
        losses = smoothed_token_losses(targets, logits, 0.1)  # [B, T]
        losses = losses * tf.cast(targets != PAD_ID, losses.dtype)
        total = tf.reduce_sum(losses)
    return total, losses.numpy(), tape.gradient(total, model.trainable_variables)


RELATIVE = {
    "self_attention_type": "dot_product_relative",
    "max_relative_position": 3,
    "pos": "none",
}


@pytest.mark.parametrize(
    "norm_first, attention",
    [(True, {}), (False, {}), (True, RELATIVE)],
    ids=["pre_ln", "post_ln", "relative"],
)
def test_packed_encoder_decoder_equals_unpacked(norm_first, attention):
    keras.utils.set_random_seed(3)
    model = build_transformer(_hparams(norm_first, **attention))
    packed, unpacked = _packed_batch(), _unpacked_batch()

    logits_packed = model(packed).numpy()
    logits_alone = model(unpacked).numpy()
    for i, values in enumerate(_per_pair(logits_packed)):
        np.testing.assert_allclose(values, logits_alone[i, : len(values)], atol=1e-5)

    total_p, losses_p, grads_p = _loss_and_gradients(model, packed, packed["targets"])
    total_u, losses_u, grads_u = _loss_and_gradients(model, unpacked, unpacked["targets"])
    for i, values in enumerate(_per_pair(losses_p)):
        np.testing.assert_allclose(values, losses_u[i, : len(values)], atol=1e-5)
    np.testing.assert_allclose(total_p, total_u, rtol=1e-5)
    for variable, a, b in zip(model.trainable_variables, grads_p, grads_u, strict=True):
        np.testing.assert_allclose(
            tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-5, err_msg=variable.path
        )


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre_ln", "post_ln"])
def test_packed_language_model_equals_unpacked(norm_first):
    keras.utils.set_random_seed(4)
    model = build_language_model(_hparams(norm_first, num_encoder_layers=0))
    packed = {k.replace("targets", "ids"): v for k, v in _packed_batch().items() if "targets" in k}
    alone = _unpacked_batch()["targets"]

    logits_alone = model(alone).numpy()
    for i, values in enumerate(_per_pair(model(packed).numpy())):
        np.testing.assert_allclose(values, logits_alone[i, : len(values)], atol=1e-5)
    total_p, _, grads_p = _loss_and_gradients(model, packed, packed["ids"])
    total_u, _, grads_u = _loss_and_gradients(model, alone, alone)
    np.testing.assert_allclose(total_p, total_u, rtol=1e-5)
    for a, b in zip(grads_p, grads_u, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-5)


def test_packing_matters_without_the_segment_features():
    """The check above can fail: the same rows without segment features mix the pairs."""
    keras.utils.set_random_seed(3)
    model = build_transformer(_hparams(True))
    packed = _packed_batch()
    mixed = model({"inputs": packed["inputs"], "targets": packed["targets"]}).numpy()
    alone = model(_unpacked_batch()).numpy()
    second = _per_pair(mixed)[1]
    assert np.abs(second - alone[1, : len(second)]).max() > 1e-3


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_packed_rows_under_mixed_precision(policy):
    keras.utils.set_random_seed(5)
    model = build_transformer(_hparams(True), dtype=policy)
    packed_logits = model(_packed_batch())
    assert packed_logits.dtype == tf.float32
    assert np.isfinite(packed_logits.numpy()).all()
    alone = model(_unpacked_batch()).numpy()
    for i, values in enumerate(_per_pair(packed_logits.numpy())):
        np.testing.assert_allclose(values, alone[i, : len(values)], atol=0.1)


def test_shift_right_restarts_each_pair_with_bos():
    packed = _packed_batch()
    shifted = shift_right(
        packed["targets"],
        segment_ids=packed["targets_segmentation"],
        positions=packed["targets_position"],
    ).numpy()
    alone = shift_right(_unpacked_batch()["targets"]).numpy()
    for i, values in enumerate(_per_pair(shifted)):
        np.testing.assert_array_equal(values, alone[i, : len(values)])
    assert (shifted[packed["targets_segmentation"] == 0] == PAD_ID).all()


def test_missing_packed_features_are_named():
    model = build_transformer(_hparams(True))
    features = _packed_batch()
    del features["inputs_position"]
    with pytest.raises(ValueError, match="inputs_position"):
        model(features)
    with pytest.raises(ValueError, match="positions"):
        model.encode(features["inputs"], segment_ids=features["inputs_segmentation"])


def test_segment_mask_and_local_attention():
    mask = segment_mask(np.array([[1, 1, 2, 0]]), np.array([[1, 2, 2, 0]])).numpy()[0]
    np.testing.assert_array_equal(
        mask.astype(int), [[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    )
    # Local attention has no attention mask: a packed row is a clear error, not ignored.
    block = TransformerBlock(num_heads=2, filter_size=16, attention_window=2)
    x = np.zeros((1, 4, 8), "float32")
    with pytest.raises(ValueError, match="attention_mask"):
        block(x, attention_mask=np.ones((1, 4, 4), bool))
