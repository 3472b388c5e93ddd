"""What `Translator` and `Generator` share: `TextModule`, a `tf.Module` that takes a
batch of strings and returns strings (`__call__`, `export`), and the checks of its inputs.

A blank string (empty, or only Unicode whitespace: what Python's `str.strip()` removes)
is found in the graph by `blank_lines` (the RE2 pattern `BLANK`).
"""

import tensorflow as tf

from tfblocks import _checks
from tfblocks._files import replace_directory
from tfblocks.decoding import Decoder
from tfblocks.decoding.base import check_search

# A blank line, as an RE2 pattern: only the characters Python's `str.isspace()` accepts
# (Unicode's White_Space and U+001C–U+001F), which `str.strip()` removes. RE2's `\s` is
# ASCII only and `tf.strings.strip` strips ASCII whitespace only, hence the explicit class.
BLANK = (
    r"[\t-\r\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
    r"\x{205f}\x{3000}]*"
)


def blank_lines(text):
    """Which strings of the batch `text` (`tf.string [B]`) are blank (`BLANK`): `tf.bool [B]`.

    >>> blank_lines(tf.constant(["", " \t", "\u3000\u00a0\u2028", "a", "\u200b"])).numpy()
    array([ True,  True,  True, False, False])
    """
    return tf.strings.regex_full_match(text, BLANK)


def text_spec(name):
    """The string input `name` of a SavedModel signature, a batch `[B]`, declared of any
    shape: a loaded signature checks the dtype of what it is given but not its shape, so
    the signature's own `batch_input` refuses another rank when it is called.

    >>> text_spec("text")
    TensorSpec(shape=<unknown>, dtype=tf.string, name='text')
    """
    return tf.TensorSpec(None, tf.string, name=name)


# The string input of the `serving_default` signatures.
TEXT = text_spec("text")


def batch_input(text, name):
    """In a signature's graph: its string input `text` (called `name`) as a batch
    `tf.string [B]`; any other rank (a scalar, `[B, 1]`) fails the call with an
    InvalidArgumentError that names the input, before anything else runs."""
    # Ops in the graph: `text_spec` leaves the rank unknown until the call. Not
    # `tf.ensure_shape`: the runtime checks its shape as it specializes the graph for the
    # call's input shapes, before the assertion could run and name the input.
    one_d = tf.equal(tf.rank(text), 1)
    message = f"`{name}` must be a 1-D batch of strings, one per sentence"
    with tf.control_dependencies([tf.debugging.Assert(one_d, [message])]):
        return tf.reshape(text, [-1])  # [B]


def check_text_batch(texts, name="texts"):
    """`texts` (a list of str or a 1-D string tensor) as a 1-D string tensor, else a
    ValueError naming it (`name`)."""
    if isinstance(texts, str):
        raise ValueError(f"`{name}` must be a list of strings, got a single str: {texts!r:.80}.")
    if isinstance(texts, list | tuple):
        if not texts:  # `tf.convert_to_tensor([])` would be a float tensor
            return tf.constant([], tf.string)
        _checks.check_unicode_texts(name, texts)
    texts = tf.convert_to_tensor(texts)
    if texts.dtype != tf.string or texts.shape.rank != 1:
        raise ValueError(
            f"`{name}` must be a 1-D batch of strings, got a tensor of dtype "
            f"{texts.dtype.name} and shape {texts.shape}."
        )
    return texts


def check_pairs(sources, targets, names=("sources", "targets")):
    """`(sources, targets)` as 1-D string tensors of one length, else a ValueError naming
    them (`names`): what `score` takes in both engines, and texts with their
    `target_prefix`."""
    sources = check_text_batch(sources, names[0])
    targets = check_text_batch(targets, names[1])
    if sources.shape[0] != targets.shape[0]:
        raise ValueError(
            f"`{names[0]}` and `{names[1]}` must have the same length, got "
            f"{sources.shape[0]} {names[0]} and {targets.shape[0]} {names[1]}."
        )
    return sources, targets


def check_max_length(max_length):
    _checks.check_positive_int("max_length", max_length)
    if max_length < 2:
        raise ValueError(f"`max_length` must be at least 2, got max_length={max_length}.")


def check_vocabulary(arg, tokenizer, model):
    if tokenizer.vocabulary_size > model.vocab_size:
        raise ValueError(
            f"`{arg}` has {tokenizer.vocabulary_size} ids but the model's vocabulary "
            f"has only {model.vocab_size}."
        )


def check_model_kind(model, encoder_decoder):
    """A ValueError unless `model` is an encoder–decoder (`encoder_decoder`, what
    `Translator` serves) or a decoder-only language model (what `Generator` serves); a
    model that does not say (no `has_input`) is neither."""
    has_input = getattr(model, "has_input", None)
    if has_input is not None and bool(has_input) == encoder_decoder:
        return
    wanted, other = (
        ("an encoder–decoder `tfblocks.Transformer` (from `build_transformer`)",
         "`Generator` for a decoder-only language model")
        if encoder_decoder
        else ("a decoder-only language model (from `build_language_model`)",
              "`Translator` for an encoder–decoder")
    )  # fmt: skip
    raise ValueError(
        f"`model` must be {wanted}, got {type(model).__name__} "
        f"'{getattr(model, 'name', '')}'; use {other}."
    )


class TextModule(tf.Module):
    """Strings in, strings out: `__call__` and `export` shared by `Translator` and `Generator`.

    A subclass defines `serve` (the `serving_default` signature), `OUTPUT`, the key of
    its main string output, and `ENCODER_DECODER`, the kind of model it serves (True: an
    encoder–decoder; False: a decoder-only language model).
    """

    OUTPUT = None
    ENCODER_DECODER = None

    def _signatures(self):
        """The SavedModel's signatures: `{name: tf.function}`."""
        return {"serving_default": self.serve}

    def _optional(self, name, fn, input_signature):
        """`fn` as a `tf.function` of `input_signature`, made on first use and kept out of
        the module's tracked attributes: `tf.saved_model.save` traces every `tf.function`
        attribute of a module, so a signature that only some exports have (`n_best`,
        `align`) is kept here and saved only when `_signatures` names it."""
        functions = self.__dict__.setdefault("_optional_functions", {})  # not tracked
        if name not in functions:
            functions[name] = tf.function(fn, input_signature=input_signature, autograph=False)
        return functions[name]

    def _set_decoding(self, model, tokenizer, max_length, search, jit_compile, **decoder_options):
        """What both modules keep for decoding: checked, stored, and their `Decoder`.

        `model` must be of the kind the module serves (`ENCODER_DECODER`), and
        `tokenizer`, `(argument name, tokenizer)` of the ids it generates, must fit its
        vocabulary; both are checked before anything else.
        """
        check_model_kind(model, self.ENCODER_DECODER)
        check_vocabulary(*tokenizer, model)
        check_max_length(max_length)
        self.search = check_search(search, model.vocab_size)
        self.model = model
        self.max_length = max_length
        self.jit_compile = bool(jit_compile)
        self._decoder = Decoder(model, max_length, jit_compile=self.jit_compile, **decoder_options)
        self.cache_lengths = self._decoder.cache_lengths

    def __call__(self, texts):
        """Outputs for `texts` (a list of str or a 1-D string tensor), a string tensor."""
        return self.serve(check_text_batch(texts))[self.OUTPUT]

    def export(self, path):
        """Writes the SavedModel to `path`, replacing only an earlier tfblocks export.

        The SavedModel is written to a staging directory beside `path` and renamed
        into place when complete, together with a marker file (`tfblocks_export.json`)
        that lets a later export recognise and replace it. An existing export at
        `path` is renamed away, replaced and only then deleted; if writing fails it
        is left as it was. Folders left beside `path` by killed exports are cleaned up.

        Returns:
            `path`, absolute.

        Raises:
            ValueError: before anything is written, if `path` is `""`, `.`, the current
                directory or one of its parents, a regular file, or an existing
                directory that is not an export written by tfblocks (e.g. one holding
                a user's files, or a SavedModel from an older tfblocks: delete it
                yourself to reuse the path).
        """

        def write(staging):
            # Track the tf.Variables behind the model's weights (not only Keras'
            # variable wrappers): TF1-style loaders such as `saved_model_cli run`
            # restore only tracked tf.Variables. Taken from the model, not from a
            # concrete function of `serve`: one traced here would be traced again
            # inside `tf.saved_model.save` (its save context is part of the tracing
            # cache key); so the save alone traces the signature.
            self._signature_variables = [v.value for v in self.model.variables]
            tf.saved_model.save(self, staging, signatures=self._signatures())

        return replace_directory(path, write, kind="tfblocks-export")
