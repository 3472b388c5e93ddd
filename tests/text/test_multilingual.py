"""Tests of the multilingual corpus: pair folders, tags, temperature sampling's shares."""

import collections
import dataclasses

import pytest

from tfblocks.text import multilingual


def _pair_folder(root, source, target, lines):
    folder = root / f"{source}-{target}"
    folder.mkdir()
    for split, count in (("train", lines), ("dev", 3), ("test", 3)):
        for language in (source, target):
            text = "".join(f"{language} {split} {i}\n" for i in range(count))
            (folder / f"{split}.{language}").write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    _pair_folder(root, "de", "en", 10_000)
    _pair_folder(root, "fr", "en", 1_000)
    return root


@pytest.mark.parametrize("temperature", [1.0, 5.0])
def test_one_epoch_draws_each_pair_at_its_temperature_share(corpus_dir, temperature):
    # en-fr is read the other way round from fr-en/: its sources are the English side.
    pairs = multilingual.load_language_pairs(corpus_dir, "de-en,en-fr")
    assert [p.name for p in pairs] == ["de-en", "en-fr"]
    assert pairs[1].splits["train"][0] == ("en train 0", "fr train 0")
    mixed = multilingual.MixedPairs(pairs, temperature=temperature)
    batch, _ = next(iter(mixed.dataset(seed=3).batch(20_000)))  # the whole epoch at once
    sources = [s.decode() for s in batch.numpy()]
    assert len(sources) == 11_000  # one epoch: as many draws as training pairs
    counts = collections.Counter(source.split(" ")[0] for source in sources)
    measured = [counts["<2en>"] / len(sources), counts["<2fr>"] / len(sources)]
    formula = [10_000 ** (1 / temperature), 1_000 ** (1 / temperature)]
    formula = [w / sum(formula) for w in formula]
    assert measured == pytest.approx(formula, abs=0.02)
    # Each source keeps its pair's own sentence behind the tag.
    assert all(s.split(" ", 2)[1] == ("de" if s.startswith("<2en>") else "en") for s in sources)


def test_tokenizer_sample_is_balanced_and_the_tag_is_one_piece(corpus_dir):
    mixed = multilingual.MixedPairs(multilingual.load_language_pairs(corpus_dir, "de-en,fr-en"))
    lines = mixed.tokenizer_lines(sample=600, seed=0)
    counts = collections.Counter(line.split(" ")[0] for line in lines)
    assert counts == {"de": 200, "en": 200, "fr": 200}  # en: distinct sentences of both pairs
    tokenizer = multilingual.train_multilingual_tokenizer(mixed, vocab_size=60, sample=600)
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    for language in ("de", "en", "fr"):
        assert multilingual.target_tag(language) in processor.encode(
            multilingual.tag_source("de train 1", language), out_type=str
        )


def test_pair_errors_name_the_value(corpus_dir):
    with pytest.raises(ValueError, match="pairs='de-en,de-en'"):
        multilingual.parse_pairs("de-en,de-en")
    with pytest.raises(ValueError, match="pairs='de'"):
        multilingual.parse_pairs("de")
    # A bad code is named with the rule of a direction's codes (no '-' in them).
    with pytest.raises(ValueError, match=r"pt_BR, not pt-BR\), got '1x' in pairs='de-en,1x-en'"):
        multilingual.parse_pairs("de-en,1x-en")
    with pytest.raises(FileNotFoundError, match="ja-en/ or en-ja/"):
        multilingual.load_language_pairs(corpus_dir, "ja-en")
    with pytest.raises(ValueError, match="temperature=0"):
        multilingual.pair_shares([1, 2], 0)


@pytest.mark.parametrize("shapes", ["dynamic", "packed"])
def test_make_dataset_batches_the_mixed_pairs(corpus_dir, shapes):
    from tfblocks.text import make_dataset

    pairs = multilingual.load_language_pairs(corpus_dir, "de-en,en-fr")
    mixed = multilingual.MixedPairs(tuple(
        dataclasses.replace(p, splits={**p.splits, "train": p.splits["train"][:40]}) for p in pairs
    ))  # fmt: skip
    tokenizer = multilingual.train_multilingual_tokenizer(mixed, vocab_size=60, sample=200)
    dataset = make_dataset(mixed, tokenizer, tokenizer, batch_tokens=256, max_length=16,
                           shapes=shapes, seed=1)  # fmt: skip
    inputs = [row for features, _ in dataset for row in features["inputs"].numpy()]
    tag = {tokenizer.tokenize([multilingual.target_tag(t)]).numpy()[0][-2] for t in ("en", "fr")}
    # Every (packed: the first) pair of a row starts with a tag after the leading "▁"
    # (all-PAD rows complete a fixed-shape batch).
    assert inputs and all(row[1] in tag for row in inputs if row.any())
