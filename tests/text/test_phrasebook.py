"""Tests of the embedded phrasebook: size, determinism, grammar surface and held-out splits."""

import itertools
import re

import pytest

from tfblocks.text import phrasebook

_CATEGORIES = ("person", "place", "meal", "food", "adjective")


@pytest.fixture(scope="module")
def pairs():
    return phrasebook.generate_phrasebook(seed=0)


def _combinations(words):
    """Cross-category pairs of content words, written independently of the module's helper."""
    eligible = sorted(w for w in words if w.split(":")[0] in _CATEGORIES)
    return {
        (a, b) for a, b in itertools.combinations(eligible, 2) if a.split(":")[0] != b.split(":")[0]
    }


def test_size_and_one_translation_per_source(pairs):
    sources = [p.source for p in pairs]
    assert len(pairs) == 25_000
    assert len(set(sources)) == len(sources) >= 20_000
    assert len({(p.source, p.target) for p in pairs}) == len(pairs)


def test_running_example_is_in_train(pairs):
    matches = [p for p in pairs if p.source == "今日のランチはカレーだ。"]
    assert [(p.target, p.split) for p in matches] == [("Today's lunch is curry.", "train")]


def test_same_seed_same_pairs_other_seed_other_pairs():
    first = phrasebook.generate_phrasebook(seed=7, size=3000)
    assert first == phrasebook.generate_phrasebook(seed=7, size=3000)
    other = phrasebook.generate_phrasebook(seed=8, size=3000)
    assert {p.source for p in first} != {p.source for p in other}


def test_surface_form(pairs):
    for p in pairs:
        assert not re.search(r"\s", p.source), p.source
        assert re.fullmatch(r"[^\s]+(。|か。)", p.source), p.source
        assert re.fullmatch(r"[A-Z][a-z' ,A-Z]+[.?]", p.target), p.target
        assert (p.source.endswith("か。")) == p.target.endswith("?"), p
        assert len(p.target.split()) <= 16 and len(p.source) <= 40, p
    targets = " ".join(p.target for p in pairs)
    for phrase in ("didn't", "won't", "doesn't", "will ", "Who ", "What ", "Where ", "Is ", "Did "):
        assert phrase in targets, phrase


def test_grammar_examples(pairs):
    table = dict((p.source, p.target) for p in pairs)
    # Negative past of a godan verb and of an i-adjective, when sampled, translate as expected.
    for source, target in table.items():
        if source.endswith("を食べなかった。"):
            assert "didn't eat" in target, (source, target)
        if source.endswith("くなかった。"):
            assert " wasn't " in target, (source, target)
        if source.startswith("明日、") and not source.endswith("か。"):
            assert target.endswith(" tomorrow.") and (" will " in target or " won't " in target)


def test_split_sizes(pairs):
    counts = {s: sum(p.split == s for p in pairs) for s in ("train", "dev", "test")}
    assert counts["train"] >= 20_000
    assert 500 <= counts["dev"] <= 2500 and 500 <= counts["test"] <= 2500, counts


def test_test_split_holds_combinations_unseen_in_train(pairs):
    train = [p for p in pairs if p.split == "train"]
    seen_combos = set().union(*(_combinations(p.words) for p in train))
    seen_words = set().union(*(p.words for p in train))
    for split in ("dev", "test"):
        for p in (p for p in pairs if p.split == split):
            assert _combinations(p.words) - seen_combos, p  # something new together
            assert p.words <= seen_words, p  # but every single word was seen
    test_sources = {p.source for p in pairs if p.split == "test"}
    assert not test_sources & {p.source for p in train}


def test_load_phrasebook_splits():
    splits = phrasebook.load_phrasebook(seed=3, size=1000)
    generated = phrasebook.generate_phrasebook(seed=3, size=1000)
    for name, split_pairs in splits.items():
        expected = {(p.source, p.target) for p in generated if p.split == name}
        assert set(split_pairs) == expected and len(split_pairs) == len(expected)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"seed": "0"}, "seed='0'"), ({"size": 10}, "size=10"), ({"size": 2.5e4}, "size=25000.0")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=re.escape(match)):
        phrasebook.generate_phrasebook(**kwargs)
