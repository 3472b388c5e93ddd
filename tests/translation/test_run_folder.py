"""The run folder: continue, resume after a kill, time limits, early stopping, averaging."""

import errno
import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.training.weights import average_weights, load_weights
from tfblocks.translation import run_folder
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def job():
    return parts()


@pytest.fixture(scope="module")
def straight(job, tmp_path_factory):
    """Three epochs without interruption: the reference the other runs must equal."""
    folder = RunFolder(tmp_path_factory.mktemp("straight"))
    model, report = train(folder, *job, options(3, average_last=2), log=lambda _: None)
    return folder, report, model


def npz(path):
    with np.load(path) as stored:
        return {k: stored[k] for k in stored.files}


def assert_same_weights(a, b):
    a, b = npz(a), npz(b)
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_time_limit_stop_then_continue_after_completion_equals_a_straight_run(
    job, straight, tmp_path
):
    reference, report, _ = straight
    assert report["epochs"] == 3 and [h["epoch"] for h in report["history"]] == [1, 2, 3]
    folder = RunFolder(tmp_path)
    _, stopped = train(folder, *job, options(1, time_limit=1e-3), log=lambda _: None)
    assert stopped["stopped"] == "time limit" and stopped["epochs"] == 0
    assert folder.progress()["train_seconds"] > 0
    _, done = train(folder, *job, options(1), log=lambda _: None)  # the rerun continues
    assert done["epochs"] == 1 and done["stopped"] == "epochs"
    first = folder.progress()
    _, second = train(folder, *job, options(2), log=print)  # the same command, more epochs
    assert second["epochs"] == 2 and len(second["history"]) == 2
    assert second["train_seconds"] > first["train_seconds"] > 0  # totals across reruns
    assert_same_weights(folder.join("last.npz"), reference.join("checkpoints", "epoch-0002.npz"))


def test_killed_run_resumes_to_the_same_weights(job, straight, tmp_path):
    reference, _, _ = straight
    script = os.path.join(ROOT, "tests", "translation", "run_job.py")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}

    killed = subprocess.run(
        [sys.executable, script, str(tmp_path), "3", "2"],  # SIGKILLed in the middle of epoch 2
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert RunFolder(tmp_path).progress()["epochs"] == 1
    # The same job again (in this process, where TensorFlow is already loaded).
    _, report = train(RunFolder(tmp_path), *job, options(3), log=lambda _: None)
    assert report["epochs"] == 3 and report["stopped"] == "epochs"
    progress = RunFolder(tmp_path).progress()
    assert progress["epochs"] == 3 and [h["epoch"] for h in progress["history"]] == [1, 2, 3]
    assert_same_weights(RunFolder(tmp_path).join("last.npz"), reference.join("last.npz"))


def test_early_stopping_keeps_the_best_epoch_and_a_tie_the_later_one(job, tmp_path):
    splits, tokenizer, hp = job
    frozen = hp.__class__(**{**hp.__dict__, "learning_rate_constant": 1e-12})  # BLEU can't move
    folder = RunFolder(tmp_path)
    opts = options(5, dev_sentences=8, early_stopping=1)
    _, report = train(folder, splits, tokenizer, frozen, opts, log=lambda _: None)
    assert report["stopped"] == "early stopping"  # a tie is no improvement: patience ran out
    bleu = [h["dev_bleu"] for h in report["history"]]
    assert report["epochs"] == 2 and bleu[0] == bleu[1]
    assert report["best_epoch"] == 2  # the tie: the later epoch's weights
    assert all("dev_bleu" in h and "dev_chrf" in h for h in report["history"])
    assert all(h["seconds"] > 0 and h["dev_seconds"] > 0 for h in report["history"])
    assert report["final_weights"] == "best (epoch 2)"
    assert_same_weights(folder.join("best.npz"), folder.join("checkpoints", "epoch-0002.npz"))


def test_averaging_gives_the_mean_of_the_last_checkpoints(straight):
    folder, report, model = straight  # trained with average_last=2, no dev BLEU
    assert report["averaged_epochs"] == [2, 3]
    assert report["final_weights"] == "average of epochs 2–3"
    a, b = (npz(p) for _, p in folder.checkpoints()[-2:])
    floats = [v for v in model.weights if np.issubdtype(a[v.path].dtype, np.floating)]
    assert len(floats) > 10
    for variable in floats:
        want = (a[variable.path].astype(np.float64) + b[variable.path]) / 2
        np.testing.assert_allclose(np.asarray(variable), want, atol=1e-6, err_msg=variable.path)
    assert not np.allclose(np.asarray(floats[0]), a[floats[0].path])  # really averaged
    with pytest.raises(ValueError, match="at least one"):
        average_weights(model, [])
    load_weights(model, folder.join("last.npz"))
    np.testing.assert_array_equal(np.asarray(floats[0]), b[floats[0].path])


def test_mixed_precision_trains_in_bfloat16_and_returns_a_float32_model(job, straight, tmp_path):
    """Under `mixed_bfloat16` training computes in bfloat16 (its losses differ from a
    float32 run's), while dev BLEU, the returned model and its exports use float32
    layers holding exactly the trained weights."""
    # The losses' reference: the first epoch of the straight run when "auto" trained it in
    # float32 (on a CPU without bfloat16 instructions), else a float32 run of its own.
    _, single, _ = straight
    if single["dtype_policy"] != "float32":
        reference = options(1, dtype_policy="float32")
        _, single = train(RunFolder(tmp_path / "float32"), *job, reference, log=lambda _: None)
    folder = RunFolder(tmp_path / "mixed_bfloat16")
    opts = options(1, dtype_policy="mixed_bfloat16", dev_sentences=4)
    model, mixed = train(folder, *job, opts, log=lambda _: None)
    assert (single["dtype_policy"], mixed["dtype_policy"]) == ("float32", "mixed_bfloat16")
    loss_32, loss_16 = single["history"][0]["loss"], mixed["history"][0]["loss"]
    assert loss_32 != loss_16 and abs(loss_32 - loss_16) < 0.05 * loss_32
    assert "dev_bleu" in mixed["history"][0]
    assert {layer.compute_dtype for layer in model._flatten_layers()} == {"float32"}
    stored = npz(folder.join("best.npz"))
    for variable in model.weights:
        np.testing.assert_array_equal(np.asarray(variable), stored[variable.path])
    with pytest.raises(ValueError, match="dtype_policy='bf16'"):
        options(1, dtype_policy="bf16")


def _small_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model


def test_run_folder_refuses_a_users_directory_and_other_settings(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a tfblocks run folder"):
        RunFolder(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]
    folder = RunFolder(tmp_path / "run")
    keys = ["vocab_size", "corpus"]
    assert folder.check_settings({"vocab_size": 1000, "corpus": "abc"}, keys) is None
    # Nothing trained yet (a start that failed): the corrected settings replace them.
    assert folder.check_settings({"vocab_size": 8000, "corpus": "abc"}, keys) is None
    folder.commit(_small_model(), folder.progress())  # a recorded step binds the settings
    assert folder.trained()
    assert folder.check_settings({"vocab_size": 8000, "corpus": "abc"}, keys)["vocab_size"] == 8000
    with pytest.raises(ValueError, match=r"vocab_size: the folder has 8000.*asks for 1000"):
        folder.check_settings({"vocab_size": 1000, "corpus": "abc"}, keys)
    saved = json.loads((tmp_path / "run" / "run.json").read_text())["settings"]
    assert saved["vocab_size"] == 8000
    # A key outside `keys` (the beam size the run decodes with) binds nothing: it takes
    # the new value, which every command then reads (`run_beam_size`).
    for beam_size in (1, 6):
        got = folder.check_settings({"vocab_size": 8000, "corpus": "abc", "beam_size": beam_size},
                                    keys)  # fmt: skip
        assert (
            got["beam_size"] == beam_size
            and run_folder.run_beam_size(tmp_path / "run") == beam_size
        )


def test_an_epoch_is_recorded_whole_or_not_at_all(job, straight, tmp_path, monkeypatch):
    """A failure after an epoch's files are written but before its progress is (a kill
    there) leaves the folder at the recorded epoch: the rerun uses no checkpoint, best or
    last weights or training state of the unrecorded epoch."""
    reference, _, _ = straight
    real_write = run_folder.write_json
    state = tmp_path / "state" / "training.weights.h5"
    recorded = {}

    def fail_at_epoch_2(path, data):
        if path.endswith("progress.json") and data["epochs"] == 2:
            recorded["state"] = state.read_bytes()  # epoch 1's, the recorded one
            raise OSError(errno.EIO, "killed before the commit", path)
        return real_write(path, data)

    monkeypatch.setattr(run_folder, "write_json", fail_at_epoch_2)
    opts = options(2, average_last=2, dev_sentences=2)
    with RunFolder(tmp_path) as folder, pytest.raises(OSError, match="before the commit"):
        train(folder, *job, opts, log=lambda _: None)
    monkeypatch.undo()
    staged = set(os.listdir(tmp_path / "state" / "commit-000002"))  # all of epoch 2 written
    assert {"epoch-0002.npz", "last.npz", "training.weights.h5"} <= staged

    with RunFolder(tmp_path) as folder:  # what the rerun finds: epoch 1, nothing of epoch 2
        assert folder.progress()["epochs"] == 1 and folder.checkpoints()[-1][0] == 1
        assert not (tmp_path / "state" / "commit-000002").exists()
        assert state.read_bytes() == recorded["state"]  # continuing starts from epoch 1
        _, report = train(folder, *job, options(1, average_last=2), log=lambda _: None)
    assert report["epochs"] == 1 and "averaged_epochs" not in report  # one checkpoint only
    assert report["final_weights"] in ("best (epoch 1)", "last (epoch 1)")
    assert [h["epoch"] for h in report["history"]] == [1]
    epoch_1 = reference.join("checkpoints", "epoch-0001.npz")
    for name in ("last.npz", "best.npz"):
        assert_same_weights(tmp_path / name, epoch_1)


def test_a_recorded_commit_is_completed_when_the_folder_is_reopened(tmp_path, monkeypatch):
    model = _small_model()
    with RunFolder(tmp_path) as folder:
        folder.commit(model, {**folder.progress(), "epochs": 1}, epoch=1, best=True)
        first = (tmp_path / "last.npz").read_bytes()
        model.layers[0].kernel.assign(np.ones((3, 2), "float32"))
        monkeypatch.setattr(RunFolder, "_move_into_place", lambda self, staging: None)
        folder.commit(model, {**folder.progress(), "epochs": 2}, epoch=2)  # killed: no moves
        monkeypatch.undo()
        assert (tmp_path / "last.npz").read_bytes() == first
    with RunFolder(tmp_path) as folder:  # the commit was recorded: its moves are finished
        assert folder.progress()["epochs"] == 2
        assert sorted(os.listdir(tmp_path / "state")) == ["progress.json", "training.weights.h5"]
        assert [epoch for epoch, _ in folder.checkpoints()] == [1, 2]
        load_weights(model, folder.join("last.npz"))
        np.testing.assert_array_equal(np.asarray(model.layers[0].kernel), np.ones((3, 2)))


def test_a_non_finite_loss_stops_the_run_and_keeps_the_recorded_epoch(job, tmp_path):
    names = ("last.npz", "state/training.weights.h5", "state/progress.json")
    recorded = {}

    class Explode(keras.callbacks.Callback):
        """In epoch 2 the weights blow up (as a far too high learning rate makes them)."""

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            if epoch == 1:
                recorded.update({name: (tmp_path / name).read_bytes() for name in names})

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 1:
                for variable in self.model.trainable_variables:
                    variable.assign(variable * 1e30)

    message = r"loss became (nan|inf) in epoch 2, step 3;.*keeps epoch 1"
    with RunFolder(tmp_path) as folder, pytest.raises(FloatingPointError, match=message):
        train(folder, *job, options(3), callbacks=[Explode()], log=lambda _: None)
    assert {name: (tmp_path / name).read_bytes() for name in names} == recorded
    with RunFolder(tmp_path) as folder:  # what a rerun finds
        assert folder.progress()["epochs"] == 1 and folder.checkpoints()[-1][0] == 1
    assert sorted(os.listdir(tmp_path / "state")) == ["progress.json", "training.weights.h5"]


def test_one_run_holds_a_folder_at_a_time(tmp_path):
    path = tmp_path / "run"
    first = RunFolder(path)
    with pytest.raises(ValueError, match=rf"in use by another tfblocks run \(process id "
                       rf"{os.getpid()}\), got output='{path}'"):  # fmt: skip
        RunFolder(path)
    first.close()
    RunFolder(path).close()
    # Another process holds it: refused with its process id; once it is killed, free.
    script = (
        "import sys; from tfblocks.translation.run_folder import RunFolder; "
        "run = RunFolder(sys.argv[1]); print('held', flush=True); sys.stdin.read()"
    )
    command = [sys.executable, "-c", script, str(path)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    with subprocess.Popen(command, cwd=ROOT, env=env, **pipes) as holder:
        try:
            assert holder.stdout.readline() == "held\n"
            with pytest.raises(ValueError, match=f"process id {holder.pid}"):
                RunFolder(path)
        finally:
            holder.kill()
    with RunFolder(path) as folder:  # a dead process's lock never blocks
        assert (path / "run.lock").read_text() == f"{os.getpid()}\n"
        assert folder.progress()["epochs"] == 0


def test_reopening_a_run_folder_removes_what_a_killed_writer_left(tmp_path):
    RunFolder(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no longer runs
    left = [f"state/training.weights.h5.tmp-{dead.pid}-0a1b2c3d.weights.h5",
            f"checkpoints/epoch-0002.npz.tmp-{dead.pid}-0a1b2c3d.npz",
            f"best.npz.tmp-{dead.pid}-0a1b2c3d.npz",
            "checkpoints/epoch-0001.npz",  # past the recorded epoch (none): never committed
            "state/commit-000001/last.npz", "state/commit-000001/epoch-0001.npz"]  # fmt: skip
    kept = [f"last.npz.tmp-{os.getpid()}-0a1b2c3d.npz",  # a writer still running
            f"notes.tmp-{dead.pid}-mine.txt", "checkpoints/epoch-1.npz",  # not our names
            "state/commit-000002/notes.txt"]  # fmt: skip
    for name in left + kept:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    RunFolder(tmp_path)
    assert [name for name in left + kept if (tmp_path / name).exists()] == kept
    assert not (tmp_path / "state" / "commit-000001").exists()
