"""The translation job's batch shapes (`TrainingOptions(shapes=...)`, `tfblocks-train --shapes`)."""

import dataclasses

import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


def test_packed_rows_train_and_validate(tmp_path):
    splits, tokenizer, hp = parts()
    hp = dataclasses.replace(hp, learning_rate_warmup_steps=20, learning_rate_constant=1.0)
    model, report = train(
        RunFolder(tmp_path), splits, tokenizer, hp, options(4, shapes="packed"), log=print
    )
    losses = [epoch["loss"] for epoch in report["history"]]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses
    assert all(epoch["val_loss"] > 0 for epoch in report["history"])  # dev rows packed too
    # The returned model translates one sentence a row, as after any other run.
    assert model.compute_dtype == "float32"


def test_unknown_shapes_are_named():
    with pytest.raises(ValueError, match="shapes='fixed'"):
        options(1, shapes="fixed")
