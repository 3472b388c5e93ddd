"""Moving-average weights in the translation job, on the tiny run.

With `ema_decay` the run's weights (checkpoints, `last.npz`, the final model) are the
moving average, which the training state keeps and a continued run continues. (LoRA
fine-tuning, `--lora-rank`, is tested with the commands, in test_commands.py, from the run
trained there; on an imported model in tests/cli/test_import.py.)
"""

import numpy as np
import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.models import build_transformer
from tfblocks.training import averaged_weights, compile_transformer
from tfblocks.translation.options import TrainingOptions
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole jobs


def npz(path):
    with np.load(path) as stored:
        return {k: stored[k] for k in stored.files}


def test_the_final_weights_are_the_moving_average_and_a_rerun_continues_it(tmp_path):
    job = parts()
    hp = job[2]
    quiet = {"log": lambda _: None}
    straight = RunFolder(tmp_path / "straight")
    model, report = train(straight, *job, options(2, ema_decay=0.5), **quiet)
    assert report["final_weights"] == "last (epoch 2)"
    continued = RunFolder(tmp_path / "continued")
    train(continued, *job, options(1, ema_decay=0.5), **quiet)
    train(continued, *job, options(2, ema_decay=0.5), **quiet)  # the rerun continues
    a, b = npz(straight.join("last.npz")), npz(continued.join("last.npz"))
    for path in a:
        np.testing.assert_allclose(a[path], b[path], rtol=1e-5, atol=1e-6, err_msg=path)

    # The training state holds the trained weights and their average; the returned model
    # (what model/ and the export get) holds the average.
    trained = build_transformer(hp)
    compile_transformer(trained, hp, jit_compile=False, ema_decay=0.5)
    straight.restore(trained)
    average = averaged_weights(trained)
    raw = {v.path: np.asarray(v) for v in trained.weights}
    for variable in model.weights:
        np.testing.assert_array_equal(np.asarray(variable), average[variable.path])
    assert not np.allclose(raw["encoder_norm/gamma"], average["encoder_norm/gamma"])
    with pytest.raises(ValueError, match=r"`ema_decay`.*ema_decay=1\.0"):
        TrainingOptions(epochs=1, ema_decay=1.0)
