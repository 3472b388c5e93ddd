"""tfblocks.training.lora: which kernels get adapters, what trains, and the merged weights."""

import numpy as np
import pytest

from tests.fixtures import FIRST_ID, tiny_hparams, tiny_model
from tfblocks.training import compile_transformer
from tfblocks.training.lora import enable_lora, lora_targets
from tfblocks.training.weights import merged_weights

SMALL = {"hidden_size": 16, "filter_size": 24, "num_heads": 2}


def test_only_the_adapters_of_the_projections_train():
    hp = tiny_hparams(20, **SMALL)
    model = tiny_model(hp, seed=0)
    before = {v.path: np.asarray(v).copy() for v in model.weights}
    adapted = enable_lora(model, rank=3)
    # One encoder layer (self-attention), one decoder layer (self- and cross-attention).
    assert len(adapted) == 3 * 4
    assert {d.name for d in adapted} == {"query_dense", "key_dense", "value_dense", "output_dense"}
    trainable = {v.path for v in model.trainable_weights}
    assert trainable == {v.path for d in adapted for v in (d.lora_kernel_a, d.lora_kernel_b)}
    assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == 12 * (16 * 3 + 3 * 16)
    compile_transformer(model, hp, jit_compile=False, learning_rate=1e-2)
    ids = np.random.default_rng(0).integers(FIRST_ID, 20, (8, 6)).astype("int32")
    model.fit({"inputs": ids, "targets": ids}, ids, batch_size=4, epochs=1, verbose=0)
    for variable in model.weights:
        if variable.path in before:  # frozen: the plain model's variables
            np.testing.assert_array_equal(np.asarray(variable), before[variable.path])
    assert any(np.abs(np.asarray(d.lora_kernel_b)).max() > 0 for d in adapted)  # trained
    ffn = lora_targets(tiny_model(hp), ffn=True)
    assert len(ffn) == 12 + 2 * 2  # and each feed-forward network's two Dense layers


def test_merged_weights_are_the_plain_model_computing_the_same():
    hp = tiny_hparams(20, **SMALL)
    model = tiny_model(hp, seed=0)
    adapted = enable_lora(model, rank=2, ffn=True)
    rng = np.random.default_rng(1)
    for dense in adapted:  # adapters as after training (B starts at zero)
        dense.lora_kernel_b.assign(rng.normal(size=dense.lora_kernel_b.shape).astype("float32"))
    merged = merged_weights(model)
    for dense in adapted:
        a, b = np.asarray(dense.lora_kernel_a), np.asarray(dense.lora_kernel_b)
        want = np.asarray(dense._kernel) + (dense.lora_alpha / dense.lora_rank) * a @ b
        np.testing.assert_allclose(merged[dense._kernel.path], want, rtol=1e-6)
    plain = tiny_model(hp)
    assert sorted(merged) == sorted(v.path for v in plain.weights)
    for variable in plain.weights:
        variable.assign(merged[variable.path])
    ids = rng.integers(FIRST_ID, 20, (2, 5)).astype("int32")
    x = {"inputs": ids, "targets": ids}
    np.testing.assert_allclose(plain(x), model(x), atol=1e-5)


@pytest.mark.parametrize("rank", [0, 2.0, True])
def test_bad_rank_is_refused(rank):
    with pytest.raises(ValueError, match=f"`rank`.*rank={rank!r}"):
        enable_lora(tiny_model(tiny_hparams(20, **SMALL)), rank)
