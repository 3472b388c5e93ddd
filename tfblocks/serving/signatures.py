"""The graph side of `Translator`: the SavedModel signatures and the tokenization they share.

`TranslatorSignatures` holds every `tf.function` of a `Translator`: the signatures it
exports (their list is in `tfblocks.serving.savedmodel`'s docstring) and those only its
Python calls use (a target prefix with constraints, `replace_unknowns`), with the
encoding of sources, prefixes and targets they run in the graph. `Translator` adds its
constructor and the Python API (`translator(texts)`, `n_best`, `score`, `align`), which
calls them.
"""

import tensorflow as tf

from tfblocks.decoding import alignment
from tfblocks.decoding.constrained import check_phrases
from tfblocks.ids import EOS_ID, PAD_ID
from tfblocks.serving import unknowns
from tfblocks.serving.constraints import (
    CONSTRAINTS,
    check_phrase_table,
    constrained_search,
    encode_phrases,
    phrase_batch,
    phrase_table,
)
from tfblocks.serving.languages import with_source_code
from tfblocks.serving.text_module import (
    TEXT,
    TextModule,
    batch_input,
    blank_lines,
    check_pairs,
    check_text_batch,
    text_spec,
)
from tfblocks.text.multilingual import tag_sources

# The most subwords (EOS included) a target may hold in `score`: a target is scored whole,
# and self-attention over T positions holds B × heads × T² values, so one long line could
# exhaust the memory; a longer one fails the call with an error naming `target`.
MAX_SCORE_LENGTH = 1024
# The string inputs of the signatures besides `TEXT`.
_SOURCE = text_spec("source")
_TARGET = text_spec("target")
_TARGET_PREFIX = text_spec("target_prefix")
_TARGET_LANG = text_spec("target_lang")
_SOURCE_LANG = text_spec("source_lang")


def _check_same_batch(first, second, names):
    """In a signature's graph: a check that the string batches `first` and `second`
    (called `names`) hold as many strings."""
    tf.debugging.assert_equal(
        tf.shape(first)[0], tf.shape(second)[0],
        message=f"`{names[0]}` and `{names[1]}` must hold as many strings",
    )  # fmt: skip


def _pad_to_bucket(ids, buckets):
    """`ids` `[B, n]` padded to the first of `buckets` that holds n (n itself when none
    does, or when `buckets` is None)."""
    if buckets is None:
        return ids
    buckets = tf.constant(buckets, tf.int32)
    longest = tf.shape(ids)[1]
    fits = buckets >= longest
    first = tf.gather(buckets, tf.argmax(tf.cast(fits, tf.int32)))
    length = tf.where(tf.reduce_any(fits), first, longest)
    return tf.pad(ids, [[0, 0], [0, length - longest]])  # [B, bucket]


class TranslatorSignatures(TextModule):
    """The `tf.function`s of `Translator` (its signatures) and the encoding they run.

    A base class of `Translator` only: its methods read what `Translator.__init__`
    stores (`model`, `search`, the tokenizers, `max_length`, `num_hypotheses`,
    `source_buckets`, `extra_length`, `target_lang`, `alignment_layer`, the `Decoder`).
    Every translation, in Python or in a loaded SavedModel, runs through one of these
    functions, so each exists once.

    >>> import tfblocks
    >>> issubclass(tfblocks.Translator, TranslatorSignatures)
    True
    """

    def encode_source(self, text, target_lang=None, source_code=None):
        """Source ids `[B, S]` (0-padded, EOS-terminated), S from `source_buckets`.

        S is the first bucket that holds the batch's longest source (or that length
        itself when `source_buckets` is None); at most `max_length`. `target_lang`
        (`[B]` codes; None: the translator's `target_lang`, if any) puts the tags of
        the target languages in front of the texts; `source_code` (`[B]`; None: the
        translator's `language_tokens`' code, if any), the source language's token.
        """
        target_lang = self.target_lang if target_lang is None else target_lang
        if target_lang is not None:
            text = tag_sources(text, target_lang)
        source_code = self.source_code if source_code is None else source_code
        if source_code is not None:  # M2M-100 / NLLB: the source language's token
            text = with_source_code(text, source_code)
        ids = self.source_tokenizer.tokenize(text)  # ragged [B, (n)], ends with EOS
        ids = ids[:, :-1][:, : self.max_length - 1]  # [B, (≤ max_length − 1)]
        eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(text)[0], 1], EOS_ID))
        ids = tf.concat([ids, eos], axis=1).to_tensor(default_value=PAD_ID)  # [B, longest]
        return _pad_to_bucket(ids, self.source_buckets)

    def encode_prefix(self, text):
        """Target prefix ids `[B, P]` (0-padded, no EOS), never cut: a prefix that
        leaves no room for EOS in the search's length is refused by the decoder (a call
        of the signature fails with an InvalidArgumentError that names both lengths);
        an empty (or blank) prefix is a row of PAD (with `language_tokens`, the forced
        target language token, then the prefix's ids)."""
        ids = self.target_tokenizer.tokenize(text)[:, :-1]
        if self.forced_start is not None:
            start = tf.fill([tf.shape(text)[0], 1], self.forced_start)
            ids = tf.concat([tf.RaggedTensor.from_tensor(start), ids], axis=1)
        return ids.to_tensor(default_value=PAD_ID)

    def _start(self, text):
        """The prefix ids `[B, 1]` of a batch `text` decoded without a prefix: the forced
        target language token (`language_tokens`), or None (nothing forced)."""
        if self.forced_start is None:
            return None
        return tf.fill([tf.shape(text)[0], 1], self.forced_start)

    def encode_target(self, text):
        """Target ids `[B, T]` (0-padded, EOS-terminated, never truncated), T the first
        of `source_buckets` that holds the longest (or that length when none does)."""
        ids = self.target_tokenizer.tokenize(text).to_tensor(default_value=PAD_ID)
        return _pad_to_bucket(ids, self.source_buckets)

    def _signatures(self):
        signatures = {
            "serving_default": self.serve,
            "score": self.serve_score,
            "prefix": self.serve_prefix,
        }
        if self.num_hypotheses > 1:
            signatures["n_best"] = self._optional("n_best", self._n_best, [TEXT])
        if self.alignments:
            signatures["align"] = self._optional("align", self._align, [_SOURCE, _TARGET])
        if self.multilingual:
            signatures["target"] = self.serve_target()
        if self.constrained:
            signatures["constrained"] = self._constrained_signature()
        if self._language_table is not None:
            signatures["languages"] = self._languages_signature()
        return signatures

    @tf.function(input_signature=[TEXT], autograph=False)
    def serve(self, text):
        """The `serving_default` signature: `{"translation", "score"}` for a batch."""
        return self._translate_text(text)

    def serve_target(self):
        """The `target` signature (`multilingual`), a `tf.function` made on first use (an
        optional signature: `_optional`; a method, so that saving does not make it)."""
        return self._optional("target", self._serve_target, [TEXT, _TARGET_LANG])

    def _serve_target(self, text, target_lang):
        """`{"translation", "score"}` of each text into its `target_lang` (a code such as
        `fr`; zero-shot directions too)."""
        target_lang = batch_input(target_lang, "target_lang")
        _check_same_batch(batch_input(text, "text"), target_lang, ("text", "target_lang"))
        return self._translate_text(text, target_lang)

    def serve_languages(self, text, source_lang, target_lang):
        """The `languages` signature (`Translator(languages=...)`): `{"translation",
        "score"}` of each text from its `source_lang` into its `target_lang` (codes of
        the model, `[B]` each)."""
        return self._languages_signature()(text, source_lang, target_lang)

    def _languages_signature(self):
        return self._optional(
            "languages", self._serve_languages, [TEXT, _SOURCE_LANG, _TARGET_LANG]
        )

    def _serve_languages(self, text, source_lang, target_lang):
        text = batch_input(text, "text")
        source_lang = batch_input(source_lang, "source_lang")
        target_lang = batch_input(target_lang, "target_lang")
        _check_same_batch(text, source_lang, ("text", "source_lang"))
        _check_same_batch(text, target_lang, ("text", "target_lang"))
        source_code, _ = self._language_table.lookup(source_lang, "source_lang")
        _, target_id = self._language_table.lookup(target_lang, "target_lang")
        return self._translate_text(text, source_code=source_code, start=target_id[:, None])

    def _translate_text(self, text, target_lang=None, source_code=None, start=None):
        """`{"translation", "score"}` of the batch `text`, into `target_lang` (`[B]`), or
        from the language tokens `source_code` (`[B]`) with each translation started
        by its row of `start` (`[B, 1]` ids; None: the translator's)."""
        text = batch_input(text, "text")
        blank = blank_lines(text)
        # A blank line is decoded as "" (cheap, and it never lengthens its batch's padding).
        source = self.encode_source(tf.where(blank, "", text), target_lang, source_code)
        start = self._start(text) if start is None else start
        # With jit_compile the decoder runs its own nested XLA-compiled function;
        # without, the search is traced inline into this signature's graph.
        ids, scores = self._decoder.decode(
            self.search, source, start, extra_length=self.extra_length
        )
        translation = self.target_tokenizer.detokenize(ids)
        return {
            "translation": tf.where(blank, "", translation),
            "score": tf.where(blank, 0.0, scores),
        }

    def serve_n_best(self, text):
        """The `n_best` signature: `{"translations", "scores"}`, `[B, num_hypotheses]`."""
        return self._optional("n_best", self._n_best, [TEXT])(text)

    @tf.function(input_signature=[TEXT, _TARGET_PREFIX], autograph=False)
    def serve_prefix(self, text, target_prefix):
        """The `prefix` signature: each translation starts with its `target_prefix`
        ("" forces nothing): `{"translation" [B], "score" [B], "translations" [B, K],
        "scores" [B, K]}` (K = `num_hypotheses`; the first column is the translation)."""
        text, target_prefix = batch_input(text, "text"), batch_input(target_prefix, "target_prefix")
        _check_same_batch(text, target_prefix, ("text", "target_prefix"))
        out = self._n_best(text, self.encode_prefix(target_prefix))
        return {"translation": out["translations"][:, 0], "score": out["scores"][:, 0], **out}

    def serve_constrained(self, text, constraints):
        """The `constrained` signature: each translation holds the phrases of its row of
        `constraints` (`tf.string [B, C]`, "" for none): `{"translation" [B], "score" [B],
        "translations" [B, K], "scores" [B, K]}` as the `prefix` signature's."""
        return self._constrained_signature()(text, constraints)

    def _constrained_signature(self):
        return self._optional("constrained", self._constrained_prefix, [TEXT, CONSTRAINTS])

    def _constrained_prefix(self, text, constraints, target_prefix=None):
        """`serve_constrained`, each translation also starting with its `target_prefix`
        (None: none)."""
        text = batch_input(text, "text")
        constraints = phrase_batch(constraints, "constraints")
        _check_same_batch(text, constraints, ("text", "constraints"))
        if target_prefix is not None:
            target_prefix = batch_input(target_prefix, "target_prefix")
            _check_same_batch(text, target_prefix, ("text", "target_prefix"))
            target_prefix = self.encode_prefix(target_prefix)
        phrases = encode_phrases(self.target_tokenizer, constraints, self.max_length)
        out = self._n_best(text, target_prefix, phrases)
        return {"translation": out["translations"][:, 0], "score": out["scores"][:, 0], **out}

    def _n_best(self, text, prefix=None, phrases=None, replacing=False):
        """`{"translations", "scores"}` `[B, num_hypotheses]` of `text`, each translation
        starting with its row of `prefix` ids (None: no prefix) and holding the phrases
        of its row of `phrases` ids `[B, C, T]` (None: none); `replacing` adds their
        `"ids"` `[B, K, L]` and each id's `"aligned"` source subword `[B, K, L]`."""
        k = self.num_hypotheses
        text = batch_input(text, "text")  # the `n_best` signature's input
        blank = blank_lines(text)
        source = self.encode_source(tf.where(blank, "", text))
        prefix = self._start(text) if prefix is None else prefix
        search = self.search if phrases is None else constrained_search(self.search)
        ids, scores = self._decoder.decode(
            search,
            source,
            prefix,
            extra_length=self.extra_length,
            num_hypotheses=k,
            constraints=phrases,
        )  # [B, K, L], [B, K]
        texts = self.target_tokenizer.detokenize(tf.reshape(ids, [-1, tf.shape(ids)[2]]))
        texts = tf.reshape(texts, [-1, k])  # [B, K]
        out = {
            "translations": tf.where(blank[:, None], "", texts),
            "scores": tf.where(blank[:, None], 0.0, scores),
        }
        if replacing:
            layer = self.alignment_layer
            out["aligned"] = unknowns.aligned_sources(self.model, layer, source, ids)
            out["ids"] = ids
        return out

    def _translate(self, texts, target_prefix, constraints):
        """The `prefix` signature's outputs for `texts` with a `target_prefix` and/or
        `constraints` (see `n_best`), checked here (a ValueError naming the argument)."""
        if target_prefix is None:
            texts = check_text_batch(texts)
        else:
            texts, target_prefix = check_pairs(texts, target_prefix, ("texts", "target_prefix"))
        if constraints is None:
            return self.serve_prefix(texts, target_prefix)
        constrained_search(self.search)  # a beam search, else a ValueError naming it
        table = phrase_table(constraints, texts.shape[0])
        # With `language_tokens` the forced token takes one place before the phrases.
        room = self.max_length - (self.forced_start is not None)
        check_phrase_table(self.target_tokenizer, table, room)
        if target_prefix is None:
            return self.serve_constrained(texts, table)
        # Eagerly, as the search would where the ids are known: room for each phrase
        # after its prefix (in the graph the ids are not known).
        phrases = encode_phrases(self.target_tokenizer, table, self.max_length).numpy()
        prefixes = self.encode_prefix(target_prefix).numpy()
        check_phrases(phrases, self.max_length, EOS_ID, PAD_ID, prefixes)
        with_prefix = self._optional(
            "constrained_prefix", self._constrained_prefix, [TEXT, CONSTRAINTS, _TARGET_PREFIX]
        )
        return with_prefix(texts, table, target_prefix)

    def _replacing(self, texts, target_prefix):
        """`_n_best(..., replacing=True)` of `texts` (and their `target_prefix`)."""
        if self.alignment_layer is None:
            raise ValueError("An Ensemble has no one cross-attention to align with: replace "
                             "unknowns with a Translator of one of its models.")  # fmt: skip
        if target_prefix is None:
            fn = lambda text: self._n_best(text, replacing=True)  # noqa: E731
            return self._optional("n_best_replacing", fn, [TEXT])(texts)

        def with_prefix(text, prefix):
            return self._n_best(text, self.encode_prefix(prefix), replacing=True)

        return self._optional("prefix_replacing", with_prefix, [TEXT, _TARGET_PREFIX])(
            texts, target_prefix
        )

    @tf.function(input_signature=[_SOURCE, _TARGET], autograph=False)
    def serve_score(self, source, target):
        """The `score` signature: `{"score" [B], "token_scores" [B, T], "length" [B]}`:
        each target's log-probability, its per-token values (0 after its EOS) and its
        number of tokens (EOS included)."""
        source, target = batch_input(source, "source"), batch_input(target, "target")
        _check_same_batch(source, target, ("source", "target"))
        target_ids = self.encode_target(target)  # [B, T]
        too_long = f"`target` may hold at most {MAX_SCORE_LENGTH} subwords (EOS included), got"
        fits = tf.shape(target_ids)[1] <= MAX_SCORE_LENGTH
        with tf.control_dependencies(
            [tf.debugging.Assert(fits, [too_long, tf.shape(target_ids)[1]])]
        ):
            target_ids = tf.identity(target_ids)
        start = self._start(target)
        if start is None:
            token_scores = self._decoder.score(self.encode_source(source), target_ids)
        else:  # the forced language token first, its log-probability left out (0)
            with_start = tf.concat([start, target_ids], axis=1)
            token_scores = self._decoder.score(self.encode_source(source), with_start)[:, 1:]
        return {
            "score": tf.reduce_sum(token_scores, axis=1),
            "token_scores": token_scores,
            "length": tf.reduce_sum(tf.cast(tf.not_equal(target_ids, PAD_ID), tf.int32), axis=1),
        }

    def serve_align(self, source, target):
        """The `align` signature: `{"alignment" [B]}`, each pair's word alignment in
        Pharaoh format (`align`)."""
        return self._optional("align", self._align, [_SOURCE, _TARGET])(source, target)

    def _align(self, source, target):
        source, target = batch_input(source, "source"), batch_input(target, "target")
        _check_same_batch(source, target, ("source", "target"))
        blank = blank_lines(source)
        source_ids = self.encode_source(tf.where(blank, "", source))
        target_ids = self.encode_target(target)
        links = alignment.align(
            self.model, self.alignment_layer, source_ids, target_ids, *self._word_starts
        )
        return {"alignment": links}
