"""`export_ctranslate2`: a trained encoder–decoder written as a CTranslate2 model.

CTranslate2 (`pip install tfblocks[ctranslate2]`) is a C++ inference engine for
Transformer translation models on CPUs and GPUs, with int8 / float16 weights;
`tfblocks.serving.ctranslate2.CTranslate2Translator` runs what this module writes. The
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
"""

import os

import numpy as np

from tfblocks import _backend, _checks, _files
from tfblocks.decoding import alignment
from tfblocks.ids import BOS_ID, EOS_ID, UNK_ID
from tfblocks.layers.embedding import timing_signal
from tfblocks.serving.ctranslate2 import SPECIAL_PIECES, import_ctranslate2

KIND = "tfblocks-ctranslate2"  # the marker's kind: an earlier export here may be replaced
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
    if getattr(model, "position_offset", 0):
        raise ValueError(
            f"`model` '{model.name}' has position_offset={model.position_offset} (an M2M-100 / "
            "NLLB import): its CTranslate2 export, with the language tokens, is not there yet."
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
    specs = import_ctranslate2().specs
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
    _backend.require_tensorflow("export_ctranslate2")
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
