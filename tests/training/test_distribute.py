"""Tests for tfblocks.training.distribute: strategies, mirrored training, static batches."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfblocks.training import distribute
from tfblocks.training.distribute import get_strategy, static_batches

SCRIPT = pathlib.Path(__file__).with_name("mirrored_script.py")
# Mirrored vs single device on the same global batch: equal up to summation order.
WEIGHT_TOLERANCE = 1e-5
LOSS_RTOL = 1e-5


def test_default_and_auto_on_cpu():
    assert get_strategy("default") is tf.distribute.get_strategy()
    assert get_strategy("auto").num_replicas_in_sync == 1


def test_tpu_discovery(monkeypatch):
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    assert distribute._tpu_name() is None  # no TPU here: "auto" must not try one
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    assert distribute._tpu_name() == ""
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert distribute._tpu_name() == "my-tpu"


def test_invalid_kind_and_devices():
    with pytest.raises(ValueError, match="kind='gpu'"):
        get_strategy("gpu")
    with pytest.raises(ValueError, match="devices"):
        get_strategy("default", devices=["/cpu:0"])


@pytest.fixture(scope="module")
def mirrored_result():
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=pathlib.Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mirrored_two_cpus_matches_single_device(mirrored_result):
    r = mirrored_result
    assert r["replicas"] == 2
    assert not r["mirrored_jit_compile"]  # compile_transformer turns XLA off under a strategy
    assert r["max_weight_change"] > 1e-3  # training moved the weights...
    assert r["max_weight_diff"] < WEIGHT_TOLERANCE  # ...identically on both setups.
    np.testing.assert_allclose(r["mirrored_loss"], r["single_loss"], rtol=LOSS_RTOL)
    np.testing.assert_allclose(r["mirrored_accuracy"], r["single_accuracy"], rtol=LOSS_RTOL)


def test_loss_is_the_global_token_mean_across_replicas(mirrored_result):
    r = mirrored_result
    assert r["tokens_per_replica"][0] != r["tokens_per_replica"][1]  # uneven on purpose
    assert r["replica_summed_loss"] == pytest.approx(r["whole_batch_loss"], rel=1e-6)


def test_static_batches_have_fixed_shapes_and_drop_long_examples():
    rng = np.random.default_rng(0)
    examples = [rng.integers(4, 9, n).astype("int32") for n in (3, 5, 12, 2, 6, 4, 7)]
    dataset = tf.data.Dataset.from_generator(
        lambda: (({"inputs": e, "targets": e[::-1]}, e[::-1]) for e in examples),
        output_signature=(
            {
                "inputs": tf.TensorSpec([None], tf.int32),
                "targets": tf.TensorSpec([None], tf.int32),
            },
            tf.TensorSpec([None], tf.int32),
        ),
    )
    batched = static_batches(dataset, batch_size=4, max_length=8)
    features, labels = batched.element_spec
    assert features["inputs"].shape == features["targets"].shape == labels.shape == (4, 8)
    batches = list(batched)
    assert len(batches) == 1  # 6 examples fit in 8 tokens; the partial batch is dropped
    inputs = batches[0][0]["inputs"].numpy()
    np.testing.assert_array_equal(inputs[2], np.pad(examples[3], (0, 6)))
    np.testing.assert_array_equal(batches[0][1].numpy()[0], np.pad(examples[0][::-1], (0, 5)))


def test_static_batches_validates_arguments():
    dataset = tf.data.Dataset.from_tensor_slices(({"inputs": [[1]], "targets": [[1]]}, [[1]]))
    with pytest.raises(ValueError, match="max_length=0"):
        static_batches(dataset, batch_size=2, max_length=0)
