"""With dropout, a stopped and continued run ends with the weights of a straight run: the
training state keeps the dropout layers' seed generators (`state/seeds.npz`), so the
continued epochs draw the masks a straight run draws, not the first epoch's again."""

import dataclasses
import os

import keras
import numpy as np
import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.layers import HashDropout
from tfblocks.translation.run_folder import SEEDS_FILE, RunFolder

pytestmark = pytest.mark.heavy  # runs whole (tiny) jobs

DROPOUT = {"layer_prepostprocess_dropout": 0.1, "attention_dropout": 0.1, "relu_dropout": 0.1}


@pytest.fixture(scope="module")
def job():
    """The tiny run with dropout 0.1 in every place, on 64 training pairs."""
    splits, tokenizer, hp = parts()
    splits = {"train": splits["train"][:64], "dev": splits["dev"][:4]}
    return splits, tokenizer, dataclasses.replace(hp, **DROPOUT)


def quiet(_):
    pass


def npz(path):
    with np.load(path) as stored:
        return {k: stored[k] for k in stored.files}


def assert_same_run(straight, folder, losses):
    """`folder` (continued) has the losses and `last.npz` weights of `straight`."""
    history = folder.progress()["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    # Epoch 2's training loss is computed under its dropout masks: other masks, other loss.
    np.testing.assert_allclose([h["loss"] for h in history], losses, rtol=1e-6)
    a, b = npz(straight.join("last.npz")), npz(folder.join("last.npz"))
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_continued_run_with_dropout_equals_a_straight_run(job, tmp_path):
    straight = RunFolder(tmp_path / "straight")
    _, report = train(straight, *job, options(2), log=quiet)
    losses = [h["loss"] for h in report["history"]]
    folder = RunFolder(tmp_path / "continued")
    _, first = train(folder, *job, options(1), log=quiet)
    assert first["epochs"] == 1
    with np.load(folder.join(SEEDS_FILE)) as stored:  # each [seed, masks drawn]
        assert stored.files and max(int(stored[k][1]) for k in stored.files) > 0
    _, done = train(folder, *job, options(2), log=quiet)  # the same command, one more epoch
    assert done["epochs"] == 2 and done["stopped"] == "epochs"
    assert_same_run(straight, folder, losses)


def test_a_continued_run_of_steps_with_dropout_equals_a_straight_run(job, tmp_path):
    """`--steps-per-epoch` (one `fit` over the epochs left) with a moving average, as in
    the report: `--steps-per-epoch 4 --epochs 4 --ema 0.99`, stopped and rerun."""
    settings = {"steps_per_epoch": 3, "ema_decay": 0.5}
    straight = RunFolder(tmp_path / "straight")
    _, report = train(straight, *job, options(2, **settings), log=quiet)
    losses = [h["loss"] for h in report["history"]]
    folder = RunFolder(tmp_path / "continued")
    train(folder, *job, options(1, **settings), log=quiet)
    _, done = train(folder, *job, options(2, **settings), log=quiet)
    assert done["epochs"] == 2 and done["stopped"] == "epochs"
    assert_same_run(straight, folder, losses)


def _dropout_model(rates=(0.1, 0.2)):
    model = keras.Sequential(
        [keras.Input((4,)), HashDropout(rates[0]), keras.layers.Dense(3), HashDropout(rates[1])]
    )
    model.compile("adam", "mse")
    return model


def _seeds(model):
    """Each dropout layer's seed generator state, `[seed, masks drawn]`."""
    return [
        np.asarray(layer.seed_generator.state).tolist()
        for layer in model.layers
        if isinstance(layer, HashDropout) and layer.rate > 0
    ]


def test_the_training_state_keeps_the_seed_generators(tmp_path):
    trained = _dropout_model()
    for _ in range(3):  # three steps: each layer draws three masks
        trained(np.ones((2, 4), "float32"), training=True)
    saved = _seeds(trained)
    assert [count for _, count in saved] == [3, 3]
    with RunFolder(tmp_path) as folder:
        folder.commit(trained, {**folder.progress(), "epochs": 1}, epoch=1)
        state = sorted(os.listdir(tmp_path / "state"))
        assert state == ["progress.json", "seeds.npz", "training.weights.h5"]

        fresh = _dropout_model()  # what a continued run builds: no mask drawn yet
        assert [count for _, count in _seeds(fresh)] == [0, 0]
        folder.restore(fresh)
        assert _seeds(fresh) == saved

        fewer = _dropout_model(rates=(0.1, 0.0))  # one seed generator, the folder has two
        with pytest.raises(ValueError, match=r"state of 2 seed generators.*model with 1"):
            folder.restore(fewer)

        # A folder written before the seeds were kept: fresh seeds, no error.
        os.remove(tmp_path / SEEDS_FILE)
        older = _dropout_model()
        before = _seeds(older)
        folder.restore(older)
        assert _seeds(older) == before
