"""`Translator(target_lang=)` and `translator(texts, target_lang=)`: the tag of the target
language goes in front of each source, as a model of several directions was trained."""

import pytest

import tfblocks
from tfblocks.decoding import Greedy
from tfblocks.serving import Translator
from tfblocks.text.multilingual import tag_source, target_tag
from tfblocks.text.tokenizers import train_tokenizer


@pytest.fixture(scope="module")
def parts():
    lines = ["Guten Morgen", "Good morning", "Bonjour"] * 20
    tokenizer = train_tokenizer(
        lines, vocab_size=40, trainer_options={"user_defined_symbols": ["<2en>", "<2fr>"]}
    )
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, hidden_size=16,
        filter_size=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
    )  # fmt: skip
    return tfblocks.build_transformer(hp), tokenizer


def test_the_translator_tags_the_sources(parts):
    model, tokenizer = parts
    plain = Translator(
        model, tokenizer, tokenizer, max_length=8, search=Greedy(), jit_compile=False
    )
    into_fr = Translator(model, tokenizer, tokenizer, max_length=8, search=Greedy(),
                         target_lang="fr")  # fmt: skip
    tagged = plain.encode_source([tag_source("Guten Morgen", "fr")]).numpy()
    assert (into_fr.encode_source(["Guten Morgen"]).numpy() == tagged).all()
    assert tokenizer.tokenize([target_tag("fr")]).numpy().tolist()[0][-2] > 3  # one piece
    # Per call, into a language: the translation of the tagged text.
    assert plain(["Guten Morgen"], target_lang="fr").numpy().tolist() == (
        plain([tag_source("Guten Morgen", "fr")]).numpy().tolist()
    )
    with pytest.raises(ValueError, match="language='fr en'"):
        Translator(model, tokenizer, tokenizer, max_length=8, target_lang="fr en")
