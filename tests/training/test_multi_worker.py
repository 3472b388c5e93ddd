"""Two-worker `MultiWorkerMirroredStrategy` training on 127.0.0.1 (keras-team/keras#20585)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from tfblocks.training import multi_worker

SCRIPT = pathlib.Path(__file__).with_name("multi_worker_script.py")
TIMEOUT_S = 180


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(tmp_path, extra_env=None):
    """Runs two workers; returns [(returncode, stdout, stderr, weights file)]."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    procs = []
    for index in range(2):
        env = {
            **os.environ,
            "KERAS_BACKEND": "tensorflow",
            "TF_CPP_MIN_LOG_LEVEL": "3",
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            ),
            **(extra_env or {}),
        }
        out = tmp_path / f"worker{index}.npz"
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, str(SCRIPT), str(out)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=pathlib.Path(__file__).parents[2],
                ),
                out,
            )
        )
    results = []
    for proc, out in procs:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        results.append((proc.returncode, stdout, stderr, out))
    return results


def test_two_workers_fit_and_end_with_identical_weights(tmp_path):
    results = run_workers(tmp_path)
    for returncode, _, stderr, _ in results:
        assert returncode == 0, stderr[-3000:]
    logs = [json.loads(stdout.strip().splitlines()[-1]) for _, stdout, _, _ in results]
    assert [log["replicas"] for log in logs] == [2, 2]
    assert logs[0]["history"] == logs[1]["history"]
    losses = logs[0]["history"]["loss"]
    assert losses[-1] < losses[0]
    first, second = (np.load(out) for _, _, _, out in results)
    assert len(first.files) == len(second.files) > 0
    for name in first.files:
        np.testing.assert_array_equal(first[name], second[name])


def test_without_the_fix_keras_fails(tmp_path):
    if not multi_worker.patch_keras():
        pytest.skip("this Keras no longer needs the keras#20585 work-around")
    results = run_workers(tmp_path, {"TFBLOCKS_NO_KERAS_PATCH": "1"})
    assert all(returncode != 0 for returncode, _, _, _ in results)
    assert any("PerReplica" in stderr for _, _, stderr, _ in results)


def test_patch_keras_is_idempotent():
    assert multi_worker.patch_keras() == multi_worker.patch_keras()
