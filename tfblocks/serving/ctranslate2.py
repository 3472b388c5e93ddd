"""`CTranslate2Translator`: strings in, strings out, with a model written by
`export_ctranslate2` (`tfblocks.serving.ctranslate2_export`, which tells how a model is
converted).

CTranslate2 (`pip install tfblocks[ctranslate2]`) is a C++ inference engine for
Transformer translation models on CPUs and GPUs, with int8 / float16 weights.

Differences that remain: CTranslate2's beam search scores hypotheses with its own
length normalization (`log p / length ** length_penalty`; with `length_penalty=0` the
log-probability, as t2t's with `alpha=0`), picks its candidates a little differently and
ends a sentence's search when `beam_size` hypotheses have finished (with
`length_penalty=0`: when the best one has), `BeamSearch(stop_early=True)`'s rule; t2t's
bound test (the default of `BeamSearch`) has no CTranslate2 equivalent. So beam outputs
and n-best lists can differ from `Translator`'s in a few percent of sentences; greedy
decoding (beam 1) gives the same ids. `CTranslate2Translator` asks CTranslate2 never to
generate `<pad>` or `<s>`, as `tfblocks.Decoder` does; its `score` (CTranslate2's
`score_batch`) normalizes over the whole vocabulary, `<pad>` and `<s>` included, so it
is below `Translator.score` by the little probability the model gives those two.
"""

import os

import numpy as np

from tfblocks import _checks
from tfblocks.decoding import alignment
from tfblocks.decoding.base import prefix_too_long
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.serving.hypothesis import Hypothesis
from tfblocks.text.tokenizers import unknown_as_pieces

# The pieces of the special ids, as `train_tokenizer` names them and as the export
# registers them in CTranslate2's vocabularies (CTranslate2 token i is tfblocks id i).
SPECIAL_PIECES = {PAD_ID: "<pad>", EOS_ID: "</s>", UNK_ID: "<unk>", BOS_ID: "<s>"}


def import_ctranslate2():
    """The `ctranslate2` module, else an ImportError that says how to install it."""
    try:
        import ctranslate2
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "CTranslate2 is not installed: `pip install tfblocks[ctranslate2]`."
        ) from error
    return ctranslate2


class CTranslate2Translator:
    """Strings in, strings out, with a model written by `export_ctranslate2`.

    Tokenizes with the SentencePiece model saved beside the CTranslate2 model (or the
    one given), translates in batches with `ctranslate2.Translator`, and detokenizes.
    Like `tfblocks.Translator`, a source is cut to its first `max_length - 1` pieces
    (plus EOS), a translation has at most `max_length` tokens (EOS included), `<pad>`
    and `<s>` are never generated, and a blank string (only Unicode whitespace, as
    `str.strip()` sees it) translates to `""` without being translated.

    Args:
        model_dir: the directory written by `export_ctranslate2`.
        tokenizer: the source `SubwordTokenizer`; defaults to `model_dir/source.model`.
        target_tokenizer: the target tokenizer; defaults to `model_dir/target.model`
            (or `tokenizer` when that file is absent).
        beam_size: beam width; 1 is greedy decoding.
        max_length: as `tfblocks.Translator`'s.
        length_penalty: CTranslate2's length-penalty exponent for beam search (its
            own normalization, not t2t's).
        max_batch_size: sentences per CTranslate2 batch (0 = all at once).
        device: `"cpu"`, `"cuda"` or `"auto"`.
        compute_type: CTranslate2's compute type (`"default"` keeps the saved weights'
            type; e.g. `"int8"`, `"float32"`).
        intra_threads: threads per translation (CTranslate2 `intra_threads`).
        inter_threads: translations run in parallel (CTranslate2 `inter_threads`).
        num_hypotheses: translations per text that `n_best` returns (at most
            `beam_size`; CTranslate2's `num_hypotheses`).
        min_length: EOS is not generated before this many tokens (CTranslate2's
            `min_decoding_length`; `tfblocks.decoding.Controls.min_length`).
        disallow_unk: `<unk>` is never generated (CTranslate2's `disable_unk`).
        no_repeat_ngram_size, repetition_penalty: CTranslate2's options of these names
            (`tfblocks.decoding.Controls`' of the same meaning).

    Like `tfblocks.Translator` it also returns the n best translations (`n_best`) and
    scores given translations (`score`, CTranslate2's `score_batch`).

    Example:

    >>> import tempfile, os
    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 20,
    ...                       vocab_size=40)
    >>> model = tfblocks.build_transformer(
    ...     tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size))
    >>> path = tfblocks.export_ctranslate2(model, tok, os.path.join(tempfile.mkdtemp(), "ct2"))
    >>> translate = CTranslate2Translator(path, beam_size=1, max_length=8)
    >>> len(translate(["今日のランチはカレーだ。", ""]))
    2
    >>> translate.score(["今日のランチはカレーだ。"], ["Today's lunch is curry."]).shape
    (1,)
    """

    def __init__(
        self,
        model_dir,
        tokenizer=None,
        target_tokenizer=None,
        beam_size=4,
        max_length=64,
        length_penalty=0.6,
        max_batch_size=0,
        device="cpu",
        compute_type="default",
        intra_threads=0,
        inter_threads=1,
        num_hypotheses=1,
        min_length=0,
        disallow_unk=False,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
    ):
        import sentencepiece

        from tfblocks.text import SubwordTokenizer

        ctranslate2 = import_ctranslate2()
        model_dir = os.fspath(model_dir)
        if not os.path.isfile(os.path.join(model_dir, "model.bin")):
            raise ValueError(
                "`model_dir` must be a directory written by `export_ctranslate2`, got "
                f"model_dir={model_dir!r} (no model.bin)."
            )
        self.beam_size = _checks.check_positive_int("beam_size", beam_size)
        self.max_length = _checks.check_positive_int("max_length", max_length)
        if max_length < 2:
            raise ValueError(f"`max_length` must be at least 2, got max_length={max_length}.")
        self.num_hypotheses = _checks.check_positive_int("num_hypotheses", num_hypotheses)
        if num_hypotheses > beam_size:
            raise ValueError(
                f"`num_hypotheses` must be at most beam_size={beam_size}, got "
                f"num_hypotheses={num_hypotheses}."
            )
        self.length_penalty = float(length_penalty)
        self.min_length = _checks.check_non_negative_int("min_length", min_length)
        self.disallow_unk = _checks.check_bool("disallow_unk", disallow_unk)
        self.no_repeat_ngram_size = _checks.check_non_negative_int(
            "no_repeat_ngram_size", no_repeat_ngram_size
        )
        self.repetition_penalty = float(repetition_penalty)
        self.max_batch_size = _checks.check_non_negative_int("max_batch_size", max_batch_size)
        if tokenizer is None:
            tokenizer = SubwordTokenizer.load(os.path.join(model_dir, "source.model"))
        if target_tokenizer is None:
            target_path = os.path.join(model_dir, "target.model")
            target_tokenizer = (
                SubwordTokenizer.load(target_path) if os.path.isfile(target_path) else tokenizer
            )
        self.model_dir = model_dir
        self._source = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
        self._target = sentencepiece.SentencePieceProcessor(model_proto=target_tokenizer.proto)
        self._target_ids = {
            self._target.id_to_piece(i): i for i in range(self._target.get_piece_size())
        }
        self._word_starts = [
            alignment.word_starts(
                [p.id_to_piece(i) for i in range(p.get_piece_size())], p.get_piece_size()
            )
            for p in (self._source, self._target)
        ]  # [V] bool each: which pieces start a word (`align`)
        self.translator = ctranslate2.Translator(
            model_dir,
            device=device,
            compute_type=compute_type,
            intra_threads=intra_threads,
            inter_threads=inter_threads,
        )

    def tokenize(self, texts):
        """SentencePiece pieces of each text, cut to `max_length - 1` (EOS is added later)."""
        rows = unknown_as_pieces(self._source, texts)  # tfblocks' ids, without EOS
        return [[self._source.id_to_piece(i) for i in row[: self.max_length - 1]] for row in rows]

    def detokenize(self, pieces):
        """Text of a list of target pieces (placeholders and special pieces dropped)."""
        unk = self._target.unk_id()
        ids = [self._target_ids.get(piece, unk) for piece in pieces]
        return self._target.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def target_pieces(self, texts):
        """CTranslate2's `target_prefix` of each text (a list of str): its target pieces,
        or None for an empty one (nothing forced); a ValueError naming the first whose
        pieces leave no room for EOS in `max_length` (as `tfblocks.Translator` refuses
        it: never cut)."""
        rows = unknown_as_pieces(self._target, texts)
        for index, row in enumerate(rows):
            if len(row) >= self.max_length:
                what = f"`target_prefix`[{index}]"
                raise ValueError(prefix_too_long(what, len(row), self.max_length, "pieces"))
        pieces = [[self._target.id_to_piece(i) for i in row] for row in rows]
        return [row or None for row in pieces]

    def translate_pieces(self, texts, num_hypotheses=1, target_prefix=None):
        """`(pieces, scores)` of the best hypothesis for each text (a list of str); with
        `num_hypotheses` N > 1, a list of N pieces and of N scores per text; with
        `target_prefix` (as many str), each hypothesis starts with its prefix's pieces."""
        prefixes = None if target_prefix is None else self.target_pieces(target_prefix)
        results = self.translator.translate_batch(
            self.tokenize(texts),
            prefixes,
            beam_size=self.beam_size,
            num_hypotheses=num_hypotheses,
            length_penalty=self.length_penalty,
            max_batch_size=self.max_batch_size,
            max_decoding_length=self.max_length,
            min_decoding_length=self.min_length,
            disable_unk=self.disallow_unk,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
            repetition_penalty=self.repetition_penalty,
            suppress_sequences=[[SPECIAL_PIECES[PAD_ID]], [SPECIAL_PIECES[BOS_ID]]],
            return_scores=True,
        )
        if num_hypotheses > 1:
            return [r.hypotheses for r in results], [r.scores for r in results]
        return [r.hypotheses[0] for r in results], [r.scores[0] for r in results]

    def __call__(self, texts, target_prefix=None, constraints=None):
        """Translations of `texts` (a list of str), a list of str; with `target_prefix`
        (as many str), each starts with its prefix ("" forces nothing). `constraints`
        are refused (`NO_CONSTRAINTS`)."""
        return [row[0].text for row in self._search(texts, 1, target_prefix, constraints)]

    def n_best(self, texts, target_prefix=None, constraints=None):
        """The `num_hypotheses` best translations of each of `texts` (a list of str), as
        `tfblocks.Translator.n_best` returns them: a list per text of
        `Hypothesis(text, score)`, best first (CTranslate2's scores; a blank text gets
        `("", 0.0)` each time); `target_prefix` and `constraints` as for calling it."""
        return self._search(texts, self.num_hypotheses, target_prefix, constraints)

    def _search(self, texts, n, target_prefix=None, constraints=None):
        """`n` `Hypothesis` per text. A blank line (only Unicode whitespace: what
        `str.strip()` removes, the SavedModel's `BLANK`) is not translated: it gets ""."""
        if constraints is not None:
            raise ValueError(NO_CONSTRAINTS)
        texts = _texts("texts", texts)
        if target_prefix is not None:
            target_prefix = _texts("target_prefix", target_prefix)
            _check_same_length(("texts", texts), ("target_prefix", target_prefix))
            self.target_pieces(target_prefix)  # refused before any work, by the caller's index
        chosen = [i for i, text in enumerate(texts) if text.strip()]
        out = [[Hypothesis("", 0.0)] * n for _ in texts]
        if chosen:
            prefixes = None if target_prefix is None else [target_prefix[i] for i in chosen]
            pieces, scores = self.translate_pieces([texts[i] for i in chosen], n, prefixes)
            if n == 1:
                pieces, scores = [[row] for row in pieces], [[score] for score in scores]
            for i, rows, values in zip(chosen, pieces, scores, strict=True):
                out[i] = [
                    Hypothesis(self.detokenize(row), float(v))
                    for row, v in zip(rows, values, strict=True)
                ]
        return out

    def align(self, sources, targets):
        """Word alignments of each target with its source, as `tfblocks.Translator.align`
        gives them (Pharaoh format, `tfblocks.decoding.alignment.pharaoh`), from the
        attention CTranslate2 returns when it decodes the target as a forced prefix
        (`return_attention`): the layer and heads `export_ctranslate2` stored (a model
        exported by an earlier tfblocks has CTranslate2's default, the last layer's first
        head). Sources are cut as for translating; a blank source or target gives `""`.
        """
        sources, targets = _texts("sources", sources), _texts("targets", targets)
        if len(sources) != len(targets):
            raise ValueError(
                "`sources` and `targets` must have the same length, got "
                f"{len(sources)} sources and {len(targets)} targets."
            )
        chosen = [
            i
            for i, (s, t) in enumerate(zip(sources, targets, strict=True))
            if s.strip() and t.strip()
        ]
        out = [""] * len(sources)
        if not chosen:
            return out
        source_ids = unknown_as_pieces(self._source, [sources[i] for i in chosen])
        source_ids = [row[: self.max_length - 1] for row in source_ids]
        target_ids = unknown_as_pieces(self._target, [targets[i] for i in chosen])
        results = self.translator.translate_batch(
            [[self._source.id_to_piece(i) for i in row] for row in source_ids],
            target_prefix=[[self._target.id_to_piece(i) for i in row] for row in target_ids],
            beam_size=1,
            max_batch_size=self.max_batch_size,
            max_decoding_length=max(map(len, target_ids)) + 1,
            min_decoding_length=0,
            return_attention=True,
        )
        # Padded batch of the ids with their EOS, and the attention rows of the targets.
        rows, s, t = len(chosen), max(map(len, source_ids)) + 1, max(map(len, target_ids)) + 1
        sources_, targets_ = np.zeros([rows, s], np.int32), np.zeros([rows, t], np.int32)
        weights = np.zeros([rows, t, s], np.float32)
        for b, (src, tgt, result) in enumerate(zip(source_ids, target_ids, results, strict=True)):
            sources_[b, : len(src) + 1] = [*src, EOS_ID]
            targets_[b, : len(tgt) + 1] = [*tgt, EOS_ID]
            attention = np.asarray(result.attention[0], np.float32)[: len(tgt)]  # [T_b, S_b]
            weights[b, : len(attention), : attention.shape[1]] = attention
        links = alignment.pharaoh(weights, sources_, targets_, *self._word_starts)
        for i, row in zip(chosen, links.numpy(), strict=True):
            out[i] = row.decode("utf-8")
        return out

    def score(self, sources, targets, per_token=False):
        """The log-probability of each target given its source (CTranslate2's
        `score_batch`), as `tfblocks.Translator.score` returns it: a float32 NumPy array,
        or with `per_token` a list of arrays (each target's subwords, then EOS).

        Sources are cut as for translating; targets never are. CTranslate2 normalizes
        over the whole vocabulary, `<pad>` and `<s>` included (see the module docstring).
        """
        sources, targets = _texts("sources", sources), _texts("targets", targets)
        _check_same_length(("sources", sources), ("targets", targets))
        if not sources:
            return [] if per_token else np.zeros([0], np.float32)
        target_pieces = [
            [self._target.id_to_piece(i) for i in row]
            for row in unknown_as_pieces(self._target, targets)
        ]
        results = self.translator.score_batch(
            self.tokenize(sources),
            target_pieces,
            max_batch_size=self.max_batch_size,
            max_input_length=0,  # sources are cut by `tokenize`; targets never are
        )
        values = [np.asarray(r.log_probs, np.float32) for r in results]
        if per_token:
            return values
        return np.array([v.sum() for v in values], np.float32)


# Why `constraints` are refused: CTranslate2's decoding has no lexical constraints.
NO_LENGTH_RATIO = (
    "CTranslate2 has no maximum length relative to each source (its max_decoding_length is "
    "one number for the batch): translate with --engine tensorflow."
)
NO_CONSTRAINTS = (
    "CTranslate2 has no lexical constraints (its Translator takes no phrases a translation "
    "must hold): translate with constraints with tfblocks.serving.Translator (tfblocks-"
    "translate --engine tensorflow, the default)."
)


def _check_same_length(first, second):
    """A ValueError unless the `(name, list)` pairs `first` and `second` are as long."""
    (name_a, a), (name_b, b) = first, second
    if len(a) != len(b):
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same length, got "
            f"{len(a)} {name_a} and {len(b)} {name_b}."
        )


def _texts(name, texts):
    """`texts` as a list of str, else a ValueError naming `name`."""
    if isinstance(texts, str):
        raise ValueError(f"`{name}` must be a list of strings, got a single str: {texts!r:.80}.")
    texts = list(texts)
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(f"`{name}` must hold only str, got {type(bad[0]).__name__}: {bad[0]!r}.")
    return _checks.check_unicode_texts(name, texts)
