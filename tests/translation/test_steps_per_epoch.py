"""`steps_per_epoch`: epochs of N steps on one endless stream of passes, the same batches
in a straight run and in a stopped and continued one, for a list and a streamed corpus."""

import keras
import numpy as np
import pytest

from tests.text.test_dataset import _streamed_files
from tests.translation.run_job import options, parts, train
from tests.translation.test_run_folder import assert_same_weights
from tfblocks.text import make_dataset
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole (tiny) jobs


@pytest.fixture(scope="module")
def job():
    return parts()


@pytest.fixture(scope="module")
def steps(job):
    """Steps per epoch such that epoch 1 starts inside pass 0 and ends in pass 1."""
    splits, tokenizer, hp = job
    batches = len(make_dataset(splits["train"], tokenizer, tokenizer, batch_tokens=256,
                               max_length=hp.max_length))  # fmt: skip
    assert batches >= 4
    return batches * 2 // 3 + 1


def quiet(_):
    pass


@pytest.mark.parametrize("corpus", ["list", "streamed"])
def test_a_stopped_and_continued_run_trains_on_the_stream_of_a_straight_run(
    job, steps, tmp_path, corpus
):
    splits, tokenizer, hp = job
    if corpus == "streamed":
        splits = {**splits, "train": _streamed_files(tmp_path, splits["train"], 2)}
    straight = RunFolder(tmp_path / "straight")
    _, report = train(straight, splits, tokenizer, hp, options(2, steps_per_epoch=steps),
                          log=quiet)  # fmt: skip
    assert report["epochs"] == 2 and report["stopped"] == "epochs"
    losses = [h["loss"] for h in report["history"]]
    assert losses[0] != losses[1]

    folder = RunFolder(tmp_path / "continued")
    if corpus == "list":  # a time-limit cut first: nothing recorded, the rerun repeats it
        cut = options(2, steps_per_epoch=steps, time_limit=1e-3)
        _, stopped = train(folder, splits, tokenizer, hp, cut, log=quiet)
        assert stopped["stopped"] == "time limit" and stopped["epochs"] == 0
    _, first = train(folder, splits, tokenizer, hp, options(1, steps_per_epoch=steps),
                         log=quiet)  # fmt: skip
    assert first["epochs"] == 1
    _, done = train(folder, splits, tokenizer, hp, options(2, steps_per_epoch=steps),
                        log=quiet)  # fmt: skip
    assert done["epochs"] == 2 and [h["epoch"] for h in done["history"]] == [1, 2]
    np.testing.assert_allclose([h["loss"] for h in done["history"]], losses, rtol=1e-6)
    assert_same_weights(folder.join("last.npz"), straight.join("last.npz"))

    # Another number of steps would cut the stream elsewhere: refused, as is a pass.
    for other in (steps + 1, None):
        with pytest.raises(ValueError, match=rf"steps_per_epoch={steps}\).*={other}"):
            train(folder, splits, tokenizer, hp, options(3, steps_per_epoch=other), log=quiet)
    assert folder.progress()["epochs"] == 2


def test_early_stopping_dev_bleu_and_averaging_per_epoch_of_steps(job, tmp_path):
    splits, tokenizer, hp = job
    frozen = hp.__class__(**{**hp.__dict__, "learning_rate_constant": 1e-12})  # BLEU can't move
    opts = options(5, steps_per_epoch=2, dev_sentences=2, early_stopping=1, average_last=2)
    folder = RunFolder(tmp_path)
    lines = []
    _, report = train(folder, splits, tokenizer, frozen, opts, log=lines.append)
    assert report["stopped"] == "early stopping" and report["epochs"] == 2
    # Epochs of N steps: the 10 updates planned are known, and said, before the first epoch.
    warning = "warning: this run ends after about 10 updates (5 epochs of 2), before its "
    said = [i for i, line in enumerate(lines) if line.startswith(warning)]
    epoch_one = [i for i, line in enumerate(lines) if line.startswith("epoch 1:")]
    assert len(said) == 1 and said[0] < epoch_one[0], lines
    assert report["updates"] == 4 and [h["updates"] for h in report["history"]] == [2, 4]
    assert all("dev_bleu" in h and "val_loss" in h for h in report["history"])
    assert report["best_epoch"] == 2 and report["averaged_epochs"] == [1, 2]
    assert [epoch for epoch, _ in folder.checkpoints()] == [1, 2]


def test_a_loss_that_is_not_finite_stops_the_run_before_its_epoch_is_recorded(job, tmp_path):
    class Explode(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == 1 and batch == 0:
                for variable in self.model.trainable_variables:
                    variable.assign(variable * 1e30)

    message = r"loss became (nan|inf) in epoch 2, step 2;.*keeps epoch 1"
    with RunFolder(tmp_path) as folder, pytest.raises(FloatingPointError, match=message):
        train(folder, *job, options(3, steps_per_epoch=3), callbacks=[Explode()], log=quiet)
    with RunFolder(tmp_path) as folder:
        assert folder.progress()["epochs"] == 1 and folder.checkpoints()[-1][0] == 1


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_a_bad_number_of_steps_is_refused(value):
    with pytest.raises(ValueError, match=rf"steps_per_epoch={value!r}"):
        options(1, steps_per_epoch=value)
