"""Export to CTranslate2: `export_ctranslate2` writes a model, `CTranslate2Translator` runs it.

CTranslate2 (`pip install tfblocks[ctranslate2]`) is a C++ inference engine for
Transformer translation models on CPUs and GPUs, with int8 / float16 weights. The
converter fills CTranslate2's own model description (`ctranslate2.specs.TransformerSpec`)
from a trained encoder–decoder `tfblocks.Transformer` and its SentencePiece tokenizer(s):

- Pre-LN or Post-LN blocks (`pre_norm`), with the final LayerNorm of each Pre-LN stack;
  the model's own LayerNorm epsilon (`norm_epsilon`: t2t's 1e-6, Marian's) and FFN
  activation (relu, gelu in its erf form, swish / silu); biases where the model has them
  (FFN, attention projections: q, k, v fused the way CTranslate2 stores them) and the
  logits bias (`final_logits_bias`) as the output projection's bias.
- Embeddings × √d when the model scales them (`scale_embeddings`); separate source and
  target embeddings when the model has them; the tied softmax reuses the target
  embedding matrix (`h · Eᵀ`), an untied one is the model's `softmax` kernel. The decoder
  starts from `<s>`'s embedding, or from a zero vector (`start_from_zero_embedding`) for a
  model built with `decoder_start="zeros"` (Marian's).
- Positions: the model's stored position table (`max_positions`, e.g. an imported one),
  else its timing signal computed with its own timescale rule (t2t's d/2 − 1 steps or
  `"half_depth"`; sin | cos concatenated, position 0 first), is written as an explicit
  position table (`position_encodings.encodings`) rather than relying on CTranslate2's
  built-in sinusoid, so positions mean exactly what they mean in tfblocks. A computed
  table covers `max_positions` positions (source and target); a stored one its own size.
  A model without the timing signal gets a table of zeros; a model with relative position
  self-attention (`transformer_relative`) gets CTranslate2's `relative_position` spec
  (Shaw et al.'s key and value tables, the same formula) and no table, so it must be
  built without the timing signal (`pos="none"`, as t2t's relative presets are).
- Vocabulary: the SentencePiece pieces in id order (`<pad>`, `</s>`, `<unk>`, `<s>`
  are ids 0–3), so CTranslate2 token i is tfblocks id i; ids the model has beyond the
  tokenizer's pieces get placeholder tokens `<tfblocks_unused_i>`. The decoder starts
  from `<s>` (BOS) and the source gets `</s>` appended (`add_source_eos`), as
  `Translator` does.
- Alignments: the decoder's `alignment_layer` is the layer `tfblocks.Translator.align`
  reads (the penultimate) with `alignment_heads=0` (all heads averaged), so
  CTranslate2's `return_attention`, and `CTranslate2Translator.align`, give that layer's
  attention (CTranslate2's own default is the last layer's first head).

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

from tfblocks import _checks, _files
from tfblocks.decoding import alignment
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.layers.embedding import timing_signal
from tfblocks.serving.hypothesis import Hypothesis

KIND = "tfblocks-ctranslate2"  # the marker's kind: an earlier export here may be replaced
SPECIAL_PIECES = {PAD_ID: "<pad>", EOS_ID: "</s>", UNK_ID: "<unk>", BOS_ID: "<s>"}
# tfblocks' FFN activation → the name of CTranslate2's `specs.Activation` (gelu: erf form).
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "silu": "SWISH"}
QUANTIZATIONS = (
    None,
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "CTranslate2 is not installed: `pip install tfblocks[ctranslate2]`."
        ) from error
    return ctranslate2


def _pieces(tokenizer, vocab_size, arg):
    """The tokenizer's pieces in id order, padded with placeholders to `vocab_size`."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    for token_id, piece in SPECIAL_PIECES.items():
        if pieces[token_id] != piece:
            raise ValueError(
                f"`{arg}` must name id {token_id} {piece!r} (as `train_tokenizer` does), "
                f"got {pieces[token_id]!r}."
            )
    if len(pieces) > vocab_size:
        raise ValueError(
            f"`{arg}` has {len(pieces)} pieces but the model's vocabulary has only {vocab_size}."
        )
    pieces += [f"<tfblocks_unused_{i}>" for i in range(len(pieces), vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise ValueError(f"`{arg}` has repeated pieces; CTranslate2 needs one token per id.")
    return pieces


def _numpy(variable):
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, "float32")


def _linear(spec, dense):
    """Keras `Dense` (kernel `[in, out]`) → CTranslate2 linear (weight `[out, in]`)."""
    spec.weight = _numpy(dense.kernel).T.copy()
    if dense.use_bias:
        spec.bias = _numpy(dense.bias)


def _fused(spec, denses):
    """Several bias-free projections of one input, concatenated along the outputs."""
    spec.weight = np.concatenate([_numpy(d.kernel).T for d in denses], axis=0)
    if any(d.use_bias for d in denses):
        spec.bias = np.concatenate(
            [_numpy(d.bias) if d.use_bias else np.zeros(d.units, "float32") for d in denses]
        )


def _layer_norm(spec, norm):
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


def _attention(spec, attention, norm, self_attention):
    q, k, v = attention.query_dense, attention.key_dense, attention.value_dense
    if getattr(attention, "max_relative_position", None) is not None:
        # Shaw et al.'s tables, as CTranslate2 reads them: [2k + 1, depth], k from the rows.
        spec.relative_position_keys = _numpy(attention.relative_keys)
        spec.relative_position_values = _numpy(attention.relative_values)
    if self_attention:
        _fused(spec.linear[0], [q, k, v])
    else:
        _fused(spec.linear[0], [q])
        _fused(spec.linear[1], [k, v])
    _linear(spec.linear[-1], attention.output_dense)
    _layer_norm(spec.layer_norm, norm)


def _block(spec, block):
    _attention(spec.self_attention, block.self_attention, block.self_attention_norm, True)
    if block.cross_attention is not None:
        _attention(spec.attention, block.cross_attention, block.cross_attention_norm, False)
    _linear(spec.ffn.linear_0, block.ffn.filter_dense)
    _linear(spec.ffn.linear_1, block.ffn.output_dense)
    _layer_norm(spec.ffn.layer_norm, block.ffn_norm)


def _positions(embedding, max_positions):
    """The position table `[P, d]` the embedding adds: its stored table (P its size), else
    its timing signal with its own timescale rule for `max_positions` positions; zeros
    for an embedding without positions."""
    if getattr(embedding, "position_embeddings", None) is not None:
        table = _numpy(embedding.position_embeddings)
    else:
        table = _numpy(
            timing_signal(
                max_positions,
                embedding.hidden_size,
                embedding.min_timescale,
                embedding.max_timescale,
                timescale_rule=getattr(embedding, "timescale_rule", "t2t"),
            )[0]
        )
    return table if embedding.add_timing_signal else table * 0


def _check_model(model):
    if not getattr(model, "has_input", False):
        raise ValueError(
            "`model` must be an encoder–decoder `tfblocks.Transformer` (from "
            f"`build_transformer`), got {type(model).__name__} '{getattr(model, 'name', '')}'."
        )
    for block in [*model.encoder_blocks, *model.decoder_blocks]:
        if block.activation not in ACTIVATIONS:
            raise ValueError(
                f"`model` block '{block.name}' has activation={block.activation!r}; the "
                f"CTranslate2 export supports {sorted(ACTIVATIONS)}."
            )
        if getattr(model, "max_relative_position", None) is not None and model.add_timing_signal:
            raise ValueError(
                f"`model` '{model.name}' has relative attention and a timing signal; "
                "CTranslate2 adds no position encodings to a model with relative positions, "
                "so it needs add_timing_signal=False (hparams pos='none')."
            )
        if block.key_dim not in (None, model.hidden_size // model.num_heads):
            raise ValueError(
                f"`model` block '{block.name}' has key_dim={block.key_dim}; the CTranslate2 "
                "export needs key_dim = hidden_size // num_heads."
            )


def build_spec(model, source_tokenizer, target_tokenizer=None, max_positions=1024):
    """The `ctranslate2.specs.TransformerSpec` of `model`, weights filled in.

    Arguments as `export_ctranslate2`. Useful to inspect or adjust the spec before
    `spec.validate()`, `spec.optimize(...)` and `spec.save(dir)`.
    """
    _check_model(model)
    _checks.check_positive_int("max_positions", max_positions)
    specs = _ctranslate2().specs
    target_tokenizer = target_tokenizer or source_tokenizer
    relative = getattr(model, "max_relative_position", None) is not None
    activations = {block.activation for block in [*model.encoder_blocks, *model.decoder_blocks]}
    common = dict(
        num_heads=model.num_heads,
        pre_norm=model.norm_first,
        relative_position=relative,
        activation=specs.Activation[ACTIVATIONS[activations.pop() if activations else "relu"]],
    )
    encoder = specs.TransformerEncoderSpec(model.num_encoder_layers, **common)
    decoder = specs.TransformerDecoderSpec(
        model.num_decoder_layers,
        alignment_layer=alignment.alignment_layer(None, model.num_decoder_layers),
        alignment_heads=0,  # all heads, averaged
        **common,
    )
    # Marian's decoder input at step 0 is a zero vector (plus position 0's signal).
    decoder.start_from_zero_embedding = getattr(model, "decoder_start", "bos") == "zeros"
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = float(model.norm_epsilon)
    spec.config.add_source_eos = True
    spec.config.add_source_bos = False
    spec.config.decoder_start_token = SPECIAL_PIECES[BOS_ID]
    spec.config.bos_token = SPECIAL_PIECES[BOS_ID]
    spec.config.eos_token = SPECIAL_PIECES[EOS_ID]
    spec.config.unk_token = SPECIAL_PIECES[UNK_ID]

    for stack, embedding, blocks, norm in (
        (encoder, model.source_embedding, model.encoder_blocks, model.encoder_norm),
        (decoder, model.target_embedding, model.decoder_blocks, model.decoder_norm),
    ):
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = _numpy(embedding.embeddings)
        stack.scale_embeddings = bool(embedding.scale)
        if not relative:  # CTranslate2 has no position table with relative positions
            stack.position_encodings.encodings = _positions(embedding, max_positions)
        for layer_spec, block in zip(stack.layer, blocks, strict=True):
            _block(layer_spec, block)
        if norm is not None:
            _layer_norm(stack.layer_norm, norm)
    if model.softmax is None:
        decoder.projection.weight = _numpy(model.target_embedding.embeddings)  # [V, d]: h · Eᵀ
    else:
        _linear(decoder.projection, model.softmax)
    if getattr(model, "logits_bias", None) is not None:
        decoder.projection.bias = _numpy(model.logits_bias.bias)  # [V]: final_logits_bias

    source_size = model.source_embedding.vocab_size
    spec.register_source_vocabulary(_pieces(source_tokenizer, source_size, "tokenizer"))
    spec.register_target_vocabulary(_pieces(target_tokenizer, model.vocab_size, "target_tokenizer"))
    return spec


def export_ctranslate2(
    model,
    tokenizer,
    output_dir,
    quantization=None,
    target_tokenizer=None,
    max_positions=1024,
):
    """Writes `model` as a CTranslate2 model directory.

    Args:
        model: a trained or imported encoder–decoder `tfblocks.Transformer` (Pre- or
            Post-LN, tied or untied softmax, relu / gelu / swish FFN, full or relative
            attention; see the module docstring).
        tokenizer: the source `tfblocks.text.SubwordTokenizer` (also the target's
            unless `target_tokenizer` is given).
        output_dir: the directory to write (`model.bin`, `config.json`, the
            vocabularies, the tokenizers' `source.model` / `target.model` and the
            marker `tfblocks_export.json`): new, empty, or an earlier
            `export_ctranslate2` output with nothing added, which is replaced. It is
            written in a staging folder beside it and renamed into place, so a failed
            export leaves nothing at `output_dir` (or the earlier export, unchanged).
        quantization: `None` (float32 weights) or one of CTranslate2's weight types:
            `"int8"`, `"int8_float32"`, `"int8_float16"`, `"int8_bfloat16"`, `"int16"`,
            `"float16"`, `"bfloat16"`, `"float32"`.
        target_tokenizer: the target tokenizer when the vocabularies are not shared.
        max_positions: positions covered by the written timing-signal table: the
            longest source (EOS included) and the longest translation it can serve
            (a model with a stored position table, `max_positions` of its own, is
            written with that table, whatever this is).

    Returns:
        `output_dir`, absolute.

    Raises:
        ValueError: before anything is written, for a bad `quantization`, a model or
            tokenizer the converter does not support, or an `output_dir` that is `""`,
            `.`, the current directory or a parent of it, a symbolic link, a mount point,
            a regular file, or a directory holding anything but an earlier
            `export_ctranslate2` output (one from before tfblocks wrote the marker
            `tfblocks_export.json` included: delete it yourself to reuse the path).

    Example (training elided):

    >>> import tempfile, os
    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 20,
    ...                       vocab_size=40)
    >>> model = tfblocks.build_transformer(
    ...     tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size))
    >>> path = export_ctranslate2(model, tok, os.path.join(tempfile.mkdtemp(), "ct2"))
    >>> sorted(os.listdir(path))[:3]
    ['config.json', 'model.bin', 'shared_vocabulary.json']
    """
    _checks.require_tensorflow("export_ctranslate2")
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {QUANTIZATIONS}, got quantization={quantization!r}."
        )
    _files.check_directory(output_dir, KIND, arg="output_dir")  # before the slow part
    spec = build_spec(model, tokenizer, target_tokenizer, max_positions=max_positions)
    spec.validate()
    spec.optimize(quantization=quantization)

    def write(staging):
        spec.save(staging)
        tokenizer.save(os.path.join(staging, "source.model"))
        (target_tokenizer or tokenizer).save(os.path.join(staging, "target.model"))

    return _files.replace_directory(output_dir, write, kind=KIND, arg="output_dir")


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
    >>> path = export_ctranslate2(model, tok, os.path.join(tempfile.mkdtemp(), "ct2"))
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
    ):
        import sentencepiece

        from tfblocks.text import SubwordTokenizer

        ctranslate2 = _ctranslate2()
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
        rows = self._source.encode(list(texts))  # ids, without EOS
        return [[self._source.id_to_piece(i) for i in row[: self.max_length - 1]] for row in rows]

    def detokenize(self, pieces):
        """Text of a list of target pieces (placeholders and special pieces dropped)."""
        unk = self._target.unk_id()
        ids = [self._target_ids.get(piece, unk) for piece in pieces]
        return self._target.decode([i for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID)])

    def target_pieces(self, texts):
        """CTranslate2's `target_prefix` of each text (a list of str): its target pieces
        cut to `max_length - 1`, or None for an empty one (nothing forced)."""
        rows = self._target.encode(list(texts))
        pieces = [[self._target.id_to_piece(i) for i in row[: self.max_length - 1]] for row in rows]
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
            min_decoding_length=0,
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
        source_ids = [self._source.encode(sources[i])[: self.max_length - 1] for i in chosen]
        target_ids = [self._target.encode(targets[i]) for i in chosen]
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
            [self._target.id_to_piece(i) for i in row] for row in self._target.encode(targets)
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
