"""Training resumes after SIGKILL: keras.callbacks.BackupAndRestore with our model."""

import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.training.resume_script import EPOCHS, KILL_EPOCH, STEPS

pytestmark = pytest.mark.heavy
SCRIPT = "tests.training.resume_script"  # run as `python -m` from the repository root
TIMEOUT_S = 180


def start(workdir):
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen(
        [sys.executable, "-m", SCRIPT, str(workdir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=pathlib.Path(__file__).parents[2],
    )


def test_training_resumes_after_sigkill(tmp_path):
    first = start(tmp_path)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not (tmp_path / "ready").exists():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run never reached the kill point"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    assert first.returncode == -signal.SIGKILL
    (tmp_path / "killed").write_text("")

    with open(tmp_path / "history.csv") as f:
        before = [int(row["epoch"]) for row in csv.DictReader(f)]
    assert before == list(range(KILL_EPOCH))  # killed in the middle of epoch 2

    second = start(tmp_path)  # the same command
    stdout, stderr = second.communicate(timeout=TIMEOUT_S)
    assert second.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["epochs"] == list(range(KILL_EPOCH, EPOCHS))  # continues, not restarts
    assert result["iterations"] == EPOCHS * STEPS  # the optimizer state came back too

    with open(tmp_path / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == list(range(EPOCHS))
    losses = [float(row["loss"]) for row in rows]
    # A restart from scratch would repeat epoch 0's loss; a resumed run improves on it.
    assert losses[KILL_EPOCH] < losses[KILL_EPOCH - 1] < losses[0]
