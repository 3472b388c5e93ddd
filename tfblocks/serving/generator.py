"""`Generator`: prompts in, continuations out, with a decoder-only language model
(`build_language_model`), as a `tf.Module` and a SavedModel.

It decodes with a search of `tfblocks.decoding` (`search=`; `Greedy()` by
default) through `tfblocks.decoding.Decoder`, and exports as `Translator` does
(`export(path)`).
"""

import tensorflow as tf

from tfblocks import _backend
from tfblocks.decoding import Greedy
from tfblocks.ids import PAD_ID
from tfblocks.serving.text_module import TEXT, TextModule, batch_input


class Generator(TextModule):
    """Continues prompts with a trained decoder-only language model.

    The prompt is tokenized (without EOS) and forced as the first tokens of the
    sequence; the search then continues it until EOS or `max_length` tokens in
    all (prompt included). The output is the text after the prompt; its score is the
    search's score of the whole sequence, the prompt's tokens included.

    Args:
        model: a trained `build_language_model` model.
        tokenizer: its `tfblocks.text.SubwordTokenizer`.
        max_length: the most tokens of prompt + continuation (EOS included); a
            longer prompt is cut to its first `max_length - 1` tokens.
        search: a `tfblocks.decoding` search: `Greedy()` (default),
            `Sampling(temperature, top_k, top_p, seed)` or `BeamSearch(beam_size, alpha)`.
        jit_compile: compile the search with XLA.
        cache_lengths: the sizes the self-attention caches grow through (as
            `Translator`'s).
        name: the module's name.

    The SavedModel's signature is `serving_default(text: tf.string [None]) ->
    {"continuation": tf.string [None], "score": tf.float32 [None]}`.

    Example (training elided):

    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["Today's lunch is curry."] * 20, vocab_size=30)
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size,
    ...                       num_encoder_layers=0)
    >>> generator = Generator(tfblocks.build_language_model(hp), tok, max_length=8)
    >>> generator(["Today's lunch", ""]).shape
    TensorShape([2])
    """

    OUTPUT = "continuation"
    ENCODER_DECODER = False

    def __init__(
        self,
        model,
        tokenizer,
        max_length=64,
        search=None,
        jit_compile=True,
        cache_lengths="auto",
        name=None,
    ):
        _backend.require_tensorflow("Generator")
        super().__init__(name=name)
        search = Greedy() if search is None else search
        self._set_decoding(
            model, ("tokenizer", tokenizer), max_length, search, jit_compile,
            cache_lengths=cache_lengths,
        )  # fmt: skip
        self.tokenizer = tokenizer

    def encode_prompt(self, text):
        """Prompt ids `[B, P]` without EOS, 0-padded, at most `max_length - 1` long."""
        ids = self.tokenizer.tokenize(text)  # ragged [B, (n)], ends with EOS
        ids = ids[:, :-1][:, : self.max_length - 1]
        return ids.to_tensor(default_value=PAD_ID)

    @tf.function(input_signature=[TEXT], autograph=False)
    def serve(self, text):
        """The `serving_default` signature: `{"continuation", "score"}` for a batch."""
        prompt = self.encode_prompt(batch_input(text, "text"))  # [B, P]
        ids, scores = self._decoder.decode(self.search, prefix=prompt)
        # The prompt's positions become padding, which detokenize drops.
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(prompt, PAD_ID), tf.int32), axis=1)
        after = tf.range(tf.shape(ids)[1])[None, :] >= lengths[:, None]  # [B, L]
        continuation = self.tokenizer.detokenize(tf.where(after, ids, PAD_ID))
        return {"continuation": continuation, "score": scores}
