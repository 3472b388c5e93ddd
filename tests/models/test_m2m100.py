"""`import_m2m100` / `import_nllb` against what Hugging Face transformers computes with the
same folders.

The fixture (`tests/data/m2m100/`, made by `tests/data/make_m2m100_fixture.py`) holds a tiny
random M2M-100 folder (sharded safetensors) and NLLB folder (only `pytorch_model.bin`, read
without torch) with their logits and greedy outputs; nothing here needs torch or
transformers.
"""

import functools
import json
import os
import shutil

import numpy as np
import pytest

from tfblocks.decoding import Decoder, Greedy
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.models.m2m100 import import_m2m100, import_nllb

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "m2m100")
IMPORTERS = {"m2m100": import_m2m100, "nllb": import_nllb}


def code(kind, language):
    """The language token the folder's tokenizer writes for `language` (as the npz holds it)."""
    return f"__{language}__" if kind == "m2m100" else str(language)


@pytest.fixture(scope="module", params=sorted(IMPORTERS))
def case(request):
    return _case(request.param)


@functools.cache
def _case(kind):
    """`(kind, imported, expected, to_tf)` of the fixture folder `kind`, imported once."""
    folder = os.path.join(DATA, kind)
    imported = IMPORTERS[kind](folder)
    expected = dict(np.load(os.path.join(DATA, f"{kind}.npz")))
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        size = json.load(f)["vocab_size"]
    # tfblocks id of each fairseq id: <pad> 1, </s> 2, <unk> 3 -> 0, 1, 2; BOS 3 is the added
    # row (the decoder start, </s>'s embedding); then <s> 0 and the rest in the folder's order.
    to_tf = np.zeros(size, "int64")
    to_tf[[1, 2, 3]] = [PAD_ID, EOS_ID, UNK_ID]
    rest = [0, *range(4, size)]
    to_tf[rest] = np.arange(BOS_ID + 1, size + 1)
    return kind, imported, expected, to_tf


def _unpadded(row):
    row = list(row)
    return row[: row.index(2) + 1] if 2 in row else row  # up to fairseq's </s>


def test_language_tokens_and_tokenizers_give_the_folders_ids(case):
    # The source is `[source code] pieces </s>`: the code written before the text, as a tag.
    # The target tokenizer gives the pieces and </s> (the code is forced, not tokenized).
    kind, imported, expected, to_tf = case
    assert len(imported.languages) == (100 if kind == "m2m100" else 202)
    for row, text in enumerate(expected["sources"]):
        source = code(kind, expected["src_langs"][row])
        ids = imported.source_tokenizer.tokenize([f"{source} {text}"]).to_list()[0]
        assert ids == to_tf[_unpadded(expected["source_ids"][row])].tolist(), text
        assert ids[0] == imported.languages[source]
        target = _unpadded(expected["target_ids"][row])
        assert imported.languages[code(kind, expected["tgt_langs"][row])] == to_tf[target[0]]
        got = imported.target_tokenizer.tokenize([str(expected["targets"][row])]).to_list()[0]
        assert got == to_tf[target[1:]].tolist()
    # Detokenizing drops the language token (a control piece of the target tokenizer).
    target = to_tf[_unpadded(expected["target_ids"][0])]
    text = imported.target_tokenizer.detokenize(target[None].astype("int32")).numpy()[0]
    assert text.decode("utf-8") == str(expected["targets"][0])


def test_logits_equal_hugging_faces(case):
    _, imported, expected, to_tf = case
    source, target = to_tf[expected["source_ids"]], to_tf[expected["target_ids"]]
    logits = imported.model({"inputs": source, "targets": target}).numpy()  # [B, T, V + 1]
    assert logits.shape[-1] == len(to_tf) + 1
    real = target != PAD_ID
    np.testing.assert_allclose(logits[..., to_tf][real], expected["logits"][real], atol=1e-4)
    # The added start row takes no probability: 30 below </s>, whose embedding it holds.
    np.testing.assert_allclose(logits[..., BOS_ID], logits[..., EOS_ID] - 30.0, atol=1e-4)


def test_greedy_outputs_with_the_forced_language_token_equal_hugging_faces(case):
    # Hugging Face's forced_bos_token_id: the target language's token is the first output,
    # forced here as a one-token prefix.
    _, imported, expected, to_tf = case
    limit = int(expected["max_new_tokens"])
    prefix = to_tf[expected["forced_bos"]][:, None].astype("int32")
    decoder = Decoder(imported.model, max_length=limit + 1)
    ids, _ = decoder.decode(Greedy(), to_tf[expected["source_ids"]], prefix=prefix)
    for got, want in zip(ids.numpy(), to_tf[expected["greedy"]], strict=True):
        end = list(want).index(EOS_ID) + 1 if EOS_ID in want else limit
        assert got[:end].tolist() == want[:end].tolist()


def test_hparams_and_generation_defaults(case):
    _, imported, _, to_tf = case
    hp = imported.hparams
    assert (hp.norm_first, hp.position_offset, hp.norm_epsilon) == (True, 2, 1e-5)
    assert (hp.ffn_activation, hp.attention_use_bias, hp.timescale_rule) == ("relu", True, "t2t")
    assert hp.vocab_size == imported.model.vocab_size == len(to_tf) + 1
    assert imported.generation["max_length"] == 16


@pytest.mark.parametrize(
    ("kind", "edit", "message"),
    [
        ("m2m100", lambda f: os.remove(f / "model-00002-of-00003.safetensors"),
         r"model-00002-of-00003\.safetensors: missing: a shard that .*index\.json lists"),
        ("m2m100", lambda f: os.remove(f / "special_tokens_map.json"),
         r"tokenizer_config\.json: no language codes"),
        ("m2m100", lambda f: _edit_config(f, model_type="bart"),
         r"config\.json: unsupported model_type='bart'"),
        ("m2m100", lambda f: _edit_config(f, encoder_attention_heads=3, decoder_attention_heads=3),
         r"d_model=16 is not a multiple of encoder_attention_heads=3"),
        ("nllb", lambda f: os.remove(f / "sentencepiece.bpe.model"),
         r"sentencepiece\.bpe\.model: missing"),
        ("nllb", lambda f: (f / "pytorch_model.bin").write_bytes(b"not a zip"),
         r"pytorch_model\.bin: is not a zip archive"),
        ("nllb", lambda f: _edit_json(f / "tokenizer_config.json", legacy_behaviour=True),
         r"tokenizer_config\.json: unsupported legacy_behaviour=true"),
        ("nllb", lambda f: _edit_config(f, vocab_size=300),
         r"the embedding has 366 rows, config\.json's vocab_size=300"),
    ],
)  # fmt: skip
def test_bad_folders_are_refused_in_one_line(kind, edit, message, tmp_path):
    folder = tmp_path / kind
    shutil.copytree(os.path.join(DATA, kind), folder)
    edit(folder)
    with pytest.raises(ValueError, match=message) as error:
        IMPORTERS[kind](folder)
    assert "\n" not in str(error.value)


def _edit_config(folder, **values):
    _edit_json(folder / "config.json", **values)


def _edit_json(file, **values):
    config = json.loads(file.read_text(encoding="utf-8"))
    config.update(values)
    file.write_text(json.dumps(config), encoding="utf-8")


def test_a_translator_with_bad_language_tokens_is_refused(case):
    from tfblocks.serving import Translator

    _, imported, _, _ = case
    parts = (imported.model, imported.source_tokenizer, imported.target_tokenizer, 8)
    for tokens, message in [
        ("deu_Latn", r"must be \(source_code, target_id\)"),
        (("eng Latn", 5), "source code must be one word"),
        (("eng_Latn", "deu_Latn"), "target id must be an int"),
        (("eng_Latn", 10**6), "below the model's vocab_size"),
        (("eng_Latn", EOS_ID), "above the special ids"),
    ]:
        with pytest.raises(ValueError, match=message):
            Translator(*parts, language_tokens=tokens, jit_compile=False)
    code = next(iter(imported.languages))
    tokens = (code, imported.languages[code])
    with pytest.raises(ValueError, match="not with target_lang=None, multilingual=False or align"):
        Translator(*parts, language_tokens=tokens, alignments=True)
    translator = Translator(*parts, language_tokens=tokens)
    with pytest.raises(ValueError, match="LiteRT file of a model with language tokens"):
        translator.export_litert("never-written.tflite")
    assert not os.path.exists("never-written.tflite")
    # What would be off by the language tokens (word positions, tags) is refused.
    for call, words in [
        (lambda: translator(["a"], target_lang="fr"), "does not take target_lang='fr'"),
        (lambda: translator.n_best(["a"], replace_unknowns=True), "replace_unknowns=True"),
        (lambda: translator.align(["a"], ["b"]), "does not take align=True"),
    ]:
        with pytest.raises(ValueError, match=words):
            call()
    from tfblocks.serving import export_ctranslate2

    with pytest.raises(ValueError, match=r"position_offset=2 .*CTranslate2 export"):
        export_ctranslate2(imported.model, imported.source_tokenizer, "never-written",
                           target_tokenizer=imported.target_tokenizer)  # fmt: skip
    assert not os.path.exists("never-written")


def test_scores_of_hugging_faces_beam_hypotheses_equal_theirs(case):
    # HF's `sequences_scores`: the summed log-probabilities of the generated tokens, the
    # forced language token counting 0, over (tokens generated) ** length_penalty. The
    # model's own log-softmax over the folder's vocabulary gives them; Decoder.score
    # (forced_first=True) differs only by leaving out <pad>, which tfblocks never generates.
    _, imported, expected, to_tf = case
    beam = to_tf[expected["beam"]]  # [B * 2, T]: the language id first, 0-padded after EOS
    sources = np.repeat(to_tf[expected["source_ids"]], len(beam) // len(expected["sources"]), 0)
    real = beam != PAD_ID
    lengths = real.sum(axis=1)
    theirs = expected["beam_scores"] * lengths ** float(expected["length_penalty"])
    logits = imported.model({"inputs": sources, "targets": beam}).numpy()[..., to_tf]
    log_probs = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1))[..., None]
        - logits.max(-1, keepdims=True)
    )  # [N, T, folder's V], as HF's log_softmax
    chosen = np.take_along_axis(log_probs, expected["beam"][..., None], axis=-1)[..., 0]
    chosen[:, 0] = 0.0  # the forced language token
    np.testing.assert_allclose((chosen * real).sum(axis=1), theirs, atol=1e-4)
    decoder = Decoder(imported.model, max_length=32, forced_first=True)
    ours = decoder.score(sources, beam).numpy()  # [B * 2, T]
    assert np.all(ours[:, 0] == 0.0)
    pad = np.exp(log_probs[..., 1])  # HF's <pad> (fairseq id 1): its share, renormalized away
    renormalized = (chosen - np.log1p(-pad)) * real
    renormalized[:, 0] = 0.0
    np.testing.assert_allclose(ours, renormalized, atol=1e-4)
    # Without forced_first the language token's own log-probability counts (below 0).
    counted = Decoder(imported.model, max_length=32).score(sources, beam).numpy()
    assert np.all(counted[:, 0] < 0.0)
    np.testing.assert_allclose(counted[:, 1:], ours[:, 1:], atol=1e-5)


def test_forced_first_scores_the_search_as_score_does_and_needs_a_prefix():
    _, imported, expected, to_tf = _case("nllb")  # the Decoder's rule: one folder suffices
    source = to_tf[expected["source_ids"]][:2]
    prefix = to_tf[expected["forced_bos"]][:2, None].astype("int32")
    free = Decoder(imported.model, max_length=12, forced_first=True)
    ids, scores = free.decode(Greedy(), source, prefix=prefix)
    counted_ids, counted = Decoder(imported.model, max_length=12).decode(
        Greedy(), source, prefix=prefix
    )
    assert ids.numpy().tolist() == counted_ids.numpy().tolist()  # the same choices
    np.testing.assert_allclose(scores, free.score(source, ids).numpy().sum(axis=1), atol=1e-4)
    assert np.all(counted.numpy() < scores.numpy())  # minus the language token's log-prob
    with pytest.raises(ValueError, match=r"forced_first=True\) decodes from a `prefix`"):
        free.decode(Greedy(), source)


def test_a_translator_with_languages_translates_in_each_direction():
    # translator(texts, source_lang=, target_lang=) gives what a translator made for that
    # direction gives (the SavedModel's `languages` signature: tests/cli/test_import_m2m100).
    from tfblocks.serving import Translator

    kind, imported, expected, _ = _case("m2m100")  # its codes are also taken plain (`de`)
    parts = (imported.model, imported.source_tokenizer, imported.target_tokenizer, 12)
    columns = (expected["sources"], expected["src_langs"], expected["tgt_langs"])
    rows = [(str(text), code(kind, source), code(kind, target))
            for text, source, target in zip(*columns, strict=True)]  # fmt: skip
    rows = [rows[0], next(row for row in rows if row[2] != rows[0][2])]  # two directions
    # Without XLA: each translator here runs a call or two, which compiling would only slow.
    own = (rows[0][1], imported.languages[rows[0][2]])
    translator = Translator(*parts, search=Greedy(), language_tokens=own,
                            languages=imported.languages, jit_compile=False)  # fmt: skip
    for text, source, target in rows:
        alone = Translator(*parts, search=Greedy(), jit_compile=False,
                           language_tokens=(source, imported.languages[target]))  # fmt: skip
        plain = (source.strip("_"), target.strip("_"))  # M2M-100's `de` for `__de__`
        got = translator([text], source_lang=plain[0], target_lang=plain[1]).numpy()[0]
        assert got == alone([text]).numpy()[0], (text, source, target)
    with pytest.raises(ValueError, match=r"`target_lang` must be a language code .*closest"):
        translator(["a"], target_lang="xx_Nope")
    with pytest.raises(ValueError, match="translate plainly"):
        translator(["a"], target_lang=rows[0][2], target_prefix=["b"])
    with pytest.raises(ValueError, match="needs `language_tokens`"):
        Translator(*parts, languages=imported.languages)
    with pytest.raises(ValueError, match=r"must be among `languages`' codes and ids"):
        Translator(*parts, language_tokens=(own[0], 5), languages=imported.languages)


def test_language_tokenized_ids_start_with_the_language_token_and_copy():
    import copy

    from tfblocks.serving.languages import LanguageTokenized

    _, imported, _, _ = _case("nllb")
    source = LanguageTokenized(imported.source_tokenizer, code="jpn_Jpan")
    target = LanguageTokenized(imported.target_tokenizer, first_id=imported.languages["eng_Latn"])
    plain = imported.target_tokenizer.tokenize(["the cat."]).to_list()[0]
    assert target.tokenize(["the cat."]).to_list()[0] == [imported.languages["eng_Latn"], *plain]
    assert source.tokenize(["猫"]).to_list()[0][0] == imported.languages["jpn_Jpan"]
    assert copy.deepcopy(source).code == "jpn_Jpan"  # no recursion through __getattr__
    assert source.vocabulary_size == imported.source_tokenizer.vocabulary_size
    with pytest.raises(ValueError, match="one of them"):
        LanguageTokenized(imported.source_tokenizer, code="jpn_Jpan", first_id=5)
