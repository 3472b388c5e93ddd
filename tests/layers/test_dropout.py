"""Tests for tfblocks.layers.HashDropout and its counter-hash bits.

The layer's mask is `hash_bits`: under XLA inline, elsewhere through a small compiled
function, so both paths give the same mask for one seed. The bits themselves
(`hash_bits`) are the same with and without XLA.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.counting import Calls
from tests.layers.harness import run_layer_test
from tfblocks import TransformerBlock
from tfblocks._xla import compiled_if_large, flat_size, in_xla_context
from tfblocks.layers import HashDropout, dropout
from tfblocks.layers.dropout import hash_bits, position_bits

PATHS = {"compiled call": 0, "op by op": 10**12}  # COMPILE_MIN_ELEMENTS for each path


@pytest.fixture
def compiled_calls(monkeypatch):
    """Counts the calls of the compiled dropout function that ran (`.count`)."""
    return Calls(monkeypatch, dropout, "_compiled_hash_dropout")


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _mask(layer, shape):
    return _np(layer(np.ones(shape, "float32"), training=True)) != 0


def _xla(layer):
    return tf.function(lambda x: layer(x, training=True), jit_compile=True)


def _u32(values):
    return tf.constant(np.array(values, dtype=np.uint64).astype(np.uint32))


def test_layer_harness(tmp_path):
    run_layer_test(
        HashDropout,
        {"rate": 0.25, "seed": 7},
        np.ones((2, 5, 8), "float32"),
        expected_output_shape=(2, 5, 8),
        tmp_path=tmp_path,
        run_training=False,  # no weights to move
    )


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_drop_fraction_and_inverted_scaling(rate):
    x = np.random.default_rng(0).normal(size=(64, 128, 128)).astype("float32")  # 1M
    y = _np(HashDropout(rate, seed=1)(x, training=True))
    kept = y != 0
    n = kept.size
    # The kept fraction is within 5 standard deviations of 1 − rate.
    assert abs(kept.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6)


def test_identity_at_inference_and_rate_zero():
    x = np.random.default_rng(1).normal(size=(3, 4)).astype("float32")
    np.testing.assert_array_equal(_np(HashDropout(0.5)(x)), x)
    np.testing.assert_array_equal(_np(HashDropout(0.5)(x, training=False)), x)
    np.testing.assert_array_equal(_np(HashDropout(0.0)(x, training=True)), x)


def test_new_mask_every_call_and_reproducible_with_a_seed():
    a, b = HashDropout(0.5, seed=3), HashDropout(0.5, seed=3)
    masks_a = [_mask(a, (256, 256)) for _ in range(3)]
    masks_b = [_mask(b, (256, 256)) for _ in range(3)]
    for ma, mb in zip(masks_a, masks_b, strict=True):
        np.testing.assert_array_equal(ma, mb)
    # Consecutive calls agree on about half the elements (independent masks), not all.
    agree = (masks_a[0] == masks_a[1]).mean()
    assert 0.49 < agree < 0.51, agree
    other = _mask(HashDropout(0.5, seed=4), (256, 256))
    assert 0.49 < (other == masks_a[0]).mean() < 0.51


def test_bits_uniform_and_neighbours_uncorrelated():
    bits = _np(hash_bits((512, 2048), tf.constant([11, 0], tf.int64)))  # 1M values
    assert bits.min() >= 0 and bits.max() < 2**24
    # Top 8 bits: chi-square over 256 equally likely bins (df 255; p = 1e-6 at ≈ 360).
    counts = np.bincount((bits >> 16).ravel(), minlength=256)
    expected = bits.size / 256
    assert ((counts - expected) ** 2 / expected).sum() < 360
    # Lowest bits too (a weak hash shows patterns there first).
    low = np.bincount((bits & 255).ravel(), minlength=256)
    assert ((low - expected) ** 2 / expected).sum() < 360
    u = bits.astype(np.float64) / 2**24 - 0.5
    for name, (p, q) in {
        "next element": (u[:, :-1], u[:, 1:]),
        "next row": (u[:-1], u[1:]),
        "1024 apart": (u[:, :-1024], u[:, 1024:]),
    }.items():
        r = np.corrcoef(p.ravel(), q.ravel())[0, 1]
        assert abs(r) < 0.01, (name, r)  # 1/sqrt(1M) = 0.001


def test_consecutive_seeds_give_uncorrelated_bits():
    # Keras' SeedGenerator increments the second seed word by one per call.
    u = [
        _np(hash_bits((1 << 20,), tf.constant([5, s], tf.int64))).astype(np.float64) for s in (0, 1)
    ]
    assert abs(np.corrcoef(u[0], u[1])[0, 1]) < 0.01


def test_same_bits_with_and_without_xla():
    seed = tf.constant([123, 456], tf.int64)
    eager = _np(hash_bits((3, 7, 5), seed))
    xla = _np(tf.function(lambda s: hash_bits((3, 7, 5), s), jit_compile=True)(seed))
    np.testing.assert_array_equal(eager, xla)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("spec", [(None, 16), None], ids=["unknown batch", "unknown rank"])
def test_dynamic_batch_in_a_graph(spec, path, monkeypatch, compiled_calls):
    monkeypatch.setattr(dropout, "COMPILE_MIN_ELEMENTS", PATHS[path])
    layer = HashDropout(0.5, seed=2)

    @tf.function(input_signature=[tf.TensorSpec(spec, tf.float32)])
    def run(x):
        return layer(x, training=True)

    y = _np(run(tf.ones((9, 16))))
    assert y.shape == (9, 16)
    assert set(np.unique(y)) == {0.0, 2.0}
    assert compiled_calls.count == (path == "compiled call")


@pytest.mark.parametrize("path", PATHS)
def test_gradient_is_the_scaled_mask(path, monkeypatch, compiled_calls):
    monkeypatch.setattr(dropout, "COMPILE_MIN_ELEMENTS", PATHS[path])
    layer = HashDropout(0.3, seed=5)
    x = tf.Variable(np.random.default_rng(2).normal(size=(8, 32)).astype("float32"))
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(y)
    grad = _np(tape.gradient(loss, x))
    kept = _np(y) != 0
    np.testing.assert_allclose(grad, np.where(kept, 1 / 0.7, 0.0), rtol=1e-6)
    assert compiled_calls.count == (2 if path == "compiled call" else 0)  # and backward


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_inputs(dtype, path, monkeypatch, compiled_calls):
    monkeypatch.setattr(dropout, "COMPILE_MIN_ELEMENTS", PATHS[path])
    layer = HashDropout(0.5, seed=1, dtype=f"mixed_{dtype}")
    x = keras.ops.cast(np.full((64, 64), 1.5, "float32"), dtype)
    y = layer(x, training=True)
    assert keras.backend.standardize_dtype(y.dtype) == dtype
    values = set(np.unique(_np(keras.ops.cast(y, "float32"))))
    assert values == {0.0, 3.0}
    assert compiled_calls.count == (path == "compiled call")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rate": 1.0}, "rate=1.0"),
        ({"rate": -0.1}, "rate=-0.1"),
        ({"rate": "0.1"}, "rate='0.1'"),
        ({"rate": 0.1, "seed": "x"}, "seed.*'x'"),
        ({"rate": 0.1, "seed": 1.5}, "seed.*1.5"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HashDropout(**kwargs)


def test_transformer_block_dropout_uses_hash_bits():
    block = TransformerBlock(num_heads=2, filter_size=16, dropout=0.5, relu_dropout=0.5)
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    block(x)
    dropouts = [
        block.residual_dropout,
        block.ffn.dropout_layer,
        block.self_attention.dropout_layer,
    ]
    assert all(isinstance(d, HashDropout) for d in dropouts)
    assert [d.rate for d in dropouts] == [0.5, 0.5, 0.0]
    a, b = _np(block(x, training=True)), _np(block(x, training=True))
    assert not np.allclose(a, b)  # a fresh mask per call
    np.testing.assert_array_equal(_np(block(x)), _np(block(x)))  # inference: none


# --- Which path: hash bits under XLA, a compiled call of the same hash elsewhere ---


def test_in_xla_context_only_inside_compiled_functions():
    seen = {}

    def probe(name):
        seen[name] = in_xla_context()
        return tf.constant(0)

    probe("eager")
    tf.function(lambda: probe("graph"))()
    tf.function(lambda: probe("xla"), jit_compile=True)()
    tf.function(lambda: tf.function(lambda: probe("nested"))(), jit_compile=True)()
    assert seen == {"eager": False, "graph": False, "xla": True, "nested": True}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_without_xla_the_mask_is_the_hash_too(compiled, path, monkeypatch, compiled_calls):
    """Outside XLA the layer calls its compiled dropout (large tensors) or the same hash
    op by op (small ones): the same mask as under XLA for the same seed, and its gradient
    is that mask scaled (dropout applied to the gradient)."""
    monkeypatch.setattr(dropout, "COMPILE_MIN_ELEMENTS", PATHS[path])
    x = tf.constant(np.random.default_rng(4).normal(size=(16, 40)).astype("float32"))
    plain, xla = HashDropout(0.3, seed=9), HashDropout(0.3, seed=9)
    run = (lambda f: tf.function(f)) if compiled else (lambda f: f)

    def forward_and_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = plain(v, training=True)
            loss = tf.reduce_sum(y * v)  # d/dv = mask·scale·v + y
        return y, tape.gradient(loss, v)

    for call in range(2):  # the seed generator's state is [seed, call]
        y, grad = (_np(t) for t in run(forward_and_gradient)(x))
        expected = _np(_xla(xla)(x))
        np.testing.assert_array_equal(y, expected)
        keep = _np(hash_bits(x.shape, tf.constant([9, call], tf.int64))) >= round(0.3 * 2**24)
        np.testing.assert_array_equal(y != 0, keep & (_np(x) != 0))
        np.testing.assert_allclose(grad, np.where(keep, 2 * _np(x) / 0.7, 0.0), rtol=1e-6)
    # Two calls, each forward and backward, through the compiled function or never.
    assert compiled_calls.count == (4 if path == "compiled call" else 0)


def test_compiled_if_large_chooses_by_size_static_or_at_run_time():
    pick = lambda shape: compiled_if_large(  # noqa: E731
        shape, 100, lambda: tf.constant("compiled"), lambda: tf.constant("plain")
    )
    assert _np(pick((10, 10))) == b"compiled" and _np(pick((9, 11))) == b"plain"
    relaxed = tf.function(lambda x: pick(tf.shape(x)), input_signature=[tf.TensorSpec(None)])
    assert _np(relaxed(tf.zeros((4, 25)))) == b"compiled"
    assert _np(relaxed(tf.zeros((4, 24)))) == b"plain"


def test_relaxed_shapes_small_and_large_give_the_hash_mask(monkeypatch, compiled_calls):
    """A step traced once for any batch (Keras' relaxed shapes) picks the path per call at
    run time, and both paths give the hash mask."""
    monkeypatch.setattr(dropout, "COMPILE_MIN_ELEMENTS", 700)
    layer = HashDropout(0.3, seed=5)
    step = tf.function(
        lambda v: layer(v, training=True), input_signature=[tf.TensorSpec([None, 40])]
    )
    for rows, call in ((16, 0), (32, 1)):  # 640 elements op by op, 1,280 compiled
        x = np.random.default_rng(rows).normal(size=(rows, 40)).astype("float32") + 5.0
        keep = _np(hash_bits((rows, 40), tf.constant([5, call], tf.int64))) >= round(0.3 * 2**24)
        np.testing.assert_allclose(_np(step(x)), np.where(keep, x / 0.7, 0.0), rtol=1e-6)
        assert compiled_calls.count == (rows == 32)  # only the large batch compiled
    assert step.experimental_get_tracing_count() == 1


def test_under_xla_the_mask_is_the_hash():
    layer = HashDropout(0.25, seed=6)
    run = _xla(layer)
    shape = (8, 5, 33)
    for call in range(2):  # the seed generator's state is [seed, call]
        y = _np(run(tf.ones(shape)))
        bits = _np(hash_bits(shape, tf.constant([6, call], tf.int64)))
        np.testing.assert_array_equal(y != 0, bits >= round(0.25 * 2**24))
        assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}


# --- Sizes of 2^31 elements and more, without allocating them -----------------------


def test_flat_size_is_exact_beyond_int32():
    assert flat_size((64, 8, 2048, 2048)) == 2**31  # attention weights of an ordinary GPU
    assert flat_size((3, 2**40, 1000)) == 3 * 2**40 * 1000
    # Dynamic dims arrive as int32 scalars from `ops.shape`: the product is int64.
    dims = [tf.constant(64), 8, tf.constant(2048), tf.constant(2048)]
    size = flat_size(dims)
    assert size.dtype == tf.int64 and int(size) == 2**31
    assert int(flat_size([tf.constant(2**20)] * 3)) == 2**60
    assert int(flat_size(tf.constant([64, 8, 2048, 2048]))) == 2**31  # a tf.shape tensor


@pytest.mark.parametrize("jit_compile", [False, True])
def test_hash_bits_traces_for_shapes_of_2_31_elements_and_more(jit_compile):
    """Building the graph (no allocation) works where int32 positions used to fail."""
    for shape in [(64, 8, 2048, 2048), (2**33,), (None, 8, 2048, 2048)]:
        fn = tf.function(
            lambda x: hash_bits(tf.shape(x), tf.constant([1, 2])), jit_compile=jit_compile
        )
        graph_def = fn.get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph.as_graph_def()
        # The Range may sit in the graph or in a function it calls (its library).
        nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
        ranges = [n for n in nodes if n.op == "Range"]
        assert [n.attr["Tidx"].type for n in ranges] == [tf.int64.as_datatype_enum], shape


def test_bits_below_2_32_are_those_of_the_int32_version():
    # hash_bits((4, 5), [3, 4]) of the version that counted positions in int32.
    bits = _np(hash_bits((4, 5), tf.constant([3, 4], tf.int64))).ravel()
    assert bits[:6].tolist() == [12483775, 15974395, 5590871, 7602224, 6682749, 14980475]
    assert bits[-3:].tolist() == [5457666, 12260982, 8999840]
    dynamic = tf.function(
        lambda x: hash_bits(tf.shape(x), tf.constant([3, 4])),
        input_signature=[tf.TensorSpec((None, 5))],
    )
    np.testing.assert_array_equal(_np(dynamic(tf.zeros((4, 5)))).ravel(), bits)


def test_positions_beyond_2_32_get_their_own_bits():
    seed = tf.constant([11, 0], tf.int64)
    positions = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**40, 2**62 + 5]
    index = np.array(positions, dtype=np.uint64)
    bits = _np(position_bits(_u32(index & 0xFFFFFFFF), _u32(index >> 32), seed))
    assert len(set(bits.tolist())) == len(positions)
    # A high word of 0 is the same as none.
    assert bits[1] == _np(position_bits(_u32([2**31]), None, seed))[0]
    # A block of 1M positions 2^32 apart from another (same low words): uncorrelated,
    # uniform bits, not a copy.
    lo = _u32(np.arange(1 << 20))
    u = [
        _np(position_bits(lo, _u32(np.full(1 << 20, hi)), seed)).astype(np.float64)
        for hi in (0, 1, 2**30)
    ]
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        assert abs(np.corrcoef(u[a], u[b])[0, 1]) < 0.01
    counts = np.bincount((u[1].astype(np.int64) >> 16), minlength=256)
    expected = u[1].size / 256
    assert ((counts - expected) ** 2 / expected).sum() < 360  # chi-square, df 255


def test_the_hash_is_traced_once_for_every_shape_and_context():
    # The op-by-op hash is one traced function of (size, seed), called by every dropout
    # graph — with and without XLA — instead of tracing its ops at each call site.
    hash_bits((2, 3), tf.constant([1, 2]))  # traced by the first call in this process
    traced = dropout._traced_flat_bits.experimental_get_tracing_count()
    assert traced == 1
    layer = HashDropout(0.5, seed=3)
    for jit_compile in (False, True):
        step = tf.function(lambda x: layer(x, training=True), jit_compile=jit_compile)
        for shape in [(3, 5), (4, 7, 2)]:
            graph = step.get_concrete_function(tf.TensorSpec(shape, tf.float32)).graph
            names = {f.signature.name for f in graph.as_graph_def().library.function}
            assert any("_flat_bits" in n for n in names), (jit_compile, shape, names)
            assert "Range" not in {op.type for op in graph.get_operations()}
    assert dropout._traced_flat_bits.experimental_get_tracing_count() == traced
