"""Tests for tfblocks.training.distribute: strategies and mirrored training."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.ids import PACKED_SOURCE_FEATURES, PACKED_TARGET_FEATURES
from tfblocks.training import distribute
from tfblocks.training.distribute import get_strategy

pytestmark = pytest.mark.heavy
SCRIPT = "tests.training.mirrored_script"  # run as `python -m` from the repository root
# Mirrored vs single device on the same global batch: equal up to summation order.
WEIGHT_TOLERANCE = 1e-5
LOSS_RTOL = 1e-5


def test_default_and_auto_on_cpu():
    assert get_strategy("default") is tf.distribute.get_strategy()
    assert get_strategy("auto").num_replicas_in_sync == 1


def _devices(kind, n):
    return [tf.config.PhysicalDevice(f"/physical_device:{kind}:{i}", kind) for i in range(n)]


@pytest.fixture
def machine(monkeypatch):
    """Pretends the machine has `devices[kind]` physical devices of each kind."""
    devices = {"CPU": 1, "GPU": 0, "TPU": 0}

    def list_physical_devices(device_type=None):
        if device_type is None:
            return [d for kind, n in devices.items() for d in _devices(kind, n)]
        return _devices(device_type, devices.get(device_type, 0))

    monkeypatch.setattr(tf.config, "list_physical_devices", list_physical_devices)
    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    # Stand-ins for the strategies that would need the real devices.
    monkeypatch.setattr(
        tf.distribute, "MirroredStrategy", lambda devices=None: ("mirrored", devices)
    )
    monkeypatch.setattr(distribute, "_tpu_strategy", lambda: "tpu")
    return devices


@pytest.mark.parametrize(
    "gpus, tpus, expected",
    [(0, 0, "default"), (1, 0, "default"), (2, 0, "mirrored"), (8, 0, "mirrored"), (2, 4, "tpu")],
)
def test_auto_picks_by_devices(machine, gpus, tpus, expected):
    machine.update(GPU=gpus, TPU=tpus)
    strategy = get_strategy("auto")
    if expected == "default":
        assert strategy is tf.distribute.get_strategy()
    elif expected == "mirrored":
        assert strategy == ("mirrored", None)  # all GPUs
    else:
        assert strategy == "tpu"


def test_auto_finds_a_named_cloud_tpu(machine, monkeypatch):
    monkeypatch.setenv("TPU_NAME", "my-tpu")
    assert get_strategy("auto") == "tpu"


def test_compile_transformer_falls_back_with_one_log_line(caplog):
    """A strategy that per-replica XLA does not cover: no XLA, and one warning saying why."""
    from tfblocks.training import compile_transformer, xla_step

    hp = tiny_hparams(20, hidden_size=16, filter_size=16, num_heads=2)
    strategy = tf.distribute.experimental.CentralStorageStrategy()
    with strategy.scope():
        model = tiny_model(hp)
        with caplog.at_level("WARNING"):
            compile_transformer(model, hp, jit_compile=True)
    assert not model.jit_compile
    assert getattr(model, xla_step.ATTRIBUTE, None) is None
    lines = [r.getMessage() for r in caplog.records if "jit_compile=False" in r.getMessage()]
    assert len(lines) == 1 and "CentralStorageStrategy" in lines[0], lines


def test_compile_transformer_installs_per_replica_xla_and_removes_it():
    from tfblocks.training import compile_transformer, xla_step

    hp = tiny_hparams(20, hidden_size=16, filter_size=16, num_heads=2)
    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = tiny_model(hp)
        compile_transformer(model, hp, jit_compile=True)
        assert model.jit_compile
        step = getattr(model, xla_step.ATTRIBUTE)
        assert model.train_step == step.train_step
        x = {"inputs": np.full((2, 5), 7, "int32"), "targets": np.full((2, 4), 8, "int32")}
        predicted = model.predict(x, verbose=0)  # the per-replica forward pass, compiled
        assert step.predict_logits.experimental_get_tracing_count() == 1
        np.testing.assert_allclose(predicted, model(x), atol=1e-5)
        compile_transformer(model, hp, jit_compile=False)  # recompiled without XLA
    assert not model.jit_compile
    assert getattr(model, xla_step.ATTRIBUTE, None) is None
    assert "train_step" not in vars(model)  # Keras' own step again


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
        [sys.executable, "-m", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,  # generous: a loaded 2-core CI machine; a hang still fails
        env=env,
        cwd=pathlib.Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_mirrored_two_cpus_matches_single_device(mirrored_result):
    r = mirrored_result
    assert r["replicas"] == 2
    # Per-replica XLA on the mirrored side, Keras' non-XLA step on the single device.
    assert r["mirrored_jit_compile"] and not r["single_jit_compile"]
    assert all(n >= 1 for n in r["xla_traces"])  # train and test steps compiled
    assert r["max_weight_change"] > 1e-3  # training moved the weights...
    assert r["max_weight_diff"] < WEIGHT_TOLERANCE  # ...identically on both setups.
    np.testing.assert_allclose(r["mirrored_loss"], r["single_loss"], rtol=LOSS_RTOL)
    np.testing.assert_allclose(r["mirrored_accuracy"], r["single_accuracy"], rtol=LOSS_RTOL)
    for key, value in r["single_eval"].items():
        assert r["mirrored_eval"][key] == pytest.approx(value, rel=LOSS_RTOL), key


def test_accumulation_and_moving_average_match_single_device(mirrored_result):
    r = mirrored_result
    assert r["accumulated_updates"] == [4, 4]  # 8 micro-batches, 2 per update
    assert r["accumulated_weight_change"] > 1e-3
    assert r["accumulated_weight_diff"] < WEIGHT_TOLERANCE
    assert r["accumulated_average_diff"] < WEIGHT_TOLERANCE


def test_loss_is_the_global_token_mean_across_replicas(mirrored_result):
    r = mirrored_result
    assert r["tokens_per_replica"][0] != r["tokens_per_replica"][1]  # uneven on purpose
    assert r["replica_summed_loss"] == pytest.approx(r["whole_batch_loss"], rel=1e-6)


@pytest.mark.parametrize("shapes", ["dynamic", "max_length"])
def test_distribute_dataset_gives_each_replica_half_the_budget(mirrored_result, shapes):
    from tests.training.multi_worker_script import text_pairs

    r = mirrored_result["sharded"]
    assert r[shapes]["sources"] == sorted(source for source, _ in text_pairs(39, 24))
    assert r[shapes]["within_budget"]
    if shapes == "max_length":  # 13 batches: the 7th step is completed with a PAD batch
        assert r[shapes]["steps"] == 7
    else:  # a `fit` epoch on batches of different shapes per replica
        assert np.isfinite(r["loss"]).all()


def test_packed_rows_train_as_on_one_device(mirrored_result):
    """Packed rows under Mirrored (two replicas of 3 rows, their segment features) give
    the weights of one device trained on the steps' 6 rows."""
    r = mirrored_result["packed"]
    assert r["features"] == sorted(
        ["inputs", "targets", *PACKED_SOURCE_FEATURES, *PACKED_TARGET_FEATURES]
    )
    assert r["replica_rows"] == [3, 3]
    assert r["steps"][0] == r["steps"][1] >= 2
    assert r["iterations"] == r["steps"]  # the schedule counts the updates that ran
    assert r["weight_change"] > 1e-3  # training moved the weights...
    assert r["weight_diff"] < WEIGHT_TOLERANCE  # ...identically on both setups.


def test_an_endless_stream_gives_every_replica_pairs_and_starts_at_a_step(mirrored_result):
    r = mirrored_result["sharded"]["stream"]
    assert r["real_batches"]  # 13 batches a pass per pipeline, no empty or PAD batch
    assert r["started_equals"]  # the stream started at step 9 = steps 9.. of the whole
    assert len(r["loss"]) == 2 and np.isfinite(r["loss"]).all()


def test_cluster_task_names_the_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert distribute.cluster_task() == (True, None)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"task": {"type": "evaluator", "index": 0}}))
    assert distribute.cluster_task() == (False, "evaluator-0")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match=r"TF_CONFIG='\{not json'"):
        distribute.cluster_task()
