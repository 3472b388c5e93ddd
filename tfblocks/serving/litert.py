"""LiteRT (TFLite) export of a `Translator`: one `.tflite` file, strings in, strings out.

`export_litert` (and `Translator.export_litert`) converts the translator's whole
`serving_default` path — SentencePiece tokenization, the encoder, greedy or beam search
over the decoder's KV cache, detokenization — into one LiteRT model with one signature:

    serving_default(text: string [B]) -> {"translation": string [B], "score": float32 [B]}

It runs on the LiteRT interpreter (`ai-edge-litert` in Python; Android, iOS) without
TensorFlow's runtime: every op is a LiteRT built-in except tensorflow-text's two SentencePiece ops
(`FAST_SENTENCEPIECE_OPS`, tensorflow-text's `FastSentencepieceTokenizer`), which the
app registers (in Python `tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS`); no
Select TF (Flex) op is needed. To get there the graph differs from the SavedModel's in
what LiteRT lacks, not in what it computes:

- the search is traced without XLA, over one self-attention cache of `max_length`
  positions and the whole batch (no cache growth, no dropping of finished sentences:
  both run loops of changing shapes; the translations do not depend on either);
- subword ids go from and to the tokenizer's (values, row splits) with built-in
  gathers and masks, not ragged-tensor ops;
- sources are padded to the batch's longest, not to a bucket (padding is masked);
- a blank line is one that has no subword (the tokenizer removes whitespace), not
  the SavedModel's regular expression (no regex op in LiteRT): the same for the
  whitespace `str.strip()` removes, but a line of characters the tokenizer's
  normalization deletes (e.g. U+200B alone) translates to "" here;
- no input checks in the graph: the interpreter checks the dtype and rank.
"""

import os

import tensorflow as tf

from tfblocks import _checks
from tfblocks._files import replace_file
from tfblocks.decoding import BeamSearch, Decoder, Greedy
from tfblocks.ids import EOS_ID, PAD_ID
from tfblocks.text.tokenizers import kept_ids

# `quantization`: None keeps float32 weights; "dynamic" stores the weights in int8, one
# scale a tensor (LiteRT's dynamic-range quantization: int8 kernels where LiteRT has them,
# dequantized elsewhere), "float16" in float16.
QUANTIZATIONS = (None, "dynamic", "float16")
# The custom ops of an exported file: LiteRT built-ins do everything else.
FAST_SENTENCEPIECE_OPS = ("TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize")


def litert_search(search, beam_size=None):
    """The search an exported file runs: `search` (the translator's: `Greedy` or
    `BeamSearch`), or with `beam_size` a `BeamSearch` of that size (with `search`'s
    alpha when it is one, else t2t's 0.6), `Greedy` for 1.

    >>> litert_search(BeamSearch(beam_size=4, alpha=1.0), beam_size=2).alpha
    1.0
    >>> type(litert_search(BeamSearch(), beam_size=1)).__name__
    'Greedy'
    """
    if beam_size is None:
        if type(search) not in (Greedy, BeamSearch):
            raise ValueError(
                "A LiteRT file decodes with greedy or beam search only (it has no random "
                f"ops), got search={search!r}; pass beam_size."
            )
        return search
    beam_size = _checks.check_positive_int("beam_size", beam_size)
    if beam_size == 1:
        return Greedy()
    alpha = search.alpha if isinstance(search, BeamSearch) else BeamSearch().alpha
    return BeamSearch(beam_size=beam_size, alpha=alpha)


def _check_translator(translator):
    model = translator.model
    if getattr(model, "num_decoder_layers", None) is None:
        raise ValueError(
            "A LiteRT file holds one model, got an Ensemble "
            f"'{model.name}'; export one of its models."
        )
    positions = getattr(model, "max_positions", None)
    if positions is not None and translator.max_length > positions:
        raise ValueError(
            f"The translator's max_length={translator.max_length} exceeds the "
            f"{positions} positions of the model's table (the file's fixed shapes); "
            "make a Translator with a smaller max_length."
        )


def _source_ids(tokenizer, text, max_length):
    """Source ids `[B, S]` as `Translator.encode_source` makes them (at most
    `max_length - 1` subwords, then EOS, 0-padded to the longest; no bucket), and
    which rows are blank (no subword) `[B]`, with built-in ops only."""
    tokens = tokenizer.tokenize(text)  # values [N], row splits [B + 1]
    values, splits = tokens.values, tokens.row_splits
    length = tf.minimum(splits[1:] - splits[:-1], max_length - 1)  # [B] subwords kept
    position = tf.range(tf.maximum(tf.reduce_max(length), 0) + 1)[None, :]  # [1, S]
    index = tf.minimum(splits[:-1, None] + position, tf.maximum(tf.size(values) - 1, 0))
    subword = tf.gather(values, index)  # [B, S]; read past a row's end only where masked
    tail = tf.where(position == length[:, None], EOS_ID, PAD_ID)  # [B, S]
    return tf.where(position < length[:, None], subword, tail), length == 0


def _texts(tokenizer, ids, keep):
    """The strings of `ids` `[B, L]`, each of its subwords where `keep` `[B, L]`."""
    values = tf.boolean_mask(ids, keep)  # [N]
    counts = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)  # [B]
    splits = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(counts)], axis=0)  # [B + 1]
    texts = tokenizer.detokenize(tf.RaggedTensor.from_row_splits(values, splits, validate=False))
    # A copy by a built-in op: the Python interpreters cannot read a string tensor the
    # registrar's detokenizer kernel wrote (they crash), but read the copy.
    return tf.gather(texts, tf.range(tf.shape(ids)[0]))  # [B]


def litert_function(translator, search):
    """The `tf.function` an exported file holds: `{"translation", "score"}` for a batch
    of strings, decoded with `search` (see the module docstring for how it differs
    from `Translator.serve`)."""
    import tensorflow_text

    _check_translator(translator)
    decoder = Decoder(
        translator.model, translator.max_length,
        jit_compile=False, cache_lengths=None, drop_finished=False,
    )  # fmt: skip
    vocab_size = translator.target_tokenizer.vocabulary_size

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def translate(text):
        # Made here: their converted SentencePiece models are constants of this graph.
        source_tokenizer = tensorflow_text.FastSentencepieceTokenizer(
            translator.source_tokenizer.proto
        )
        target_tokenizer = tensorflow_text.FastSentencepieceTokenizer(
            translator.target_tokenizer.proto
        )
        source, blank = _source_ids(source_tokenizer, text, translator.max_length)
        ids, scores = decoder.decode(search, source)  # [B, L], [B]
        keep = kept_ids(ids, vocab_size) & ~blank[:, None]  # [B, L]
        return {
            "translation": _texts(target_tokenizer, ids, keep),
            "score": tf.where(blank, 0.0, scores),
        }

    return translate


def convert(function, quantization=None):
    """The LiteRT flatbuffer (bytes) of the `tf.function` `function` as its one signature,
    `serving_default`, its weights stored as `quantization` says (`QUANTIZATIONS`); a
    ValueError if it needs an op that is neither a built-in nor one of
    `FAST_SENTENCEPIECE_OPS`."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    # The weights as constants of the graph: the converter keeps the variables that a
    # while loop's body reads as resource variables, which nothing in the file would
    # initialise.
    concrete = function.get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete, lower_control_flow=False)
    names = sorted(concrete.structured_outputs)  # the order of `frozen`'s outputs

    @tf.function(input_signature=concrete.structured_input_signature[0], autograph=False)
    def signature(*args):
        return dict(zip(names, frozen(*args), strict=True))  # the outputs' names back

    # A module (holding nothing now) makes the converter write the signature.
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [signature.get_concrete_function()], tf.Module()
    )
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True  # the SentencePiece ops, checked below
    if quantization is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "dynamic":
        # One scale a tensor: the tied embedding table, which the embedding lookup
        # (a gather, one scale) and the softmax (a matmul, per-channel by default)
        # share, is then stored once, not twice.
        converter._experimental_disable_per_channel = True
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    content = converter.convert()
    custom = set(custom_ops(content)) - set(FAST_SENTENCEPIECE_OPS)
    if custom:
        raise ValueError(f"The LiteRT conversion needs ops LiteRT lacks: {sorted(custom)}.")
    return content


def custom_ops(content):
    """The names of the custom ops the LiteRT flatbuffer `content` (bytes) uses."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))
    return sorted({op.customCode.decode() for op in model.operatorCodes if op.customCode})


def export_litert(translator, path, quantization=None, beam_size=None):
    """Writes `translator` as a LiteRT file (see the module docstring).

    Args:
        translator: a `Translator` of one model (not an Ensemble).
        path: the `.tflite` file to write (replaced if it exists); written beside it
            and renamed into place, so a failed export leaves nothing.
        quantization: None (float32 weights), `"dynamic"` (int8 weights) or
            `"float16"`.
        beam_size: None for the translator's search (greedy or beam search), or the
            beam size of the file's beam search (1: greedy search).

    Returns:
        `path`, absolute.

    Raises:
        ValueError: before anything is written, for an Ensemble, a sampling search, a
            `max_length` beyond the model's position table, an unknown `quantization`
            or `path` naming a directory.
    """
    _checks.check_choice("quantization", quantization, QUANTIZATIONS)
    search = litert_search(translator.search, beam_size)
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise ValueError(f"`path` must name a file, got the directory path={path!r}.")
    content = convert(litert_function(translator, search), quantization)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(content)

    return replace_file(path, write)  # absolute: made so above
