"""Moving-average weights and LoRA fine-tuning in the translation job, on the tiny run.

With `ema_decay` the run's weights (checkpoints, `last.npz`, the final model) are the
moving average, which the training state keeps and a continued run continues. With
`--lora-rank` only the adapters train, and the preset and the export hold the merged
kernels in the plain model's layout.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from tests.translation.run_job import options, parts, train
from tests.translation.test_train_command import FAST
from tfblocks.models import build_transformer, load_preset
from tfblocks.training import averaged_weights, compile_transformer
from tfblocks.translation import train_command
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


def test_lora_fine_tuning_trains_the_adapters_and_exports_merged_kernels(tmp_path, capsys):
    base = tmp_path / "base"
    train_command.main([*FAST, "--output", str(base)])
    run = tmp_path / "lora"
    capsys.readouterr()
    metrics = train_command.main(
        [*FAST, "--init-from", str(base), "--lora-rank", "2", "--output", str(run)]
    )
    printed = capsys.readouterr().out
    # Width 32, one encoder and one decoder layer: 3 attention layers of 4 projections.
    adapters = 12 * (32 * 2 + 2 * 32)
    assert re.search(
        rf"LoRA rank 2 on 12 projections: {adapters:,} trainable parameters of ", printed
    )
    assert metrics["trainable_parameters"] == adapters < metrics["parameters"]

    # Before merging, training changed only the adapters.
    initial, state = npz(run / "init.npz"), npz(run / "state" / "variables.npz")
    for path, value in initial.items():
        np.testing.assert_array_equal(state[path], value, err_msg=path)
    a_paths = sorted(p for p in state if p.endswith("/lora_kernel_a"))
    assert len(a_paths) == 12 and len(state) == len(initial) + 24

    # The final model: W + (alpha / rank) · A · B (alpha = rank) in the plain layout.
    model, _, _ = load_preset(str(run / "model"))
    final = {v.path: np.asarray(v) for v in model.weights}
    assert sorted(final) == sorted(initial)
    changed = 0
    for a_path in a_paths:
        layer = a_path.removesuffix("lora_kernel_a")
        want = initial[layer + "kernel"] + state[a_path] @ state[layer + "lora_kernel_b"]
        np.testing.assert_allclose(final[layer + "kernel"], want, rtol=1e-5, atol=1e-6)
        changed += not np.allclose(want, initial[layer + "kernel"])
    assert changed == len(a_paths)  # every adapter trained
    # The export serves the plain model: the base run's variables, no adapters.
    served = {folder: _served_variables(folder) for folder in (base, run)}
    assert not [name for name in served[run] if "lora" in name]
    shapes = {folder: sorted(s for n, s in v.items() if n.startswith("_signature_variables/"))
              for folder, v in served.items()}  # fmt: skip
    assert shapes[run] == shapes[base] and len(shapes[run]) > len(initial)  # + seed states


def _served_variables(run):
    """`{name: shape}` of the variables in a run's SavedModel."""
    path = str(run / "export" / "1" / "variables" / "variables")
    return {name: tuple(shape) for name, shape in tf.train.list_variables(path)}
