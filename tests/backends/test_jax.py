"""The layers and models under KERAS_BACKEND=jax (issue: the layers on every backend).

The suite runs under TensorFlow; one JAX process (jax_worker.py) does the JAX half with
the weights written here, and the tests compare. Small: a few layers, one short fit.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.backends import cases
from tests.backends.jax_worker import VOCAB, dropout_masks, logits, model_inputs
from tfblocks.models import build_transformer, hparams


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory):
    """Writes the TensorFlow half, runs the JAX worker once; (folder, TF outputs, JAX
    arrays, results)."""
    folder = tmp_path_factory.mktemp("jax")
    keras.utils.set_random_seed(7)
    weights, outputs = {}, {}
    for name in cases.CASES:
        layer = cases.build(name)
        for i, value in enumerate(layer.get_weights()):
            weights[f"{name}/{i}"] = value
        outputs[name] = cases.output(name, layer)
    np.savez(folder / "tf.npz", **weights)
    model = build_transformer(hparams("transformer_tiny", vocab_size=VOCAB, hidden_size=32))
    model.save(folder / "tf_model.keras")
    outputs["tf_model_logits"] = logits(model)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    worker = os.path.join(os.path.dirname(__file__), "jax_worker.py")
    done = subprocess.run(
        [sys.executable, worker, str(folder)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(folder / "jax.npz") as arrays:
        jax_arrays = dict(arrays)
    results = json.loads((folder / "results.json").read_text())
    return folder, outputs, jax_arrays, results


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_layer_forward_equals_tensorflow(jax_run, name):
    _, outputs, jax_arrays, results = jax_run
    assert results["backend"] == "jax"
    np.testing.assert_allclose(jax_arrays[f"case/{name}"], outputs[name], atol=1e-5, rtol=1e-5)


def test_hash_dropout_masks_equal_tensorflow(jax_run):
    _, _, jax_arrays, _ = jax_run
    for key, mask in dropout_masks().items():  # the same seeds, here under TensorFlow
        np.testing.assert_array_equal(jax_arrays[key], mask, err_msg=key)
        assert 0.2 < float(np.mean(mask == 0)) < 0.4, key  # rate 0.3: a real mask


def test_padding_invariance_and_causality_under_jax(jax_run):
    masks = jax_run[3]["masks"]
    assert masks["padding"] < 1e-5
    assert masks["causality"] < 1e-6
    assert masks["future_changes_last"] > 1e-3  # the changed input did reach its own position


def test_mixed_bfloat16_under_jax(jax_run):
    bf16 = jax_run[3]["bfloat16"]
    assert bf16["dtype"] == "bfloat16" and bf16["finite"]
    assert bf16["error"] < 0.1  # bfloat16 keeps 8 bits of mantissa; a wrong op is off by O(1)


def test_fit_with_dropout_under_jax_lowers_the_loss(jax_run):
    fit = jax_run[3]["fit"]
    assert fit["dropout"] > 0
    first, second = fit["loss"]
    assert np.isfinite([first, second]).all() and second < first
    assert np.isfinite(fit["tf_data_loss"]) and fit["tf_data_loss"] < second  # tf.data input


def test_model_saved_under_tensorflow_loads_under_jax(jax_run):
    _, outputs, jax_arrays, _ = jax_run
    np.testing.assert_allclose(
        jax_arrays["tf_model_logits"], outputs["tf_model_logits"], atol=1e-5, rtol=1e-5
    )


def test_model_trained_under_jax_loads_under_tensorflow(jax_run):
    folder, _, jax_arrays, _ = jax_run
    model = keras.saving.load_model(folder / "jax_model.keras")
    here = keras.ops.convert_to_numpy(model(model_inputs(), training=False))
    np.testing.assert_allclose(here, jax_arrays["jax_model_logits"], atol=1e-5, rtol=1e-5)


def test_readme_layer_example_under_jax(jax_run):
    assert jax_run[3]["readme"] == "(None, None, 100)"


def test_tensorflow_only_objects_refuse_under_jax(jax_run):
    said = jax_run[3]["refusals"]
    assert set(said) == {"Decoder", "Translator", "TrainingJob", "Decoder()"}
    for what, line in said.items():
        assert "\n" not in line and "KERAS_BACKEND=tensorflow" in line and "'jax'" in line, what
    assert said["Decoder()"].startswith("Decoder runs on TensorFlow only")


def _command(code, returncode):
    """`python -c code` as a console script named tfblocks-x, with KERAS_BACKEND=jax."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    program = f"import sys; sys.argv = ['tfblocks-x']\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == returncode, done.stderr[-3000:]
    return done


def test_commands_run_on_tensorflow_under_a_jax_shell():
    done = _command(
        "from tfblocks.cli.console import run_command\n"
        "run_command('tfblocks-x', lambda: print(__import__('keras').backend.backend()))",
        0,
    )
    assert done.stdout.strip() == "tensorflow"


def test_command_refuses_when_keras_already_runs_on_jax():
    done = _command(
        "import keras\nfrom tfblocks.cli.console import run_command\n"
        "run_command('tfblocks-x', lambda: print('ran'))",
        2,
    )
    assert "ran" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("tfblocks-x: error:")]
    assert len(lines) == 1 and "KERAS_BACKEND=tensorflow" in lines[0], done.stderr[-2000:]
