"""Two-worker `MultiWorkerMirroredStrategy` training on 127.0.0.1, one CPU each.

Covers the keras#20585 work-around (`multi_worker.patch_keras`) and per-replica XLA
(`xla_step`): the XLA run must really compile, leave both workers with identical
weights, and match both the non-XLA run and single-process training on the same
global batch; that without the work-around Keras' `fit` fails; and that with
`distribute_dataset` each worker reads only its own shard of the pairs, on which the
translation job trains both to identical weights. A worker that does not finish within
`TIMEOUT_S` fails the test.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tfblocks.training import multi_worker

pytestmark = pytest.mark.heavy
SCRIPT = "tests.training.multi_worker_script"  # run as `python -m` from the repository root
TIMEOUT_S = 600  # for both workers together: generous on a loaded 2-core machine
# Per-replica XLA vs Keras' non-XLA step vs one process: equal up to summation order.
WEIGHT_TOLERANCE = 2e-5
LOSS_RTOL = 1e-5


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(tmp_path):
    """Runs two workers; returns one dict per worker (returncode, stdout, stderr, ...).

    Both share one deadline; a worker still running then is killed and reported with
    `timed_out=True` (and returncode None), so no caller can mistake a hang for a failure
    of Keras.
    """
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        dump = tmp_path / f"xla{index}"
        env = {
            **os.environ,
            "KERAS_BACKEND": "tensorflow",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            # One CPU per worker: one inter/intra-op thread, like `taskset -c i`.
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
            # Proof that the per-replica step ran through XLA: its HLO is dumped here.
            # (After the suite's own XLA flags: tests/conftest.py.)
            "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump} "
            "--xla_dump_hlo_module_re=.*train_gradients.*",
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            ),
        }
        out = tmp_path / f"worker{index}.npz"
        proc = subprocess.Popen(
            [sys.executable, "-m", SCRIPT, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=pathlib.Path(__file__).parents[2],
        )
        workers.append({"proc": proc, "out": out, "dump": dump})
    deadline = time.monotonic() + TIMEOUT_S
    for worker in workers:
        proc = worker.pop("proc")
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            worker.update(returncode=proc.returncode, timed_out=False)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            worker.update(returncode=None, timed_out=True)
        worker.update(stdout=stdout, stderr=stderr)
    return workers


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workers = run_workers(tmp_path_factory.mktemp("multi_worker"))
    for worker in workers:
        assert not worker["timed_out"], f"worker hung:\n{worker['stderr'][-3000:]}"
        assert worker["returncode"] == 0, worker["stderr"][-3000:]
        worker["log"] = json.loads(worker["stdout"].strip().splitlines()[-1])
    return workers


def test_two_workers_train_with_xla_to_identical_weights(trained):
    logs = [worker["log"] for worker in trained]
    assert [log["replicas"] for log in logs] == [2, 2]
    assert [log["jit_compile"] for log in logs] == [[True, False]] * 2
    assert all(log["xla_traces"] >= 1 for log in logs)
    for worker in trained:  # XLA compiled the per-replica gradient function
        assert any("train_gradients" in path.name for path in worker["dump"].iterdir())
    assert logs[0]["history"] == logs[1]["history"]
    losses = logs[0]["history"]["loss"]
    assert losses[-1] < losses[0]
    first, second = (np.load(worker["out"]) for worker in trained)
    assert len(first.files) == len(second.files) > 0
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


def test_xla_matches_keras_step_and_single_process_training(trained):
    # The single-process run is the chief's alone (worker 0; the workers' XLA weights
    # are identical: test_two_workers_train_with_xla_to_identical_weights).
    assert [worker["log"]["chief"] for worker in trained] == [True, False]
    for log in (worker["log"] for worker in trained):
        assert log["moved"] > 1e-3  # training moved the weights...
        assert log["xla_vs_plain"] < WEIGHT_TOLERANCE  # ...like Keras' non-XLA step
        for key in ("loss", "accuracy", "perplexity"):
            np.testing.assert_allclose(
                log["history"][key], log["plain_history"][key], rtol=LOSS_RTOL
            )
    chief = trained[0]["log"]
    assert chief["xla_vs_single"] < WEIGHT_TOLERANCE  # ...and like one process.
    for key in ("loss", "accuracy", "perplexity"):
        np.testing.assert_allclose(
            chief["history"][key], chief["single_history"][key], rtol=LOSS_RTOL
        )


def test_each_worker_reads_its_own_shard(trained):
    from tests.training.multi_worker_script import text_pairs

    shards = [worker["log"]["sources"] for worker in trained]
    assert all(len(shard) == len(set(shard)) for shard in shards)  # each pair once
    assert [len(shard) for shard in shards] == [21, 20]  # every n-th pair
    assert not set(shards[0]) & set(shards[1])
    assert set(shards[0]) | set(shards[1]) == {source for source, _ in text_pairs(41, 24)}


def test_the_translation_job_trains_on_both_workers_to_identical_weights(trained):
    logs = [worker["log"] for worker in trained]
    assert [log["job_epochs"] for log in logs] == [1, 1]
    assert logs[0]["job_loss"] == logs[1]["job_loss"] and np.isfinite(logs[0]["job_loss"])
    first, second = (np.load(str(w["out"]).replace(".npz", "_job.npz")) for w in trained)
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


def test_workers_reading_their_own_unequal_files_take_the_same_steps(trained):
    # `steps_per_epoch` on a streamed corpus of two files (30 and 11 pairs): each worker
    # repeats its own file, so neither runs out and the collectives never wait in vain.
    logs = [worker["log"] for worker in trained]
    assert [log["stream_epochs"] for log in logs] == [2, 2]
    assert logs[0]["stream_losses"] == logs[1]["stream_losses"]
    assert np.isfinite(logs[0]["stream_losses"]).all()
    first, second = (np.load(str(w["out"]).replace(".npz", "_stream.npz")) for w in trained)
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


def test_without_the_fix_keras_fails(trained):
    # Each worker's first `fit`, with TFBLOCKS_NO_KERAS_PATCH=1 (multi_worker_script.py).
    if not multi_worker.patch_keras():
        pytest.skip("this Keras no longer needs the keras#20585 work-around")
    for error in (worker["log"]["unpatched_error"] for worker in trained):
        assert error is not None and "PerReplica" in error, error


def test_patch_keras_is_idempotent():
    assert multi_worker.patch_keras() == multi_worker.patch_keras()
