"""The JAX half of tests/backends/test_jax.py: run as `KERAS_BACKEND=jax python
tests/backends/jax_worker.py DIR` after the TensorFlow half has written DIR/tf.npz
(each case's weights) and DIR/tf_model.keras.

Writes DIR/jax.npz (the cases' outputs with TensorFlow's weights, dropout masks, logits
of both models), DIR/jax_model.keras (a model trained here) and DIR/results.json (the
checks that need no TensorFlow numbers). One process for all of it: JAX and Keras load
once.
"""

import json
import re
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf  # tf.data feeds JAX too

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.backends import cases  # noqa: E402
from tfblocks import _backend  # noqa: E402
from tfblocks.layers import TransformerBlock, dropout  # noqa: E402
from tfblocks.models import build_transformer, hparams  # noqa: E402
from tfblocks.training import compile_transformer  # noqa: E402

VOCAB = 16


def model_inputs():
    """Fixed source/target ids for the cross-backend logits (0 = padding)."""
    rng = np.random.default_rng(1)
    source = rng.integers(3, VOCAB, size=(3, 6)).astype("int32")
    target = rng.integers(3, VOCAB, size=(3, 5)).astype("int32")
    source[2, 4:] = 0
    target[2, 3:] = 0
    return {"inputs": source, "targets": target}


def logits(model):
    return keras.ops.convert_to_numpy(model(model_inputs(), training=False))


def dropout_masks():
    """The hash dropout of a ones tensor for fixed seeds (compared with TensorFlow's)."""
    ones = keras.ops.ones((3, 7, 11))
    return {
        f"dropout/{a}_{b}": keras.ops.convert_to_numpy(
            dropout.apply_hash_dropout(ones, keras.ops.convert_to_tensor([a, b]), 0.3)
        )
        for a, b in [(5, 9), (0, 0), (123456789, 42)]
    }


def padding_and_causality():
    """Largest changes that padding and future tokens must not cause, under JAX."""
    d = cases.inputs()
    layer = TransformerBlock(num_heads=2, filter_size=16, causal=True, cross_attention=True)
    full = keras.ops.convert_to_numpy(
        layer(d["x"], d["context"], padding_mask=d["mask"], context_padding_mask=d["context_mask"])
    )
    # Row 1 has 3 real tokens and 2 context tokens: alone and unpadded it must agree.
    alone = keras.ops.convert_to_numpy(layer(d["x"][1:, :3], d["context"][1:, :2]))
    # Changing the last position must not change the earlier ones (causal self-attention).
    changed = d["x"].copy()
    changed[:, -1] += 10.0
    later = keras.ops.convert_to_numpy(
        layer(changed, d["context"], padding_mask=d["mask"], context_padding_mask=d["context_mask"])
    )
    return {
        "padding": float(np.abs(full[1, :3] - alone[0]).max()),
        "causality": float(np.abs(full[:, :-1] - later[:, :-1]).max()),
        "future_changes_last": float(np.abs(full[:, -1] - later[:, -1]).max()),
    }


def bfloat16():
    """A block under mixed_bfloat16 against its float32 twin (same weights)."""
    d = cases.inputs()
    exact = TransformerBlock(num_heads=2, filter_size=16)
    mixed = TransformerBlock(num_heads=2, filter_size=16, dtype="mixed_bfloat16")
    reference = keras.ops.convert_to_numpy(exact(d["x"], padding_mask=d["mask"]))
    mixed(d["x"], padding_mask=d["mask"])
    mixed.set_weights(exact.get_weights())
    out = mixed(d["x"], padding_mask=d["mask"])
    return {
        "dtype": keras.backend.standardize_dtype(out.dtype),
        "error": float(np.abs(keras.ops.convert_to_numpy(out).astype("float32") - reference).max()),
        "finite": bool(np.isfinite(keras.ops.convert_to_numpy(out).astype("float32")).all()),
    }


def fit_and_save(folder):
    """Two epochs of the tiny model with dropout on a copy task (NumPy input), one more
    from a `tf.data` pipeline; saves the model."""
    hp = hparams("transformer_tiny", vocab_size=VOCAB, hidden_size=32, filter_size=64)
    model = build_transformer(hp)
    compile_transformer(model, hp, learning_rate=3e-3)
    rng = np.random.default_rng(2)
    ids = rng.integers(3, VOCAB, size=(256, 6)).astype("int32")
    history = model.fit({"inputs": ids, "targets": ids}, ids, epochs=2, batch_size=32, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices(({"inputs": ids, "targets": ids}, ids)).batch(32)
    from_dataset = model.fit(dataset, epochs=1, verbose=0).history["loss"]
    model.save(folder / "jax_model.keras")
    return {
        "loss": [float(v) for v in history.history["loss"]],
        "tf_data_loss": float(from_dataset[0]),
        "dropout": hp.layer_prepostprocess_dropout,
    }


def readme_example():
    """The README's layer example, run as it is written; returns what it printed."""
    text = (ROOT / "README.md").read_text()
    block = re.search(
        r"## A tfblocks layer in your own Keras model\s+```python\n(.*?)```", text, re.S
    )
    printed = []
    exec(compile(block.group(1), "README.md", "exec"), {"print": printed.append})
    return repr(printed[-1])


def refusals():
    """What each TensorFlow-only object says when it is made under JAX."""
    said = {}
    for what in ("Decoder", "Translator", "TrainingJob"):
        try:
            _backend.require_tensorflow(what)
        except RuntimeError as error:
            said[what] = str(error)
    from tfblocks.decoding import Decoder

    try:
        Decoder(None, max_length=8)
    except RuntimeError as error:
        said["Decoder()"] = str(error)
    return said


def main(folder):
    folder = Path(folder)
    assert keras.backend.backend() == "jax", keras.backend.backend()
    weights = np.load(folder / "tf.npz")
    arrays = {}
    for name in cases.CASES:
        layer = cases.build(name)
        count = len(layer.get_weights())
        layer.set_weights([weights[f"{name}/{i}"] for i in range(count)])
        arrays[f"case/{name}"] = cases.output(name, layer)
    arrays.update(dropout_masks())
    arrays["tf_model_logits"] = logits(keras.saving.load_model(folder / "tf_model.keras"))
    results = {
        "backend": keras.backend.backend(),
        "masks": padding_and_causality(),
        "bfloat16": bfloat16(),
        "fit": fit_and_save(folder),
        "readme": readme_example(),
        "refusals": refusals(),
    }
    arrays["jax_model_logits"] = logits(keras.saving.load_model(folder / "jax_model.keras"))
    np.savez(folder / "jax.npz", **arrays)
    (folder / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
