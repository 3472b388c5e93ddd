"""`Translator`: raw strings in, translations out, as a `tf.Module` and a SavedModel.

`Translator` wraps an encoder–decoder (`build_transformer`) and decodes with a search
of `tfblocks.decoding` (`search=`; t2t's beam search by default) through
`tfblocks.decoding.Decoder`; `tfblocks.serving.generator.Generator` does the same for a
decoder-only language model, and both export with `export(path)`
(`tfblocks.serving.text_module.TextModule`).

The exported SavedModel needs only TensorFlow and tensorflow-text's ops (import
`tensorflow_text` before loading it): the SentencePiece models travel inside it as
graph constants, the decoding loop is XLA-compiled (`jit_compile`), and the signatures
(`tfblocks.serving.signatures`) are

    serving_default(text: tf.string [None]) -> {"translation": tf.string [None],
                                                "score": tf.float32 [None]}
    score(source: tf.string [None], target: tf.string [None])
        -> {"score": tf.float32 [None], "token_scores": tf.float32 [None, None],
            "length": tf.int32 [None]}
    prefix(text: tf.string [None], target_prefix: tf.string [None])
        -> {"translation": tf.string [None], "score": tf.float32 [None],
            "translations": tf.string [None, K], "scores": tf.float32 [None, K]}
    n_best(text: tf.string [None]) -> {"translations": tf.string [None, K],
                                       "scores": tf.float32 [None, K]}
    align(source: tf.string [None], target: tf.string [None])
        -> {"alignment": tf.string [None]}
    constrained(text: tf.string [None], constraints: tf.string [None, C])
        -> {"translation": tf.string [None], "score": tf.float32 [None],
            "translations": tf.string [None, K], "scores": tf.float32 [None, K]}
    languages(text: tf.string [None], source_lang: tf.string [None],
              target_lang: tf.string [None])
        -> {"translation": tf.string [None], "score": tf.float32 [None]}

(`n_best` only with `Translator(num_hypotheses=K)`, K > 1; `align`, word alignments in
Pharaoh format (`tfblocks.decoding.alignment`), only with `Translator(alignments=True)`;
`constrained`, translations that hold each row's target phrases (`""` pads a row), only
with `Translator(constrained=True)`: `tfblocks.serving.constraints`; `languages`, each
text in its own direction, only with `Translator(language_tokens=..., languages=...)`,
an imported M2M-100 / NLLB model.)

Input handling: a source longer than `max_length` subwords is truncated to its first
`max_length - 1` subwords plus EOS; a blank string (empty, or only Unicode whitespace:
spaces, tabs, U+00A0, U+3000, U+2028, …, what Python's `str.strip()` removes)
translates to an empty string with score 0 (each of its `n_best` rows too), in the
graph (`tfblocks.serving.text_module.BLANK`), as `CTranslate2Translator` does. Scoring
has no such rule: a blank source or target is scored like any other (an empty target is
its EOS alone), and a target is never truncated. A target prefix is tokenized as a
target (without EOS) and never cut: one of `max_length` subwords or more (no room for
EOS) fails the call with an InvalidArgumentError that names both lengths; its subwords
are forced, and count in the score as `score(source, translation)` counts them.
Each string input is a batch `[B]`: another rank (a scalar, `[B, 1]`) fails the call
with an InvalidArgumentError naming the input
(`tfblocks.serving.text_module.batch_input`).

Speed (`Translator`): a batch's sources are padded to the first of a few length buckets
that holds its longest source (`source_buckets`, by default 8, 16, 32, … up to
`max_length`), not to `max_length`, so the encoder and every cross-attention step work
on little padding while XLA compiles one program per (batch size, bucket). Padding
is masked, so the bucket does not change the translation (tests compare bucketed with
padded-to-`max_length` ids). The decoder's self-attention caches start at 16
positions and grow to 32, 64, … only when a batch's outputs get that long
(`cache_lengths`). A batch generates at most `min(max_length, S +
extra_length)` tokens (t2t's `decode_length`, S the padded source length) when
`extra_length` is given, which sizes the self-attention caches and bounds beam
search's stopping test.
It is off by default (`extra_length=None`: up to `max_length`), because S depends on
the batch's longest source, so the limit — and so a long translation — would depend on
the sentence's batch mates. The loop stops as soon as every sentence ended, and the
search drops a sentence from the batch once its search has ended: it runs in segments,
each its own XLA program (with `jit_compile`), and between them the batch shrinks
to the power of two that holds the sentences still searching, never below 16 rows
(4 sentences of beam 4, 16 of greedy): few sizes, so few programs to compile
(`drop_finished=False`: one search over the whole batch; the translations are the same).

TF Serving: export into a numbered version folder (`translator.export("…/export/1")`;
TF Serving loads the highest number under the model's base path). TF Serving runs
XLA-compiled functions only with `--xla_cpu_compilation_enabled`; export with
`Translator(..., jit_compile=False)` for a SavedModel without them.
"""

import numpy as np
import tensorflow as tf

from tfblocks import _backend, _checks
from tfblocks.decoding import BeamSearch, alignment
from tfblocks.serving import unknowns
from tfblocks.serving.constraints import constrained_search
from tfblocks.serving.hypothesis import Hypothesis
from tfblocks.serving.languages import language_table, language_tokens_of, unknown_code

# `MAX_SCORE_LENGTH` is documented as `tfblocks.serving.savedmodel.MAX_SCORE_LENGTH`.
from tfblocks.serving.signatures import MAX_SCORE_LENGTH as MAX_SCORE_LENGTH
from tfblocks.serving.signatures import TranslatorSignatures
from tfblocks.serving.text_module import check_pairs, check_text_batch
from tfblocks.text.multilingual import target_tag


def _source_buckets(source_buckets, max_length):
    """The padded source lengths, increasing, ending with `max_length`; None = exact."""
    return _checks.length_ladder("source_buckets", source_buckets, max_length, first=8)


class Translator(TranslatorSignatures):
    """Translates a batch of strings with a trained `build_transformer` model.

    Args:
        model: the trained model, or a `tfblocks.Ensemble` of models (one SavedModel
            holds them all).
        source_tokenizer: a `tfblocks.text.SubwordTokenizer` for the source language.
        target_tokenizer: the target language's tokenizer (the same object for a
            shared vocabulary).
        max_length: the most subwords read from a source sentence and generated for
            a translation (EOS included).
        search: a `tfblocks.decoding` search; default
            `BeamSearch(beam_size=4, alpha=0.6)` (t2t's), `Greedy()` for greedy.
        jit_compile: compile the decoding loop with XLA (a nested function of the
            signature); False traces it inline into the signature's own graph (for TF
            Serving without `--xla_cpu_compilation_enabled`).
        source_buckets: the lengths a batch's sources are padded to (the first that
            holds the batch's longest source): `"auto"` (8, 16, 32, … up to
            `max_length`), a tuple of increasing lengths (`max_length` is appended),
            `(max_length,)` for the fixed padding of earlier versions, or None for the
            batch's own longest length (fewest positions, but one XLA program per
            length).
        extra_length: t2t's `extra_length`: a batch generates at most
            `min(max_length, S + extra_length)` tokens, S its padded source length
            (the self-attention caches are that long, and beam search's stopping
            test uses it); None (default) = `max_length` for every batch. Since S
            depends on the batch's longest source, a limit set here makes a long
            translation depend on its batch mates (as in t2t).
        cache_lengths: the sizes the decoder's self-attention caches grow through
            (`tfblocks.Decoder`): `"auto"` (16, 32, 64, … up to `max_length`), a tuple,
            or None for one cache of `max_length`. Does not change the translations.
        drop_finished: sentences whose search (greedy or beam) has ended leave the
            batch (`tfblocks.Decoder`); False searches the whole batch to the end.
            Does not change the translations.
        num_hypotheses: K, the translations `n_best` returns per text (at most the
            beam size; 1 for `Greedy`; any number of `Sampling`'s samples). With K > 1
            the SavedModel also has an `n_best` signature. Calling the translator
            still returns the best translation only.
        alignment_layer: the decoder layer whose cross-attention (averaged over its
            heads) `align` reads: an int (negative counts from the last), or None for
            the penultimate layer (`tfblocks.decoding.alignment`).
        alignments: the SavedModel also has an `align` signature (`align` works
            either way; the signature costs a few seconds of export).
        target_lang: a model of several directions (`tfblocks.text.multilingual`):
            the language every source is translated into (its tag `<2xx>` is put in
            front of each); None: the sources are taken as they are (tagged or not).
        multilingual: the SavedModel also has a `target` signature whose
            `target_lang` input (a code per text) names each text's target language.
        constrained: the SavedModel also has a `constrained` signature (calls with
            `constraints=` work either way); `search` must be a beam search.
        language_tokens: a model that names languages by tokens (M2M-100, NLLB:
            `tfblocks.models.m2m100`): `(source_code, target_id)`, the source language's
            code, written before each source text (a tag of the source tokenizer), and
            the target language token's id, which every translation is made to start
            with before its prefix (Hugging Face's `forced_bos_token_id`; a control piece
            of the target tokenizer, so the text leaves it out; its log-probability
            counts 0 in every score, `Decoder(forced_first=True)`). None: neither.
        languages: with `language_tokens`, every code of the model and its token's id
            (`M2M100Import.languages`, e.g. `{"__de__": 128020, ...}`): the SavedModel
            also has a `languages` signature, and `translator(texts, source_lang=...,
            target_lang=...)` translates in any direction (M2M-100's codes also as
            plain `de`).
        controls: a `tfblocks.decoding.Controls`: what every translation must respect
            (`min_length` tokens at least, no `<unk>` with `disallow_unk`, at most
            `max_length_ratio` × its source's subwords + 10 tokens), in every signature
            that decodes; None: none. `score` scores with the model alone.
        name: the module's name.

    Besides translating (`translator(texts)`), it returns the n best translations
    (`n_best(texts)`), scores given translations (`score(sources, targets)`) and aligns
    their words (`align(sources, targets)`). Both
    `translator(texts, target_prefix=...)` and `n_best` take a target prefix per text:
    each translation starts with its prefix's subwords (forced), then decodes freely; an
    empty prefix forces nothing. With `replace_unknowns=True` both replace each unknown
    subword (`<unk>`) of a translation by the source word it is aligned to
    (`tfblocks.serving.unknowns`; not for an Ensemble). Both also take `constraints`, a
    list of target phrases per text (`[["curry"], []]`): each translation holds each of
    its text's phrases (a `tfblocks.decoding.ConstrainedBeamSearch` with the options of
    `search`, which must be a beam search; without constraints it translates as `search`
    does; not with `replace_unknowns`).

    Example (training elided; any `build_transformer` model works):

    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 20,
    ...                       vocab_size=40)
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size)
    >>> translator = Translator(tfblocks.build_transformer(hp), tok, tok, max_length=8)
    >>> translator(["今日のランチはカレーだ。", ""]).shape
    TensorShape([2])
    >>> translator.score(["今日のランチはカレーだ。"], ["Today's lunch is curry."]).shape
    (1,)
    >>> translator(["今日のランチはカレーだ。"], target_prefix=["Today"]).shape
    TensorShape([1])
    """

    OUTPUT = "translation"
    ENCODER_DECODER = True

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        max_length=64,
        search=None,
        jit_compile=True,
        source_buckets="auto",
        extra_length=None,
        cache_lengths="auto",
        drop_finished=True,
        num_hypotheses=1,
        alignment_layer=None,
        alignments=False,
        target_lang=None,
        multilingual=False,
        constrained=False,
        language_tokens=None,
        languages=None,
        controls=None,
        name=None,
    ):
        _backend.require_tensorflow("Translator")
        super().__init__(name=name)
        search = BeamSearch() if search is None else search
        self._set_decoding(
            model, ("target_tokenizer", target_tokenizer), max_length, search, jit_compile,
            cache_lengths=cache_lengths, drop_finished=drop_finished,
            forced_first=language_tokens is not None, controls=controls,
        )  # fmt: skip
        self.controls = self._decoder.controls
        self.source_code, self.forced_start = language_tokens_of(language_tokens, model.vocab_size)
        self._language_table = language_table(
            languages, self.source_code, self.forced_start, model.vocab_size
        )
        self.drop_finished = self._decoder.drop_finished
        self.num_hypotheses = self.search.check_num_hypotheses(num_hypotheses)
        self.source_buckets = _source_buckets(source_buckets, max_length)
        self.extra_length = (
            None
            if extra_length is None
            else _checks.check_non_negative_int("extra_length", extra_length)
        )
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.alignments = _checks.check_bool("alignments", alignments)
        self.target_lang = None if target_lang is None else target_tag(target_lang)[2:-1]
        self.multilingual = _checks.check_bool("multilingual", multilingual)
        self.constrained = _checks.check_bool("constrained", constrained)
        if self.forced_start is not None and (target_lang, multilingual, alignments) != (
            None,
            False,
            False,
        ):
            raise ValueError(
                "`language_tokens` name the direction by the model's own tokens: not with "
                f"target_lang={target_lang!r}, multilingual={multilingual!r} or "
                f"alignments={alignments!r} (not there yet for such models)."
            )
        if self.constrained:
            constrained_search(self.search)  # a beam search, else a ValueError naming it
        layers = getattr(model, "num_decoder_layers", None)  # None: an Ensemble
        if layers is None and (alignments or alignment_layer is not None):
            raise ValueError(
                "An Ensemble has no one cross-attention to align with: align with one of its "
                f"models, got alignments={alignments!r}, alignment_layer={alignment_layer!r}."
            )
        self.alignment_layer = (
            None if layers is None else alignment.alignment_layer(alignment_layer, layers)
        )
        self._word_starts = [
            alignment.tokenizer_word_starts(tokenizer, model.vocab_size)
            for tokenizer in (source_tokenizer, target_tokenizer)
        ]  # [V] bool each

    def _check_language_tokens(self, **options):
        """Refuses (ValueError naming them) the given `options` a translator with
        `language_tokens` does not handle yet (their word positions, tags and language
        choice would be off by the language tokens)."""
        given = {name: value for name, value in options.items() if value not in (None, False)}
        if self.forced_start is not None and given:
            listed = ", ".join(f"{name}={value!r}" for name, value in given.items())
            raise ValueError(
                f"A translator with `language_tokens` (M2M-100 / NLLB) does not take {listed} "
                "yet; drop it."
            )

    def export_litert(self, path, quantization=None, beam_size=None, target_lang=None):
        """Writes this translator as one LiteRT (TFLite) file, strings in and out:
        `serving_default(text) -> {"translation", "score"}`, for the `ai-edge-litert`
        interpreter on a phone or in Python (`tfblocks.serving.litert`).

        Args:
            path: the `.tflite` file to write (replaced if it exists; a failed export
                leaves nothing).
            quantization: None (float32 weights), `"dynamic"` (int8 weights) or
                `"float16"`.
            beam_size: None for this translator's search (greedy or beam search), or
                the beam size of the file's beam search (1: greedy search).
            target_lang: a model of several directions: the one language the file
                translates into (recorded in the file's metadata); None: this
                translator's `target_lang`, required for such a model.

        Returns:
            `path`, absolute.

        Raises:
            ValueError: before anything is written, for an Ensemble, a sampling
                search, a `max_length` beyond the model's position table, an unknown
                `quantization`, a BPE tokenizer (the file's tokenizer implements
                unigram only), a model of several directions without `target_lang`, or
                one with `language_tokens`.
        """
        from tfblocks.serving.litert import export_litert

        if self.forced_start is not None:
            raise ValueError(
                "A LiteRT file of a model with language tokens (M2M-100 / NLLB, "
                "`language_tokens`) cannot be written yet: its tokenizer is BPE, which a "
                "LiteRT file's tokenizer does not implement. Serve the SavedModel instead."
            )
        return export_litert(
            self, path, quantization=quantization, beam_size=beam_size, target_lang=target_lang
        )

    def __call__(
        self, texts, target_prefix=None, replace_unknowns=False, constraints=None,
        target_lang=None, source_lang=None,
    ):  # fmt: skip
        """Translations of `texts` (a list of str or a 1-D string tensor), a string
        tensor; with `target_prefix` (as many str), each starts with its prefix; with
        `replace_unknowns`, the first of `n_best(..., replace_unknowns=True)`'s; with
        `constraints` (a list of str phrases per text), each holds its text's phrases;
        with `target_lang` (a code), into that language (the model's tag `<2xx>`; with
        `languages`, the model's token, and `source_lang` the source's code)."""
        if self._language_table is not None and (source_lang, target_lang) != (None, None):
            return self._in_direction(texts, source_lang, target_lang, target_prefix,
                                      replace_unknowns, constraints)  # fmt: skip
        if source_lang is not None:
            raise ValueError(
                "`source_lang` chooses the source language of a translator with `languages` "
                f"(M2M-100 / NLLB); this one has none, got source_lang={source_lang!r}."
            )
        self._check_language_tokens(target_lang=target_lang, replace_unknowns=replace_unknowns)
        if target_lang is not None:
            if target_prefix is not None or replace_unknowns or constraints is not None:
                raise ValueError(
                    "`target_lang` translates plainly: not with `target_prefix`, "
                    f"`replace_unknowns` or `constraints`, got target_lang={target_lang!r}."
                )
            texts = check_text_batch(texts)
            language = target_tag(target_lang)[2:-1]
            return self.serve_target()(texts, tf.fill(tf.shape(texts), language))["translation"]
        if replace_unknowns:
            best = [row[0].text for row in self.n_best(texts, target_prefix, True, constraints)]
            return tf.constant(best, tf.string)
        if target_prefix is None and constraints is None:
            return super().__call__(texts)
        return self._translate(texts, target_prefix, constraints)["translation"]

    def _in_direction(self, texts, source_lang, target_lang, *options):
        """`translator(texts, source_lang=..., target_lang=...)` of a translator with
        `languages`: the `languages` signature, every text in that direction (None:
        the translator's own source or target)."""
        if any(option not in (None, False) for option in options):
            raise ValueError(
                "`source_lang` / `target_lang` translate plainly: not with `target_prefix`, "
                "`replace_unknowns` or `constraints` (make a Translator with that "
                "direction's `language_tokens` for those)."
            )
        texts = check_text_batch(texts)
        table = self._language_table
        for name, code in (("source_lang", source_lang), ("target_lang", target_lang)):
            if code is not None and (not isinstance(code, str) or table.id_of(code) is None):
                raise ValueError(unknown_code(name, code, table.codes))
        own = self.source_code, table.codes[table.token_ids.index(self.forced_start)]
        source = own[0] if source_lang is None else source_lang
        target = own[1] if target_lang is None else target_lang
        fill = lambda code: tf.fill(tf.shape(texts), code)  # noqa: E731
        return self.serve_languages(texts, fill(source), fill(target))["translation"]

    def n_best(self, texts, target_prefix=None, replace_unknowns=False, constraints=None):
        """The `num_hypotheses` best translations of each of `texts`, best first.

        Args:
            texts: a list of str (or a 1-D string tensor).
            target_prefix: None, or as many str: the words each translation of the
                text starts with ("" forces nothing).
            replace_unknowns: replace each unknown subword of a translation by the
                source word it is aligned to (`tfblocks.serving.unknowns`); the scores
                stay those of the translation with `<unk>`.
            constraints: None, or a list per text of str phrases each translation of
                the text holds (`[]` constrains nothing; see `tfblocks.serving.constraints`).

        Returns:
            A list with, for each text, a list of `num_hypotheses` `Hypothesis(text,
            score)` (a blank text: as many `("", 0.0)`). The first is the translation
            `translator(texts)` (with the same `target_prefix` and `constraints`) gives.

        Raises:
            ValueError: a `target_prefix` or `constraints` not one per text, a phrase
                that is not a str or has `max_length` subwords or more, or `constraints`
                with a search that is not a beam search.
        """
        if target_prefix is None:
            texts = check_text_batch(texts)
        else:
            texts, target_prefix = check_pairs(texts, target_prefix, ("texts", "target_prefix"))
        if texts.shape[0] == 0:
            return []
        self._check_language_tokens(replace_unknowns=replace_unknowns)
        if replace_unknowns and constraints is not None:
            raise ValueError(
                "`replace_unknowns` and `constraints` cannot be combined: a replaced <unk> "
                "could break a phrase; give one of them."
            )
        if replace_unknowns:
            out = self._replacing(texts, target_prefix)
        elif target_prefix is None and constraints is None:
            out = self.serve_n_best(texts)
        else:
            out = self._translate(texts, target_prefix, constraints)
        translations = [[t.decode("utf-8") for t in row] for row in out["translations"].numpy()]
        if replace_unknowns:
            sources = [t.decode("utf-8") for t in texts.numpy()]
            translations = unknowns.replace(
                sources, translations, out["ids"], out["aligned"], self.source_tokenizer,
                self.target_tokenizer,
            )  # fmt: skip
        rows = zip(translations, out["scores"].numpy(), strict=True)
        return [[Hypothesis(t, float(v)) for t, v in zip(*row, strict=True)] for row in rows]

    def score(self, sources, targets, per_token=False):
        """The log-probability of each target given its source, under the model.

        The target is tokenized (not truncated: at most `MAX_SCORE_LENGTH` subwords with
        its EOS, else an InvalidArgumentError naming `target`) and its EOS appended; the
        score is the sum of the log-probabilities of its subwords and of EOS, as a search
        computes it (`tfblocks.Decoder.score`): with `BeamSearch(alpha=0)` the score of a
        hypothesis in `n_best` (its subwords as the tokenizer splits its text). Sources are
        read as `translator(texts)` reads them; pairs are scored in one batch.

        Args:
            sources: a list of str (or a 1-D string tensor).
            targets: as many target texts.
            per_token: also return each target's per-token values.

        Returns:
            float32 NumPy array `[B]`; with `per_token`, a list of `B` float32 arrays,
            each target's log-probabilities (its subwords, then EOS), whose sums are
            the scores.

        Raises:
            ValueError: `sources` and `targets` of different lengths, or not strings.
        """
        sources, targets = check_pairs(sources, targets)
        if sources.shape[0] == 0:
            return [] if per_token else np.zeros([0], np.float32)
        out = self.serve_score(sources, targets)
        if not per_token:
            return out["score"].numpy()
        rows = zip(out["token_scores"].numpy(), out["length"].numpy(), strict=True)
        return [values[:length] for values, length in rows]

    def align(self, sources, targets):
        """Word alignments of each target (e.g. its translation) with its source.

        Pharaoh format, `"i-j ..."`: source word i (0-based, the i-th
        whitespace-separated word as SentencePiece splits it) aligned to target word j,
        from the cross-attention of decoder layer `alignment_layer` in a teacher-forced
        pass, averaged over its heads (`tfblocks.decoding.alignment`). Sources are read
        as `translator(texts)` reads them (cut to `max_length`), targets as `score`
        reads them; a blank source or target gives `""`. Pairs are aligned in one batch.

        Args:
            sources: a list of str (or a 1-D string tensor).
            targets: as many target texts.

        Returns:
            A list of str, one per pair.

        Raises:
            ValueError: `sources` and `targets` of different lengths, or not strings.
        """
        if self.alignment_layer is None:
            raise ValueError("An Ensemble has no one cross-attention to align with: align "
                             "with a Translator of one of its models.")  # fmt: skip
        self._check_language_tokens(align=True)
        sources, targets = check_pairs(sources, targets)
        if sources.shape[0] == 0:
            return []
        out = self.serve_align(sources, targets)["alignment"].numpy()
        return [row.decode("utf-8") for row in out]
