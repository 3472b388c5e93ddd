"""Word alignments (`tfblocks.decoding.alignment`): Pharaoh strings from cross-attention,
through `Translator.align`, its SavedModel signature, `tfblocks-translate --alignments`
and CTranslate2."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tests.layers import reference
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import Greedy, alignment
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import engines, saved_engine

MAX_LENGTH = 32  # no sentence here is cut
PHARAOH = re.compile(r"^(\d+-\d+( \d+-\d+)*)?$")
SOURCES = ["Kenta reads a book at school.", "Today's lunch is curry.", "", "I"]
TARGETS = ["Today's lunch is curry.", "Kenta reads a book at school.", "a b", ""]


@pytest.fixture(scope="module")
def parts():
    """An untrained two-decoder-layer model (so the default layer, the penultimate, is
    not the last) and a tokenizer that splits English words into several subwords."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=200)
    keras.utils.set_random_seed(1)
    hp = tfblocks.hparams(
        "transformer_tiny",
        vocab_size=tokenizer.vocabulary_size,
        hidden_size=32,
        filter_size=64,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=2,
        max_length=MAX_LENGTH,
    )
    model = tfblocks.build_transformer(hp)
    # The simplest search to trace (one loop, no XLA): the alignments do not depend on it.
    translator = tfblocks.Translator(
        model, tokenizer, tokenizer, MAX_LENGTH, search=Greedy(), jit_compile=False,
        cache_lengths=None, drop_finished=False,
    )  # fmt: skip
    return model, tokenizer, hp, translator


def test_pharaoh_merges_subwords_into_sorted_unique_word_pairs():
    # ids 4, 6 and 8 start words ("▁..."), 5 and 7 continue one; 0 = PAD, 1 = EOS.
    starts = np.array([False, False, False, False, True, False, True, False, True])
    source = [[4, 5, 6, 8, 1], [4, 1, 0, 0, 0], [1, 0, 0, 0, 0]]  # words: 0 0 1 2 | 0 | -
    target = [[6, 7, 4, 8, 1], [5, 4, 1, 0, 0], [4, 1, 0, 0, 0]]  # words: 0 0 1 2 | 0 1 | 0
    attention = np.zeros([3, 5, 5], np.float32)
    attention[0, :, 4] = 0.9  # EOS holds the most weight everywhere: never chosen
    attention[0, 0, 3] = attention[0, 1, 1] = 0.5  # target word 0 ← source words 2 and 0
    attention[0, 2, 2] = attention[0, 3, 0] = 0.5  # target word 1 ← 1, word 2 ← 0
    attention[0, 4, 0] = 0.8  # the target's EOS: not aligned
    attention[1, :, 1] = 1.0  # only the source's EOS has weight: its one word is chosen
    attention[2] = 1.0  # an empty source (EOS alone) aligns nothing
    links = alignment.pharaoh(attention, source, target, starts, starts).numpy()
    assert [row.decode() for row in links] == ["0-0 0-2 1-1 2-0", "0-0 0-1", ""]
    # A first subword without the mark still starts word 0.
    links = alignment.pharaoh(attention[1:2], [[5, 1, 0, 0, 0]], [[5, 4, 1, 0, 0]], starts, starts)
    assert links.numpy()[0] == b"0-0 0-1"


def test_alignment_layer_default_and_bad_values():
    assert [alignment.alignment_layer(None, n) for n in (1, 2, 6)] == [0, 0, 4]
    assert alignment.alignment_layer(-1, 6) == 5 and alignment.alignment_layer(0, 6) == 0
    for bad in (6, -7, 1.0, True, "1"):
        with pytest.raises(ValueError, match=r"`alignment_layer` must be an int in \[-6, 6\)"):
            alignment.alignment_layer(bad, 6)


def _numpy_cross_attention(model, source_ids, target_ids):
    """Decoder layer 0's cross-attention weights [T, S], mean over heads, in NumPy (Pre-LN):
    its self-attention sublayer on the embedded shifted target, LayerNorm, then
    softmax(q kᵀ / √d) against the encoder output."""
    memory = np.asarray(model.encode(source_ids), np.float64)  # [1, S, d]
    decoder_in = np.asarray(tfblocks.models.shift_right(target_ids))
    x = np.asarray(model.target_embedding(decoder_in), np.float64)  # [1, T, d]
    block = model.decoder_blocks[0]

    def kernels(layer):
        names = ("query_dense", "key_dense", "value_dense", "output_dense")
        return [np.asarray(getattr(layer, n).kernel, np.float64) for n in names]

    def norm(layer, h):
        return reference.layer_norm(h, np.asarray(layer.gamma), np.asarray(layer.beta))

    h = norm(block.self_attention_norm, x)
    causal = np.tril(np.ones([x.shape[1]] * 2, bool))[None]
    out, _ = reference.attention(h, h, *kernels(block.self_attention), 2, mask=causal)
    x = x + out
    h = norm(block.cross_attention_norm, x)
    source_mask = (np.asarray(source_ids) != 0)[:, None, :]
    _, weights = reference.attention(
        h, memory, *kernels(block.cross_attention), 2, mask=source_mask
    )  # [1, H, T, S]
    return weights.mean(axis=1)[0]


def test_alignment_is_the_argmax_of_the_numpy_attention(parts):
    model, tokenizer, _, translator = parts
    assert model.decoder_blocks[0].norm_first and translator.alignment_layer == 0
    source_ids = tokenizer.tokenize([SOURCES[0]]).to_tensor().numpy()
    target_ids = tokenizer.tokenize([TARGETS[0]]).to_tensor().numpy()
    want = _numpy_cross_attention(model, source_ids, target_ids)
    got = alignment.cross_attention(model, source_ids, target_ids, 0).numpy()[0]
    np.testing.assert_allclose(got, want, atol=1e-5)
    # The chosen source subwords are NumPy's argmax (EOS excluded), none a near tie.
    real = want[:-1, :-1]  # targets and sources without EOS
    top = np.sort(real, axis=1)
    assert np.all(top[:, -1] - top[:, -2] > 1e-4)
    starts = alignment.tokenizer_word_starts(tokenizer, model.vocab_size)
    words = lambda ids: np.cumsum(starts[ids] | (np.arange(len(ids)) == 0)) - 1  # noqa: E731
    source_words, target_words = words(source_ids[0][:-1]), words(target_ids[0][:-1])
    pairs = sorted({(source_words[s], target_words[t]) for t, s in enumerate(real.argmax(1))})
    expected = " ".join(f"{i}-{j}" for i, j in pairs)
    assert translator.align(SOURCES[:1], TARGETS[:1]) == [expected]
    # Words are whitespace words: every target word is aligned, no index beyond the text.
    assert {j for _, j in pairs} == set(range(len(TARGETS[0].split())))
    assert max(i for i, _ in pairs) < len(SOURCES[0].split())


def test_alignment_does_not_depend_on_batch_mates(parts):
    translator = parts[3]
    together = translator.align(SOURCES, TARGETS)
    alone = [translator.align([s], [t])[0] for s, t in zip(SOURCES, TARGETS, strict=True)]
    assert together == alone
    assert all(PHARAOH.match(row) for row in together), together
    assert together[2:] == ["", ""]  # a blank source or target aligns nothing
    assert translator.align([], []) == []
    with pytest.raises(ValueError, match="2 sources and 1 targets"):
        translator.align(SOURCES[:2], TARGETS[:1])


def test_saved_model_align_signature(parts, tmp_path):
    # The `align` signature alone, in a module that holds the model's variables (`export`
    # saves it with the other signatures: test_savedmodel.py), reloaded and called
    # without the Python objects.
    translator = parts[3]
    assert "align" not in translator._signatures()  # by default: costs export time
    model, tokenizer = parts[:2]
    aligning = tfblocks.Translator(model, tokenizer, tokenizer, alignments=True)
    signature = aligning._signatures()["align"]
    module = tf.Module()
    module.variables_ = [v.value for v in translator.model.variables]
    path = str(tmp_path / "align")
    tf.saved_model.save(module, path, signatures={"align": signature})
    align = tf.saved_model.load(path).signatures["align"]
    out = align(source=tf.constant(SOURCES), target=tf.constant(TARGETS))["alignment"]
    assert [row.decode() for row in out.numpy()] == translator.align(SOURCES, TARGETS)


def test_translate_command_alignments(parts, tmp_path, monkeypatch, capsys):
    # A run folder whose Translator is this one (not built and compiled again here), then
    # a SavedModel whose signatures are this Translator's functions (the SavedModel's own
    # `align` signature: test_saved_model_align_signature).
    translator = parts[3]
    run = str(tmp_path / "run")
    signatures = {"serving_default": translator.serve, "align": translator.serve_align}
    monkeypatch.setattr(engines, "_preset_translator", lambda *a, **k: (translator, MAX_LENGTH))
    found = lambda saved, path, outputs, *a: [signatures[n] for n in outputs]  # noqa: E731
    monkeypatch.setattr(saved_engine, "signatures", found)
    source = tmp_path / "source.txt"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    want = None
    for kind in ("preset", "saved"):
        monkeypatch.setattr(engines, "_find", lambda *a, kind=kind: (kind, run))
        translate_cli.main(["--model", run, "--input", str(source), "--alignments",
                            "--batch-size", "2"])  # fmt: skip
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == len(SOURCES)
        rows = [line.split(" ||| ") for line in lines]
        assert all(len(row) == 2 and PHARAOH.match(row[1]) for row in rows), lines
        translations = [row[0] for row in rows]
        assert translations == [t.decode() for t in translator(SOURCES).numpy()]
        want = want or [row[1] for row in rows]
        assert want == translator.align(SOURCES, translations) == [row[1] for row in rows]
    for flags in (("--n-best", "1"), ("--score", str(source))):
        with pytest.raises(SystemExit):
            translate_cli.parse_args(["--model", run, "--alignments", *flags])
        assert "--alignments" in capsys.readouterr().err


def test_ctranslate2_alignments_equal_the_translators(parts, tmp_path):
    pytest.importorskip("ctranslate2")
    from tfblocks.serving.ctranslate2 import CTranslate2Translator
    from tfblocks.serving.ctranslate2_export import export_ctranslate2

    model, tokenizer, _, translator = parts
    path = export_ctranslate2(model, tokenizer, tmp_path / "ct2")
    ct2 = CTranslate2Translator(path, beam_size=1, max_length=MAX_LENGTH)
    assert ct2.align(SOURCES, TARGETS) == translator.align(SOURCES, TARGETS)
