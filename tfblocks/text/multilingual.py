"""Several language pairs in one model: target tags, one shared vocabulary, pairs mixed by
temperature.

A multilingual model (Johnson et al. 2017, as the multilingual OPUS-MT models do) is one
encoder-decoder whose source starts with a tag naming the language to translate into
(M2M-100 and NLLB instead tag the source with its own language and force the target's
language token as the first output): `<2en> Guten Morgen.` asks for English, `<2fr> Guten Morgen.`
for French, also for a direction never trained (zero-shot). The tag is a user-defined
symbol of the shared SentencePiece model (`train_multilingual_tokenizer`), so it is one
piece and never split.

Each pair is read as `load_splits` reads one pair's `corpus_dir` (`load_language_pairs`);
a direction may be read the other way round from its reverse's folder (`en-de` from
`DIR/de-en`). `MixedPairs` mixes the pairs' training pairs inside `tf.data` by temperature
sampling: pair i is drawn with probability p_i ∝ n_i^(1/T) (`pair_shares`; T = 1 in
proportion to the pairs' sizes, a larger T flattens toward equal shares, as M2M-100 and
mBART do), and a pass (an epoch) is as many draws as there are training pairs in all.
"""

import dataclasses
import hashlib
import os
import random

import tensorflow as tf

from tfblocks import _checks
from tfblocks.text.corpus import check_language, load_splits

_TAG = "<2{}>"


def target_tag(language):
    """The tag that asks for `language`: `<2en>` for `en`.

    >>> target_tag("en")
    '<2en>'
    """
    return _TAG.format(check_language("language", language))


def vocabulary_tags(proto):
    """The languages whose tags (`target_tag`) the SentencePiece model `proto` (bytes)
    holds as user-defined pieces, sorted: those of a model of several directions,
    `[]` for a model of one.

    >>> pairs = (LanguagePair("de", "en", {"train": [("Guten Morgen", "Good morning")] * 9}),)
    >>> vocabulary_tags(train_multilingual_tokenizer(MixedPairs(pairs), vocab_size=40).proto)
    ['de', 'en']
    """
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    before, after = _TAG.split("{}")
    return sorted(
        piece.piece[len(before) : -len(after)]
        for piece in model.pieces
        if piece.type == piece.USER_DEFINED
        and piece.piece.startswith(before) and piece.piece.endswith(after)
        and len(piece.piece) > len(before) + len(after)
    )  # fmt: skip


def tag_source(text, language):
    """`text` with the tag of the target `language` in front.

    >>> tag_source("Guten Morgen.", "en")
    '<2en> Guten Morgen.'
    """
    return f"{target_tag(language)} {text}"


def tag_sources(texts, languages):
    """In a graph: `texts` `[B]` with the tags of `languages` (`[B]` codes, or one) in
    front, as `tag_source` puts them; no code is checked.

    >>> tag_sources(tf.constant(["Guten Morgen."]), "fr").numpy()
    array([b'<2fr> Guten Morgen.'], dtype=object)
    """
    before, after = _TAG.split("{}")
    return tf.strings.join([before, languages, after + " ", texts])


def parse_pairs(value, name="pairs"):
    """The `(source, target)` directions of `value`, `"de-en,fr-en,en-de"` (or a list of
    such names), in order; a ValueError naming `name` for a malformed, repeated or
    one-language direction. A language code holds no `-` here (`pt_BR`, not `pt-BR`).

    >>> parse_pairs("de-en,fr-en,en-de")
    (('de', 'en'), ('fr', 'en'), ('en', 'de'))
    """
    names = value.split(",") if isinstance(value, str) else list(value)
    directions = []
    for text in names:
        parts = text.strip().split("-") if isinstance(text, str) else []
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"`{name}` must be comma-separated directions such as de-en,fr-en (language "
                f"codes without '-'), got {name}={value!r}."
            )
        for part in parts:
            try:
                check_language(name, part)
            except ValueError:  # its words allow '-', which a direction cannot hold
                raise ValueError(
                    f"`{name}` must join two language codes with '-', each of letters, digits "
                    f"and _ starting with a letter (pt_BR, not pt-BR), got {part!r} in "
                    f"{name}={value!r}."
                ) from None
        if parts[0] == parts[1] or tuple(parts) in directions:
            raise ValueError(
                f"`{name}` must name distinct directions between two languages, got "
                f"{text.strip()!r} in {name}={value!r}."
            )
        directions.append(tuple(parts))
    if not directions:
        raise ValueError(f"`{name}` names no direction, got {name}={value!r}.")
    return tuple(directions)


def pair_name(source, target):
    """`"de-en"` for `("de", "en")`."""
    return f"{source}-{target}"


def pair_folder(corpus_dir, source, target):
    """The folder of the direction `source`→`target` under `corpus_dir`: `DIR/source-target`,
    else its reverse's `DIR/target-source` (read the other way round); a FileNotFoundError
    naming both otherwise."""
    for name in (pair_name(source, target), pair_name(target, source)):
        folder = os.path.join(corpus_dir, name)
        if os.path.isdir(folder):
            return folder
    raise FileNotFoundError(
        f"no folder for {source}-{target} in corpus_dir={os.fspath(corpus_dir)!r}: expected "
        f"{pair_name(source, target)}/ or {pair_name(target, source)}/ holding "
        f"{{train,dev,test}}.{{{source},{target}}}."
    )


@dataclasses.dataclass(frozen=True)
class LanguagePair:
    """One direction of a multilingual corpus: its languages and its untagged splits.

    Attributes:
        source: the source language.
        target: the target language (its tag is put in front of the sources).
        splits: `{"train", "dev", "test"}` lists of `(source, target)` pairs, untagged.
    """

    source: str
    target: str
    splits: dict

    @property
    def name(self):
        """`"de-en"`."""
        return pair_name(self.source, self.target)

    def tagged(self, split):
        """The `split`'s pairs with the target tag in front of each source."""
        return [(tag_source(s, self.target), t) for s, t in self.splits[split]]


def load_language_pairs(corpus_dir, directions, seed=0):
    """The `LanguagePair` of each direction, read with `load_splits` from its folder
    (`pair_folder`: a direction's own, or its reverse's read the other way round).

    Args:
        corpus_dir: the folder holding one folder per pair, `de-en/{train,dev,test}.{de,en}`.
        directions: `(source, target)` tuples or a string for `parse_pairs`.
        seed: as `load_splits`'.

    Returns:
        A tuple of `LanguagePair`, in the order of `directions`.

    Raises:
        FileNotFoundError: a direction has no folder, or a folder misses a file.
    """
    if isinstance(directions, str):
        directions = parse_pairs(directions)
    folders = [pair_folder(corpus_dir, s, t) for s, t in directions]  # all found first
    return tuple(
        LanguagePair(s, t, load_splits(folder, source=s, target=t, seed=seed))
        for (s, t), folder in zip(directions, folders, strict=True)
    )


def pair_shares(sizes, temperature=1.0):
    """The probabilities of temperature sampling: p_i ∝ n_i^(1/T) for pairs of `sizes` n_i.

    >>> [round(p, 3) for p in pair_shares([10_000, 1_000], 1.0)]
    [0.909, 0.091]
    >>> [round(p, 3) for p in pair_shares([10_000, 1_000], 5.0)]
    [0.613, 0.387]
    """
    temperature = _checks.check_positive_float("temperature", temperature)
    sizes = [_checks.check_positive_int("sizes", n) for n in sizes]
    weights = [n ** (1.0 / temperature) for n in sizes]
    return [w / sum(weights) for w in weights]


@dataclasses.dataclass(frozen=True)
class MixedPairs:
    """The training pairs of several directions, tagged and mixed by temperature sampling.

    What `make_dataset` trains a multilingual model on: `dataset(seed)` is one pass of
    `len(self)` tagged `(source, target)` string pairs drawn by
    `tf.data.Dataset.sample_from_datasets` from the directions' endless, shuffled streams
    with the probabilities `shares()`. Its number of batches is unknown to `tf.data`
    (as a streamed corpus's).

    Attributes:
        pairs: the `LanguagePair`s.
        temperature: T of p_i ∝ n_i^(1/T), > 0.

    Example:

    >>> pairs = (LanguagePair("de", "en", {"train": [("Hallo", "Hello")] * 3}),
    ...          LanguagePair("fr", "en", {"train": [("Salut", "Hi")]}))
    >>> mixed = MixedPairs(pairs, temperature=2.0)
    >>> len(mixed), mixed.summary()
    (4, 'de-en 3 pairs (63.4 %), fr-en 1 pairs (36.6 %); temperature 2.0')
    >>> sorted({s.numpy().decode()[:5] for s, _ in mixed.dataset(seed=0)})
    ['<2en>']
    """

    pairs: tuple
    temperature: float = 1.0

    def __post_init__(self):
        _checks.check_positive_float("temperature", self.temperature)
        if not self.pairs:
            raise ValueError("`pairs` holds no language pair.")
        for pair in self.pairs:
            if not pair.splits["train"]:
                raise ValueError(f"the train split of {pair.name} has no sentence pairs.")

    def __len__(self):
        return sum(len(pair.splits["train"]) for pair in self.pairs)

    @property
    def names(self):
        """The directions' names, `["de-en", ...]`."""
        return [pair.name for pair in self.pairs]

    @property
    def languages(self):
        """Every language of the directions, sorted."""
        return sorted({lang for pair in self.pairs for lang in (pair.source, pair.target)})

    @property
    def targets(self):
        """The target languages, sorted."""
        return sorted({pair.target for pair in self.pairs})

    def shares(self):
        """Each direction's probability of being drawn (`pair_shares`)."""
        return pair_shares([len(pair.splits["train"]) for pair in self.pairs], self.temperature)

    def summary(self):
        """One line: each direction's training pairs and share, and the temperature."""
        parts = [
            f"{pair.name} {len(pair.splits['train'])} pairs ({100 * share:.1f} %)"
            for pair, share in zip(self.pairs, self.shares(), strict=True)
        ]
        return f"{', '.join(parts)}; temperature {self.temperature}"

    def dataset(self, seed=None):
        """One pass: `len(self)` tagged `(source, target)` pairs, each drawn from direction
        i with probability `shares()[i]`, each direction's stream shuffled anew at each
        of its passes (seeded by `seed`, each direction its own)."""
        streams = []
        for index, pair in enumerate(self.pairs):
            tagged = pair.tagged("train")
            stream = tf.data.Dataset.from_tensor_slices(
                ([s for s, _ in tagged], [t for _, t in tagged])
            )
            stream = stream.shuffle(
                len(tagged), seed=None if seed is None else seed + 7919 * (index + 1)
            )  # reshuffled at each of the endless stream's passes
            streams.append(stream.repeat())
        mixed = tf.data.Dataset.sample_from_datasets(streams, weights=self.shares(), seed=seed)
        return mixed.take(len(self))

    def fingerprint(self):
        """A short SHA-256 of the directions, the temperature and their training pairs."""
        digest = hashlib.sha256(repr((self.names, self.temperature)).encode("utf-8"))
        for pair in self.pairs:
            for source, target in pair.splits["train"]:
                digest.update(source.encode("utf-8") + b"\t" + target.encode("utf-8") + b"\n")
        return digest.hexdigest()[:16]

    def tokenizer_lines(self, sample, seed=0):
        """A sample for the shared tokenizer balanced over languages: as many sentences
        of each language (at most `sample` // languages), its distinct training
        sentences drawn at random, or repeated in turn when it has fewer."""
        per_language = {}
        for pair in self.pairs:
            for side, language in enumerate((pair.source, pair.target)):
                sentences = per_language.setdefault(language, {})
                sentences.update(dict.fromkeys(p[side] for p in pair.splits["train"]))
        share = _checks.check_positive_int("sample", sample) // len(per_language)
        count = max(1, min(share, max(len(s) for s in per_language.values())))
        rng = random.Random(seed)
        lines = []
        for language in sorted(per_language):
            sentences = list(per_language[language])
            if len(sentences) >= count:
                lines += rng.sample(sentences, count)
            else:
                lines += [sentences[i % len(sentences)] for i in range(count)]
        return lines


def train_multilingual_tokenizer(mixed, vocab_size, model_type="unigram", *, sample=1_000_000,
                                 seed=0, **kwargs):  # fmt: skip
    """The shared tokenizer of a `MixedPairs`: trained on `mixed.tokenizer_lines(sample,
    seed)` with the tag of every language (`target_tag`) as a user-defined symbol, one
    piece that is never split (zero-shot directions into a language that is only a
    source have theirs too). `kwargs` go to `train_tokenizer`.

    >>> pairs = (LanguagePair("de", "en", {"train": [("Guten Morgen", "Good morning")] * 9}),)
    >>> tokenizer = train_multilingual_tokenizer(MixedPairs(pairs), vocab_size=40)
    >>> import sentencepiece
    >>> processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    >>> "<2de>" in processor.encode("<2de> Good morning", out_type=str)
    True
    """
    from tfblocks.text.tokenizers import train_tokenizer

    options = dict(kwargs.pop("trainer_options", None) or {})
    options["user_defined_symbols"] = [target_tag(lang) for lang in mixed.languages]
    return train_tokenizer(
        mixed.tokenizer_lines(sample, seed), vocab_size, model_type,
        trainer_options=options, **kwargs,
    )  # fmt: skip
