"""`Translator`: raw strings in, translations out, as a `tf.Module` and a SavedModel.

The exported SavedModel needs only TensorFlow and tensorflow-text's ops (import
`tensorflow_text` before loading it): the SentencePiece models travel inside it as
graph constants, the decoder is the XLA-compiled loop of `tfblocks.decoding`, and
the signature is

    serving_default(text: tf.string [None]) -> {"translation": tf.string [None],
                                                "score": tf.float32 [None]}

Input handling: a source longer than `max_length` subwords is truncated to its first
`max_length - 1` subwords plus EOS; an empty (or all-blank) string translates to an
empty string with score 0.
"""

import os
import shutil
import tempfile

import tensorflow as tf

from tfblocks.decoding import Decoder
from tfblocks.models.transformer import EOS_ID, PAD_ID


class Translator(tf.Module):
    """Translates a batch of strings with a trained `build_transformer` model.

    Args:
        model: the trained model.
        source_tokenizer: a `tfblocks.text.SubwordTokenizer` for the source language.
        target_tokenizer: the target language's tokenizer (the same object for a
            shared vocabulary).
        max_length: the most subwords read from a source sentence and generated for
            a translation (EOS included).
        beam_size: beam width; 1 means greedy decoding.
        alpha: t2t length-penalty exponent for beam search.
        jit_compile: compile the decoding loop with XLA (a nested function of the
            signature); False traces it inline into the signature's own graph.
        name: the module's name.

    Example (training elided; any `build_transformer` model works):

    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["今日のランチはカレーだ。", "Today's lunch is curry."] * 20,
    ...                       vocab_size=40)
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size)
    >>> translator = Translator(tfblocks.build_transformer(hp), tok, tok, max_length=8)
    >>> translator(["今日のランチはカレーだ。", ""]).shape
    TensorShape([2])
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        max_length=64,
        beam_size=4,
        alpha=0.6,
        jit_compile=True,
        name=None,
    ):
        super().__init__(name=name)
        for arg, value in (("max_length", max_length), ("beam_size", beam_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{arg}` must be a positive integer, got {arg}={value!r}.")
        if max_length < 2:
            raise ValueError(f"`max_length` must be at least 2, got max_length={max_length}.")
        if not alpha >= 0:
            raise ValueError(f"`alpha` must be >= 0, got alpha={alpha!r}.")
        vocab = model.output.shape[-1]
        for arg, tokenizer in (("target_tokenizer", target_tokenizer),):
            if tokenizer.vocabulary_size > vocab:
                raise ValueError(
                    f"`{arg}` has {tokenizer.vocabulary_size} ids but the model's vocabulary "
                    f"has only {vocab}."
                )
        self.model = model
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        self.max_length = max_length
        self.beam_size = beam_size
        self.alpha = float(alpha)
        self.jit_compile = bool(jit_compile)
        self._decoder = Decoder(model, max_length, jit_compile=self.jit_compile)

    def encode_source(self, text):
        """Source ids `[B, max_length]` (0-padded, EOS-terminated).

        Padding to the fixed `max_length` keeps one compiled decoder per batch size.
        """
        ids = self.source_tokenizer.tokenize(text)  # ragged [B, (n)], ends with EOS
        ids = ids[:, :-1][:, : self.max_length - 1]  # [B, (≤ max_length − 1)]
        eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(text)[0], 1], EOS_ID))
        ids = tf.concat([ids, eos], axis=1)
        return ids.to_tensor(default_value=PAD_ID, shape=[None, self.max_length])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        """The `serving_default` signature: `{"translation", "score"}` for a batch."""
        source = self.encode_source(text)
        if self.jit_compile:  # the decoder's own (nested, XLA-compiled) functions
            if self.beam_size == 1:
                ids, scores = self._decoder.greedy(source)
            else:
                ids, scores = self._decoder.beam_search(source, self.beam_size, self.alpha)
        elif self.beam_size == 1:  # traced inline into this signature's graph
            ids, scores = self._decoder.decode_greedy(source)
        else:
            ids, scores = self._decoder.decode_beam(source, self.beam_size, self.alpha)
        translation = self.target_tokenizer.detokenize(ids)
        blank = tf.equal(tf.strings.length(tf.strings.strip(text)), 0)
        return {
            "translation": tf.where(blank, "", translation),
            "score": tf.where(blank, 0.0, scores),
        }

    def __call__(self, texts):
        """Translations of `texts` (a list of str or a 1-D string tensor), a string tensor."""
        texts = tf.convert_to_tensor(texts)
        if texts.dtype != tf.string or texts.shape.rank != 1:
            raise ValueError(
                "`texts` must be a 1-D batch of strings, got a tensor of dtype "
                f"{texts.dtype.name} and shape {texts.shape}."
            )
        return self.serve(texts)["translation"]

    def export(self, path):
        """Writes the SavedModel to `path` atomically.

        It is written to a temporary directory beside `path` and renamed into
        place only when complete; an existing export at `path` is replaced, and is
        left untouched if writing fails.

        Returns:
            `path`.
        """
        path = os.path.abspath(os.fspath(path))
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.tmp-", dir=parent)
        try:
            serve = self.serve.get_concrete_function()
            # Track the tf.Variables the signature reads (not only Keras' variable
            # wrappers): TF1-style loaders such as `saved_model_cli run` restore
            # only tracked tf.Variables.
            self._signature_variables = list(serve.variables)
            tf.saved_model.save(self, staging, signatures={"serving_default": serve})
            if os.path.exists(path):
                old = staging + ".old"
                os.rename(path, old)
                os.rename(staging, path)
                shutil.rmtree(old)
            else:
                os.rename(staging, path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return path
