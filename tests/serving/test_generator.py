"""The decoder-only language model end to end: memorize, complete prompts, export, reload."""

import json
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.decoding import BeamSearch, Decoder, Greedy, Sampling
from tfblocks.text import train_tokenizer

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

SENTENCES = [
    "Today's lunch is curry.",
    "Kenta reads a book at school.",
    "My sister plays the piano every evening.",
    "The train to Kyoto leaves at nine.",
    "We drink green tea after dinner.",
    "It rained all day in Osaka.",
]


@pytest.fixture(scope="module")
def memorized():
    """A tiny LM trained until it has learned the six sentences by heart."""
    keras.utils.set_random_seed(1)
    tokenizer = train_tokenizer(SENTENCES * 10, vocab_size=80, model_type="bpe")
    ids = tokenizer.tokenize(tf.constant(SENTENCES)).to_tensor().numpy()  # ends with EOS
    hp = tfblocks.hparams(
        "transformer_tiny",
        vocab_size=tokenizer.vocabulary_size,
        num_encoder_layers=0,
        hidden_size=64,
        filter_size=128,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
        label_smoothing=0.0,
    )
    model = tfblocks.build_language_model(hp)
    tfblocks.compile_transformer(model, hp, learning_rate=3e-3)
    data = np.repeat(ids, 32, axis=0)
    model.fit(data, data, batch_size=32, epochs=30, verbose=0)
    return model, tokenizer, ids


def test_language_model_memorizes_and_completes_prompts(memorized):
    model, tokenizer, ids = memorized
    # Teacher-forced: every next token right once the prefix tells the sentences apart
    # (BOS, or BOS + "▁", starts several of them).
    predicted = np.asarray(model(ids)).argmax(-1)
    real = ids != tfblocks.PAD_ID
    real[:, :2] = False
    assert (predicted[real] == ids[real]).all()
    generator = tfblocks.Generator(model, tokenizer, max_length=24)
    prompts = [" ".join(s.split()[:2]) for s in SENTENCES]
    got = [t.decode() for t in generator(prompts).numpy()]
    want = [s[len(p) :].strip() for s, p in zip(SENTENCES, prompts, strict=True)]
    assert [g.strip() for g in got] == want
    beam = tfblocks.Generator(model, tokenizer, max_length=24, search=BeamSearch(3))
    assert [t.decode().strip() for t in beam(prompts).numpy()] == want


def test_cached_generation_equals_uncached_argmax(memorized):
    model, _, _ = memorized
    prefix = np.array([[20, 21, 0], [30, 0, 0]], "int32")
    ids, _ = Decoder(model, max_length=7).decode(Greedy(), prefix=prefix)
    for row, p in enumerate(prefix):
        seq = [int(t) for t in p if t]  # the prompt, then argmax of the full model
        while len(seq) < 7:
            logits = np.array(model(np.array([[*seq, 0]], "int32")))[0, len(seq)]
            logits[[tfblocks.PAD_ID, tfblocks.BOS_ID]] = -1e9
            seq.append(int(logits.argmax()))
            if seq[-1] == tfblocks.EOS_ID:
                break
        np.testing.assert_array_equal(ids.numpy()[row, : len(seq)], seq)


def test_generator_export_reloads_in_a_fresh_process(memorized, tmp_path):
    model, tokenizer, _ = memorized
    generator = tfblocks.Generator(model, tokenizer, max_length=24)
    path = generator.export(tmp_path / "lm")
    prompts = ["Today's lunch", "We drink", ""]
    want = generator.serve(tf.constant(prompts))
    code = textwrap.dedent(
        """
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops
        loaded = tf.saved_model.load(sys.argv[1])
        out = loaded.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))
        print(json.dumps({"continuation": [t.decode() for t in out["continuation"].numpy()],
                          "score": out["score"].numpy().tolist()}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), json.dumps(prompts)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["continuation"] == [t.decode() for t in want["continuation"].numpy()]
    assert got["continuation"][0].strip() == "is curry."
    np.testing.assert_allclose(got["score"], want["score"].numpy(), rtol=1e-5)


def test_generator_and_translator_check_their_model(memorized):
    model, tokenizer, _ = memorized
    with pytest.raises(ValueError, match="encoder–decoder"):
        tfblocks.Translator(model, tokenizer, tokenizer)
    translation = tfblocks.build_transformer(
        tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
    )
    with pytest.raises(ValueError, match=r"decoder-only .* got Transformer .*use `Translator`"):
        tfblocks.Generator(translation, tokenizer)
    small = tfblocks.build_language_model(
        tfblocks.hparams("transformer_tiny", vocab_size=40, num_encoder_layers=0)
    )
    with pytest.raises(ValueError, match=f"`tokenizer` has {tokenizer.vocabulary_size} ids"):
        tfblocks.Generator(small, tokenizer)
    with pytest.raises(ValueError, match="search='top'"):
        tfblocks.Generator(model, tokenizer, search="top")
    with pytest.raises(ValueError, match="texts"):
        tfblocks.Generator(model, tokenizer)(tf.constant([[1, 2]]))
    # Sampling among more tokens than the vocabulary has: refused when made.
    words = f"top_k={model.vocab_size + 1} tokens but the model's vocabulary has only "
    with pytest.raises(ValueError, match=words + str(model.vocab_size)):
        tfblocks.Generator(model, tokenizer, search=Sampling(top_k=model.vocab_size + 1))
    # No prompt: no continuation, a string tensor of shape [0].
    empty = tfblocks.Generator(model, tokenizer, max_length=8, jit_compile=False)([])
    assert empty.dtype == tf.string and empty.shape == (0,)
