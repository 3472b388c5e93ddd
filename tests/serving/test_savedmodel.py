"""Translator and its SavedModel: strings in, strings out, with nothing but TensorFlow."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfblocks
from tfblocks.decoding import BeamSearch, Greedy, Sampling
from tfblocks.serving import Hypothesis, Translator
from tfblocks.text import load_phrasebook, train_tokenizer

pytestmark = pytest.mark.heavy  # runs whole jobs: scheduled first

SENTENCES = ["今日のランチはカレーだ。", "健太は学校で本を読む。", "私"]
# Blank lines beyond ASCII: ideographic and no-break spaces, a line separator, tabs, NEL.
BLANKS = ["\u3000\u3000", "\t\u00a0\u2028 \u2029", "\x1c\x85\u202f\u205f\x0b"]


@pytest.fixture(scope="module")
def parts():
    pairs = load_phrasebook()["train"][:400]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=300)
    keras.utils.set_random_seed(0)  # module fixtures run before conftest's per-test seed
    hp = tfblocks.hparams(
        "transformer_tiny",
        vocab_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    return tfblocks.build_transformer(hp), tokenizer


@pytest.fixture(scope="module")
def exported(parts, tmp_path_factory):
    """The one export of this module: XLA-compiled beam search, as `Translator` defaults to,
    with two hypotheses (so an `n_best` signature too)."""
    model, tokenizer = parts
    translator = Translator(
        model, tokenizer, tokenizer, max_length=10, search=BeamSearch(3), num_hypotheses=2
    )
    # Count the traces of the signatures (each runs `encode_source` once).
    encode = translator.encode_source

    def counting(text, *args):
        EXPORT_TRACES.append(1)
        return encode(text, *args)

    translator.encode_source = counting
    try:
        path = translator.export(tmp_path_factory.mktemp("export") / "translator")
    finally:
        del translator.encode_source
    return translator, path


EXPORT_TRACES = []  # one item per trace of `exported`'s signatures during its export
TARGETS = ["Today's lunch is curry.", "Kenta reads a book at school.", ""]
PREFIXES = ["Today's", "", "Kenta reads", "I"]  # SENTENCES and one blank text


def test_export_traces_each_signature_once(exported):
    # Inside `tf.saved_model.save` only: a trace before it would be one more (the save
    # context is part of the tracing cache key). serving_default, n_best, score, prefix.
    assert len(EXPORT_TRACES) == 4


@pytest.fixture(scope="module")
def translators(parts):
    """`translators(**kwargs)`: a `Translator` without XLA, one per setting, shared by
    the tests that only call it (each traces its signature once; nothing compiles)."""
    model, tokenizer = parts
    made = {}

    def get(**kwargs):
        key = tuple(sorted(kwargs.items()))
        if key not in made:
            made[key] = Translator(model, tokenizer, tokenizer, jit_compile=False, **kwargs)
        return made[key]

    return get


def _beam_or_greedy(beam_size):
    return Greedy() if beam_size == 1 else BeamSearch(beam_size)


def _run(code, *args):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def served(exported):
    """One fresh process serves the export without tfblocks: the signature on SENTENCES
    and on a bad input, then `saved_model_cli show` of `serving_default` and `run` (its
    `main`, after tf-text's ops are loaded: saved_model_cli cannot load custom-op
    libraries itself). `show --all`, which the docs suggest, prints the same signature
    and then loads the SavedModel once more to list its functions."""
    _, path = exported
    out = _run(
        """
        import contextlib, io, json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops
        path, texts, blanks = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
        targets, PREFIXES = json.loads(sys.argv[4]), json.loads(sys.argv[5])
        loaded = tf.saved_model.load(path)
        serve = loaded.signatures["serving_default"]
        result = serve(text=tf.constant(texts))
        blank = serve(text=tf.constant(blanks))
        n_best = loaded.signatures["n_best"](text=tf.constant(texts + blanks[:1]))
        scored = loaded.signatures["score"](
            source=tf.constant(texts), target=tf.constant(targets)
        )
        prefixed = loaded.signatures["prefix"](
            text=tf.constant(texts + blanks[:1]), target_prefix=tf.constant(PREFIXES)
        )
        try:
            serve(text=tf.constant([1, 2]))
            bad_input_error = None
        except (TypeError, ValueError, tf.errors.InvalidArgumentError) as e:
            bad_input_error = f"{type(e).__name__}: {e}"
        from tensorflow.python.tools import saved_model_cli

        def cli(*args):
            sys.argv = ["saved_model_cli", *args]
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                try:
                    saved_model_cli.main()
                except SystemExit as e:
                    assert not e.code, e.code
            return stdout.getvalue()

        shown = cli(
            "show", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default"
        )
        ran = cli(
            "run", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default",
            "--input_exprs", 'text=["今日のランチはカレーだ。"]',
        )
        print(json.dumps({
            "translation": [t.decode() for t in result["translation"].numpy()],
            "score": result["score"].numpy().tolist(),
            "blank": [t.decode() for t in blank["translation"].numpy()],
            "signatures": sorted(loaded.signatures),
            "n_best": [[t.decode() for t in row] for row in n_best["translations"].numpy()],
            "n_best_scores": n_best["scores"].numpy().tolist(),
            "scores": scored["score"].numpy().tolist(),
            "token_scores": scored["token_scores"].numpy().tolist(),
            "lengths": scored["length"].numpy().tolist(),
            "prefixed": [t.decode() for t in prefixed["translation"].numpy()],
            "prefixed_n_best": [
                [t.decode() for t in row] for row in prefixed["translations"].numpy()
            ],
            "prefixed_scores": prefixed["scores"].numpy().tolist(),
            "bad_input_error": bad_input_error,
            "shown": shown,
            "ran": ran,
            "tfblocks_imported": any(m.startswith("tfblocks") for m in sys.modules),
        }))
        """,
        str(path),
        json.dumps(SENTENCES),
        json.dumps(BLANKS),
        json.dumps(TARGETS),
        json.dumps(PREFIXES),
    )
    return json.loads(out.strip().splitlines()[-1])


def test_reloaded_without_tfblocks_gives_the_same_strings(exported, served):
    translator, _ = exported
    want = translator.serve(tf.constant(SENTENCES))
    assert not served["tfblocks_imported"]
    assert served["translation"] == [t.decode() for t in want["translation"].numpy()]
    np.testing.assert_allclose(served["score"], want["score"].numpy(), rtol=1e-5)
    assert served["blank"] == ["", "", ""]  # the export keeps the blank-line rule
    # The n-best and score signatures: [batch, K] strings and scores; per-token values.
    assert served["signatures"] == ["n_best", "prefix", "score", "serving_default"]
    n_best = translator.n_best([*SENTENCES, BLANKS[0]])
    assert served["n_best"] == [[h.text for h in row] for row in n_best]
    np.testing.assert_allclose(served["n_best_scores"], [[h.score for h in row] for row in n_best],
                               rtol=1e-5)  # fmt: skip
    assert served["n_best"][-1] == ["", ""] and served["n_best_scores"][-1] == [0.0, 0.0]
    assert [row[0] for row in served["n_best"][:-1]] == served["translation"]
    per_token = translator.score(SENTENCES, TARGETS, per_token=True)
    np.testing.assert_allclose(served["scores"], [v.sum() for v in per_token], rtol=1e-5)
    assert served["lengths"] == [len(v) for v in per_token]
    for row, values in zip(served["token_scores"], per_token, strict=True):
        np.testing.assert_allclose(row[: len(values)], values, rtol=1e-5, atol=1e-6)
        assert not any(row[len(values) :])  # 0 after the target's EOS
    # The prefix signature: each translation starts with its prefix ("" forces nothing:
    # the plain translation; a blank text: ""), the n-best too, as the Translator gives them.
    texts = [*SENTENCES, BLANKS[0]]
    prefixed = translator.n_best(texts, target_prefix=PREFIXES)
    assert served["prefixed_n_best"] == [[h.text for h in row] for row in prefixed]
    want_scores = [[h.score for h in row] for row in prefixed]
    np.testing.assert_allclose(served["prefixed_scores"], want_scores, rtol=1e-5)
    assert served["prefixed"] == [row[0] for row in served["prefixed_n_best"]]
    assert served["prefixed"][1] == served["translation"][1] and served["prefixed"][3] == ""
    for got, prefix in zip(served["prefixed_n_best"][:3], PREFIXES, strict=False):
        assert all(text.startswith(prefix) for text in got), (got, prefix)
    assert translator(texts, target_prefix=PREFIXES).numpy().tolist() == [
        t.encode() for t in served["prefixed"]
    ]
    # The reloaded signature refuses what is not a string batch.
    assert served["bad_input_error"] is not None
    assert "string" in served["bad_input_error"], served["bad_input_error"]


def test_saved_model_cli_show_and_run(served):
    shown, ran = served["shown"], served["ran"]
    assert "inputs['text']" in shown and "DT_STRING" in shown
    assert "outputs['translation']" in shown and "outputs['score']" in shown
    assert "Result for output key translation" in ran
    assert "Result for output key score" in ran


def test_empty_and_blank_strings_translate_to_empty(exported):
    translator, _ = exported
    out = translator.serve(tf.constant(["", "   ", SENTENCES[0]]))
    assert out["translation"].numpy().tolist()[:2] == [b"", b""]
    assert out["score"].numpy().tolist()[:2] == [0.0, 0.0]
    for empty in (tf.constant([], tf.string), []):  # an empty list is no float tensor
        got = translator(empty)
        assert got.dtype == tf.string and got.shape == (0,)


def test_long_input_is_truncated_to_max_length(translators):
    translator = translators(max_length=10, search=BeamSearch(3))
    long = "".join(SENTENCES[:2]) * 20
    ids = translator.encode_source(tf.constant([long, SENTENCES[2]])).numpy()
    assert ids.shape[1] == translator.max_length
    assert ids[0, -1] == tfblocks.EOS_ID
    assert list(ids[1][ids[1] != 0])[-1] == tfblocks.EOS_ID
    assert translator([long]).shape == (1,)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translation_does_not_depend_on_batch_mates(translators, beam_size):
    translator = translators(max_length=10, search=_beam_or_greedy(beam_size))
    together = translator.serve(tf.constant(SENTENCES))
    for row, text in enumerate(SENTENCES):
        alone = translator.serve(tf.constant([text]))
        assert alone["translation"].numpy()[0] == together["translation"].numpy()[row]
        np.testing.assert_allclose(alone["score"][0], together["score"][row], rtol=1e-5)


def test_bad_input(parts, exported):
    # (The reloaded signature's refusal is checked in the `served` process.)
    model, tokenizer = parts
    translator, _ = exported
    with pytest.raises(ValueError, match=r"`texts`.*int32"):
        translator(tf.constant([1, 2]))
    with pytest.raises(ValueError, match=r"`texts\[1\]` is not valid Unicode.*'a\\ud800b'"):
        translator(["ok", "a\ud800b"])  # a lone surrogate
    for kwargs, words in [
        ({"max_length": 1}, "max_length=1"),
        ({"search": "beam"}, "search='beam'"),
        ({"search": Sampling(top_k=301)}, "top_k=301 tokens but the model's vocabulary"),
    ]:
        with pytest.raises(ValueError, match=words):
            Translator(model, tokenizer, tokenizer, **kwargs)


def test_n_best_and_score(parts, translators):
    model, tokenizer = parts
    translator = translators(max_length=10, search=BeamSearch(3, alpha=0.0), num_hypotheses=3)
    texts = [*SENTENCES, BLANKS[0]]
    n_best = translator.n_best(texts)
    assert [len(row) for row in n_best] == [3] * 4
    assert all(isinstance(h, Hypothesis) and isinstance(h.score, float) for h in n_best[0])
    assert [row[0].text for row in n_best] == [t.decode() for t in translator(texts).numpy()]
    assert n_best[-1] == [Hypothesis("", 0.0)] * 3  # a blank line: "" three times
    assert all(len({h.text for h in row}) == 3 for row in n_best[:-1])
    assert translator.n_best([]) == [] and translator.n_best(tf.constant([], tf.string)) == []
    # Scores: per-token values (subwords, then EOS) that sum to the score; the target is
    # scored as a whole, even beyond max_length.
    long = " ".join(["curry"] * 30)
    scores = translator.score([*SENTENCES, ""], [*TARGETS, long])
    per_token = translator.score([*SENTENCES, ""], [*TARGETS, long], per_token=True)
    assert scores.dtype == np.float32 and scores.shape == (4,) and (scores < 0).all()
    np.testing.assert_allclose(scores, [v.sum() for v in per_token], rtol=1e-5)
    assert [len(v) for v in per_token] == [len(ids) for ids in tokenizer.tokenize(
        [*TARGETS, long]).to_list()]  # fmt: skip
    assert len(per_token[3]) > translator.max_length
    # One pair scores as it does in a batch; the empty target is its EOS alone.
    np.testing.assert_allclose(translator.score(SENTENCES[2:], TARGETS[2:]), scores[2:3],
                               rtol=1e-5)  # fmt: skip
    assert len(per_token[2]) == 1
    assert translator.score([], []).shape == (0,) and translator.score([], [], True) == []
    for args, words in [
        ((SENTENCES, TARGETS[:2]), "same length, got 3 sources and 2 targets"),
        (("今日", "Today"), "`sources` must be a list of strings, got a single str"),
        ((SENTENCES, [1, 2, 3]), "`targets`"),
    ]:
        with pytest.raises(ValueError, match=words):
            translator.score(*args)
    for call, words in [
        (translator, "`texts` and `target_prefix` must have the same length, got 3 texts and 1"),
        (translator.n_best, "got 3 texts and 1 target_prefix"),
    ]:
        with pytest.raises(ValueError, match=words):
            call(SENTENCES, target_prefix=["Today"])
    with pytest.raises(ValueError, match="`target_prefix` must be a list of strings"):
        translator(SENTENCES[:1], target_prefix="Today")
    for kwargs, words in [
        ({"search": BeamSearch(3), "num_hypotheses": 4}, "at most 3, the hypotheses"),
        ({"search": BeamSearch(3), "num_hypotheses": 0}, "num_hypotheses=0"),
        ({"search": Greedy(), "num_hypotheses": 2}, "got num_hypotheses=2"),
    ]:
        with pytest.raises(ValueError, match=words):
            Translator(model, tokenizer, tokenizer, **kwargs)
    # Sampling: num_hypotheses samples per text, best first.
    sampler = translators(max_length=10, search=Sampling(seed=1), num_hypotheses=4)
    samples = sampler.n_best(SENTENCES[:1])[0]
    assert len(samples) == 4 and [h.score for h in samples] == sorted(
        [h.score for h in samples], reverse=True
    )


def test_export_is_atomic(exported, translators, tmp_path, monkeypatch):
    # Exporting leaves the translator as it was: a shared one will do. The export it
    # replaces: a copy of the module's (tfblocks wrote it too; one export fewer to make).
    translator = translators(max_length=10, search=Greedy())
    target = tmp_path / "export"
    shutil.copytree(exported[1], target)
    marker = target / "saved_model.pb"
    before = marker.read_bytes()

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        translator.export(target)
    assert marker.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no staging left over
    monkeypatch.undo()
    # Replacing its own export: the marker lists exactly what the SavedModel wrote.
    assert translator.export(target) == str(target)
    assert tf.saved_model.load(str(target)).signatures["serving_default"] is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_export_refuses_what_tfblocks_did_not_write(exported, tmp_path, monkeypatch):
    translator, path = exported
    with open(os.path.join(path, "tfblocks_export.json")) as f:
        info = json.load(f)
    assert info["kind"] == "tfblocks-export" and "saved_model.pb" in info["files"]
    users = tmp_path / "results"
    users.mkdir()
    (users / "notes.txt").write_bytes(b"mine\n")
    with pytest.raises(ValueError, match=r"`path` is an existing directory.*results"):
        translator.export(users)
    assert sorted(p.name for p in users.iterdir()) == ["notes.txt"]
    assert (users / "notes.txt").read_bytes() == b"mine\n"
    monkeypatch.chdir(users)
    for bad in ["", "."]:
        with pytest.raises(ValueError, match=rf"`path`.*path={bad!r}"):
            translator.export(bad)
    assert sorted(p.name for p in users.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_bucketed_sources_translate_as_padded_to_max_length(parts, translators, beam_size):
    # The default buckets ("auto": 8, 10) against padding to max_length and exact lengths
    # (None); the translators with the default are the batch-mates test's, traced already.
    # Buckets of one's own are padded by the same code as "auto": only their first bucket
    # is checked (each translator that translates is one more trace).
    model, tokenizer = parts
    texts = [*SENTENCES, "".join(SENTENCES) * 3, "", "猫"]
    search = _beam_or_greedy(beam_size)

    def translate(**buckets):
        return translators(max_length=10, search=search, **buckets).serve(tf.constant(texts))

    padded = translate(source_buckets=(10,))
    for out in (translate(), translate(source_buckets=None)):
        assert out["translation"].numpy().tolist() == padded["translation"].numpy().tolist()
        np.testing.assert_allclose(out["score"].numpy(), padded["score"].numpy(), rtol=1e-5)
    translator = translators(max_length=10, search=search, source_buckets=(4, 6))
    assert translator.source_buckets == (4, 6, 10)
    short = translator.encode_source(tf.constant(SENTENCES[2:]))  # one subword + EOS
    assert short.shape[1] == 4  # the first of the buckets (4, 6, 10)
    assert Translator(model, tokenizer, tokenizer, max_length=40).source_buckets == (8, 16, 32, 40)


def test_source_buckets_bad_input(parts):
    model, tokenizer = parts
    for bad in [(0, 4), (8, 4), "big", 5, (4, 30)]:
        with pytest.raises(ValueError, match="source_buckets="):
            Translator(model, tokenizer, tokenizer, max_length=12, source_buckets=bad)


def test_default_length_limit_does_not_depend_on_batch_mates(translators):
    # Bucketed sources (the default): "私" pads to bucket 8 alone and to 48 beside a long
    # sentence; an untrained model runs to its length limit, which must not change.
    translator = translators(max_length=48, search=BeamSearch(2))
    long = "昨日、子供たちは庭で天ぷらを温めた。" * 3
    assert translator.encode_source(tf.constant(["私", long])).shape[1] == 48
    assert translator.encode_source(tf.constant(["私"])).shape[1] == 8
    assert translator(["私", long]).numpy()[0] == translator(["私"]).numpy()[0]


@pytest.fixture
def eagerly():
    """The signatures run step by step in Python: for this tiny model, tracing each
    search's loops into a graph costs far more than running them."""
    tf.config.run_functions_eagerly(True)
    yield
    tf.config.run_functions_eagerly(False)


def test_constraints_hold_in_every_translation(parts, translators, eagerly):
    # An untrained model never says these words: each translation holds its phrases (in
    # the n-best lists too, with a prefix, and for an ensemble), a text without phrases
    # translates as without constraints, and bad constraints are refused naming them.
    model, tokenizer = parts
    translator = translators(max_length=12, search=BeamSearch(2), num_hypotheses=2)
    texts = [*SENTENCES, BLANKS[0]]
    constraints = [["curry"], [], ["book", "Kenta"], ["lunch"]]
    plain = translator.n_best(texts)
    assert not any(p in h.text for row in plain for h in row for p in ("curry", "book", "Kenta"))
    # A prefix for the first text, and the n-best lists (their first: the translation).
    n_best = translator.n_best(texts, target_prefix=["Today", "", "", ""], constraints=constraints)
    assert n_best[0][0].text.startswith("Today"), n_best
    for row, phrases in zip(n_best[:3], constraints, strict=False):
        assert all(phrase in h.text for h in row for phrase in phrases), (row, phrases)
    assert n_best[1] == plain[1] and n_best[3] == [("", 0.0)] * 2  # no phrases; blank
    ensemble = Translator(tfblocks.Ensemble([model, model]), tokenizer, tokenizer, 12,
                          search=BeamSearch(2), jit_compile=False)  # fmt: skip
    got = ensemble(SENTENCES, constraints=constraints[:3]).numpy()
    assert b"curry" in got[0] and b"book" in got[2] and b"Kenta" in got[2], got
    for call, kwargs, words in [
        (translator, {"constraints": [["curry"]]}, r"a list of phrases per text \(3\), got 1"),
        (translator.n_best, {"constraints": "curry"}, "must be a list with a list of str"),
        (translator, {"constraints": [["curry"], "book", []]}, r"`constraints\[1\]` must be"),
        (translator, {"constraints": [[], [], [3]]}, r"`constraints\[2\]\[0\]` must be a str"),
        (translator, {"constraints": [[], [], ["curry " * 12]]}, r"`constraints\[2\]\[0\]`"),
        (
            translator,
            {"constraints": [[], ["🍛 curry"], []]},
            r"`constraints\[1\]\[0\]` \('🍛 curry'\) holds characters the target vocabulary "
            r"lacks \('🍛'\)",
        ),
        (translators(search=Greedy()), {"constraints": [[]] * 3}, "need a beam search"),
        (translator, {"constraints": [[]] * 3, "replace_unknowns": True}, "cannot be combined"),
    ]:
        with pytest.raises(ValueError, match=words):
            call(SENTENCES, **kwargs)
