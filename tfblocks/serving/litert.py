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
- no input checks in the graph: the interpreter checks the dtype and rank;
- the fast tokenizer reads a copy of the tokenizer's SentencePiece model made so that it
  segments and detokenizes as `SubwordTokenizer` does (`litert_tokenizers`; a BPE model,
  which it cannot reproduce, is refused).

A file translates into one language: for a model of several directions the ids of the
`target_lang` tag go in front of each source, and the file's metadata entry `METADATA`
records the language (`file_metadata`).
"""

import json
import os

import tensorflow as tf

from tfblocks import _checks
from tfblocks._files import replace_file
from tfblocks.decoding import BeamSearch, Decoder, Greedy
from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.serving.litert_tokenizers import (
    check_tokenizer,
    fast_tokenizer,
    merge_unknown_runs,
    tag_ids,
    unknown_ids,
)
from tfblocks.text.multilingual import vocabulary_tags
from tfblocks.text.tokenizers import kept_ids

# `quantization`: None keeps float32 weights; "dynamic" stores the weights in int8, one
# scale a tensor (LiteRT's dynamic-range quantization: int8 kernels where LiteRT has them,
# dequantized elsewhere), "float16" in float16.
QUANTIZATIONS = (None, "dynamic", "float16")
# The custom ops of an exported file: LiteRT built-ins do everything else.
FAST_SENTENCEPIECE_OPS = ("TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize")
# The name of the file's metadata entry in which tfblocks records, as JSON, the language
# the file translates into (`{"target_lang": "en"}`; null for a model of one direction).
METADATA = "tfblocks"


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


def _check_translator(translator, target_lang):
    for side in ("source", "target"):
        check_tokenizer(getattr(translator, f"{side}_tokenizer"), f"{side} tokenizer")
    languages = vocabulary_tags(translator.source_tokenizer.proto)
    if languages and target_lang is None:
        raise ValueError(
            f"The model translates into several languages ({', '.join(languages)}) and a "
            "LiteRT file into one: give target_lang (tfblocks-export litert --target-lang "
            "LANG), one file a language."
        )
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


def _source_ids(tokenizer, text, max_length, prefix=()):
    """Source ids `[B, S]` as `Translator.encode_source` makes them with `tokenizer` (a
    `SubwordTokenizer`; the ids `prefix`, a target tag's, then the text's subwords, at
    most `max_length - 1` in all, then EOS, 0-padded to the longest; no bucket), and
    which rows are blank (no subword of their own) `[B]`, with built-in ops and the fast
    tokenizer's only."""
    tokens = fast_tokenizer(tokenizer, "source").tokenize(text)  # values [N], splits [B + 1]
    values, splits = merge_unknown_runs(
        tf.cast(tokens.values, tf.int32), tf.cast(tokens.row_splits, tf.int32),
        unknown_ids(tokenizer), tokenizer.vocabulary_size,
    )  # fmt: skip
    count = splits[1:] - splits[:-1]  # [B] the texts' own subwords
    # What the rows are read from: the texts' subwords, the prefix, and a PAD so that a
    # batch of blank texts (no subword) has something to read where it is masked.
    pool = tf.concat([values, tf.constant([*prefix, PAD_ID], tf.int32)], axis=0)  # [N + P + 1]
    length = tf.minimum(count + len(prefix), max_length - 1)  # [B] subwords kept
    position = tf.range(tf.maximum(tf.reduce_max(length), 0) + 1)[None, :]  # [1, S]
    own = splits[:-1, None] + position - len(prefix)  # [B, S] where a row's own subwords are
    index = tf.where(position < len(prefix), tf.size(values) + position, own)  # [B, S]
    # Read past a row's end only where masked.
    subword = tf.gather(pool, tf.minimum(index, tf.size(pool) - 1))  # [B, S]
    tail = tf.where(position == length[:, None], EOS_ID, PAD_ID)  # [B, S]
    return tf.where(position < length[:, None], subword, tail), count == 0


def _texts(tokenizer, ids, keep):
    """The strings of `ids` `[B, L]` as `tokenizer` (a `SubwordTokenizer`) writes them,
    each of its subwords where `keep` `[B, L]`, with the fast detokenizer."""
    # SentencePiece writes a text's first <unk> as " ⁇ " where the fast detokenizer drops
    # the text's first space: such a row starts with BOS, the piece " " in that tokenizer.
    first = keep & (tf.cumsum(tf.cast(keep, tf.int32), axis=1) == 1)  # [B, L]
    unknown_first = tf.reduce_any(first & tf.equal(ids, UNK_ID), axis=1)  # [B]
    ids = tf.concat([tf.fill([tf.shape(ids)[0], 1], BOS_ID), ids], axis=1)  # [B, 1 + L]
    keep = tf.concat([unknown_first[:, None], keep], axis=1)  # [B, 1 + L]
    values = tf.boolean_mask(ids, keep)  # [N]
    counts = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)  # [B]
    splits = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(counts)], axis=0)  # [B + 1]
    rows = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
    texts = fast_tokenizer(tokenizer, "target").detokenize(rows)
    # A copy by a built-in op: the Python interpreters cannot read a string tensor the
    # registrar's detokenizer kernel wrote (they crash), but read the copy.
    return tf.gather(texts, tf.range(tf.shape(ids)[0]))  # [B]


def litert_function(translator, search, target_lang=None):
    """The `tf.function` an exported file holds: `{"translation", "score"}` for a batch
    of strings, decoded with `search`, each source after the tag of `target_lang` (see
    the module docstring for how it differs from `Translator.serve`)."""
    _check_translator(translator, target_lang)
    prefix = tag_ids(translator.source_tokenizer, target_lang)
    decoder = Decoder(
        translator.model, translator.max_length,
        jit_compile=False, cache_lengths=None, drop_finished=False,
        controls=translator.controls,
    )  # fmt: skip
    vocab_size = translator.target_tokenizer.vocabulary_size

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")], autograph=False)
    def translate(text):
        # The fast tokenizers are made in there: their converted SentencePiece models
        # are constants of this graph.
        source, blank = _source_ids(
            translator.source_tokenizer, text, translator.max_length, prefix
        )
        ids, scores = decoder.decode(search, source)  # [B, L], [B]
        keep = kept_ids(ids, vocab_size) & ~blank[:, None]  # [B, L]
        return {
            "translation": _texts(translator.target_tokenizer, ids, keep),
            "score": tf.where(blank, 0.0, scores),
        }

    return translate


def convert(function, quantization=None, metadata=None):
    """The LiteRT flatbuffer (bytes) of the `tf.function` `function` as its one signature,
    `serving_default`, its weights stored as `quantization` says (`QUANTIZATIONS`), with
    `metadata` (a JSON object, or None) as its metadata entry `METADATA`; a ValueError
    if it needs an op that is neither a built-in nor one of `FAST_SENTENCEPIECE_OPS`."""
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
    inputs = [spec.name for spec in concrete.structured_input_signature[0]]
    return _finished(content, inputs, names, metadata)


def _finished(content, inputs, outputs, metadata):
    """The LiteRT flatbuffer `content` (bytes) with the signature `serving_default` of the
    main subgraph's inputs and outputs, named `inputs` and `outputs` in order, where the
    converter wrote none (it writes it only when it can save the function as a
    SavedModel, which a custom gradient in the graph, e.g. TF's swish, prevents), and
    with the metadata entry `METADATA` holding `metadata` as JSON unless it is None;
    re-packed as the converter adds its own conversion metadata."""
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    signed = schema.Model.GetRootAsModel(content, 0).SignatureDefsLength() > 0
    if signed and metadata is None:
        return content
    model = flatbuffer_utils.convert_bytearray_to_object(content)
    if not signed:
        main = model.subgraphs[0]
        signature = schema.SignatureDefT()
        signature.signatureKey, signature.subgraphIndex = "serving_default", 0
        signature.inputs, signature.outputs = [
            [_tensor_map(name, index) for name, index in zip(names, indices, strict=True)]
            for names, indices in ((inputs, main.inputs), (outputs, main.outputs))
        ]
        model.signatureDefs = [signature]
    if metadata is not None:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(json.dumps(metadata).encode(), np.uint8)
        model.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name, entry.buffer = METADATA, len(model.buffers) - 1
        model.metadata = [*(model.metadata or []), entry]
    return flatbuffer_utils.convert_object_to_bytearray(model)


def _tensor_map(name, index):
    from tensorflow.lite.python import schema_py_generated as schema

    tensor = schema.TensorMapT()
    tensor.name, tensor.tensorIndex = name, int(index)
    return tensor


def custom_ops(content):
    """The names of the custom ops the LiteRT flatbuffer `content` (bytes) uses."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))
    return sorted({op.customCode.decode() for op in model.operatorCodes if op.customCode})


def file_metadata(path):
    """What tfblocks recorded in the LiteRT file at `path`: the JSON object of its
    metadata entry `METADATA` (`{"target_lang": ...}`), `{}` if it has none."""
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.Model.GetRootAsModel(f.read(), 0)
    for i in range(model.MetadataLength()):
        entry = model.Metadata(i)
        if entry.Name() == METADATA.encode():
            return json.loads(model.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
    return {}


def export_litert(translator, path, quantization=None, beam_size=None, target_lang=None):
    """Writes `translator` as a LiteRT file (see the module docstring).

    Args:
        translator: a `Translator` of one model (not an Ensemble).
        path: the `.tflite` file to write (replaced if it exists); written beside it
            and renamed into place, so a failed export leaves nothing.
        quantization: None (float32 weights), `"dynamic"` (int8 weights) or
            `"float16"`.
        beam_size: None for the translator's search (greedy or beam search), or the
            beam size of the file's beam search (1: greedy search).
        target_lang: a model of several directions (`tfblocks.text.multilingual`): the
            one language the file translates into (its tag goes in front of each
            source, as `Translator(target_lang=)` puts it; recorded in the file's
            metadata, `file_metadata`); None: the translator's `target_lang`.

    Returns:
        `path`, absolute.

    Raises:
        ValueError: before anything is written, for an Ensemble, a sampling search, a
            `max_length` beyond the model's position table, an unknown `quantization`,
            `path` naming a directory, a tokenizer the file cannot reproduce
            (`litert_tokenizers.check_tokenizer`: a BPE model), or a model of several
            directions without `target_lang` (or with one it has no tag for).
    """
    _checks.check_choice("quantization", quantization, QUANTIZATIONS)
    search = litert_search(translator.search, beam_size)
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise ValueError(f"`path` must name a file, got the directory path={path!r}.")
    target_lang = translator.target_lang if target_lang is None else target_lang
    function = litert_function(translator, search, target_lang)
    content = convert(function, quantization, metadata={"target_lang": target_lang})

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(content)

    return replace_file(path, write)  # absolute: made so above
