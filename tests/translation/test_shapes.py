"""The translation job's batch shapes (`TrainingOptions(shapes=...)`, `tfblocks-train --shapes`)."""

import dataclasses
import re

import keras
import pytest

from tests.translation.run_job import options, parts, train
from tfblocks.training import precision
from tfblocks.translation.run_folder import RunFolder

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first


@pytest.fixture(scope="module")
def job():
    return parts()


def test_packed_rows_train_and_validate(job, tmp_path):
    splits, tokenizer, hp = job
    hp = dataclasses.replace(hp, learning_rate_warmup_steps=20, learning_rate_constant=1.0)
    printed = []
    opts = options(4, shapes="packed")
    model, report = train(RunFolder(tmp_path), splits, tokenizer, hp, opts, log=printed.append)
    # What packing made of the train split: rows, batches of batch_tokens // max_length rows.
    (line,) = [line for line in printed if line.startswith("packed rows:")]
    found = re.fullmatch(
        r"packed rows: ([\d,]+) rows of (\d+) positions, ([\d,]+) batches an epoch; padding: "
        r"(\d+\.\d)% of the target positions, (\d+\.\d)% of the source positions",
        line,
    )
    assert found, line
    rows, length, batches = (int(found[i].replace(",", "")) for i in (1, 2, 3))
    assert length == hp.max_length and batches == -(-rows // (opts.batch_tokens // length))
    assert 0 <= float(found[4]) < 100 and 0 <= float(found[5]) < 100
    losses = [epoch["loss"] for epoch in report["history"]]
    assert len(losses) == 4 and losses[-1] < 0.8 * losses[0], losses
    assert all(epoch["val_loss"] > 0 for epoch in report["history"])  # dev rows packed too
    # The returned model translates one sentence a row, as after any other run.
    assert model.compute_dtype == "float32"


class _Execution(keras.callbacks.Callback):
    """Records, at each training batch, the model's compute dtype and XLA choice."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def on_train_batch_end(self, batch, logs=None):
        self.seen.add((self.model.compute_dtype, bool(self.model.jit_compile)))


def test_packed_rows_train_in_bfloat16_without_xla_on_a_bf16_cpu(job, monkeypatch, tmp_path):
    """`dtype_policy="auto"` on a CPU with bfloat16 instructions (pretended): packed rows
    train under `mixed_bfloat16` and the step is not compiled with XLA."""
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    lines, execution = [], _Execution()
    opts = options(1, shapes="packed")
    _, report = train(RunFolder(tmp_path), *job, opts, log=lines.append, callbacks=[execution])
    assert report["dtype_policy"] == "mixed_bfloat16"
    assert execution.seen == {("bfloat16", False)}
    assert any("mixed_bfloat16 without XLA" in line for line in lines), lines


def test_unknown_shapes_are_named():
    with pytest.raises(ValueError, match="shapes='fixed'"):
        options(1, shapes="fixed")
