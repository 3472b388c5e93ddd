"""A trained model with its tokenizer and hyper-parameters, in the KerasHub preset layout.

`save_preset(model, tokenizer, path, hp)` writes a directory that KerasHub's own
loaders read:

    path/config.json              the `Transformer`'s config (`Backbone.save_to_preset`)
    path/model.weights.h5         its weights
    path/metadata.json            KerasHub / Keras versions, parameter count
    path/tokenizer.json           a `keras_hub.tokenizers.SentencePieceTokenizer` config
    path/assets/tokenizer/vocabulary.spm   the SentencePiece model
    path/hparams.json             the `HParams` of the training recipe (tfblocks' own)
    path/target_tokenizer.model   with separate vocabularies: the target side's
                                  SentencePiece model (tfblocks' own; the KerasHub
                                  tokenizer above is then the source side's)
    path/tfblocks_export.json     tfblocks' marker (see `tfblocks/_files.py`)

so `tfblocks.Transformer.from_preset(path)` and
`TransformerTokenizer.from_preset(path)` (a KerasHub tokenizer layer) load it too, and
`load_preset(path)` gives back the model, a `tfblocks.text.SubwordTokenizer` and the
`HParams`. The directory is written whole (staging folder, then a rename) and only
replaces an earlier preset written by tfblocks.
"""

import dataclasses
import json
import os
from typing import NamedTuple

import keras
import keras_hub

from tfblocks._files import read_json, replace_directory
from tfblocks.models.hyperparameters import HParams
from tfblocks.models.transformer import Transformer
from tfblocks.text import SubwordTokenizer
from tfblocks.text.charsmaps import with_identity_charsmap

HPARAMS_FILE = "hparams.json"
TARGET_TOKENIZER_FILE = "target_tokenizer.model"
KIND = "tfblocks-preset"


@keras.saving.register_keras_serializable(package="tfblocks")
class TransformerTokenizer(keras_hub.tokenizers.SentencePieceTokenizer):
    """KerasHub's SentencePiece tokenizer layer, paired with `Transformer` presets.

    The preset form of a `tfblocks.text.SubwordTokenizer` (same SentencePiece model,
    so the same pieces; KerasHub's layer adds no EOS, ours does).

    Example:

    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["Today's lunch is curry."] * 20, vocab_size=30)
    >>> TransformerTokenizer(proto=tok.proto).vocabulary_size() == tok.vocabulary_size
    True
    """

    backbone_cls = Transformer

    def _set_proto_tf(self, proto):
        # The same segmentation, without the op's "precompiled_charsmap is empty" line.
        super()._set_proto_tf(with_identity_charsmap(proto))


class Preset(NamedTuple):
    """What `load_preset` returns."""

    model: Transformer
    tokenizer: SubwordTokenizer
    hparams: HParams | None


def save_preset(model, tokenizer, path, hp=None, target_tokenizer=None):
    """Writes `model`, `tokenizer` (and `hp`) to `path` in the KerasHub preset layout.

    Args:
        model: a `tfblocks.Transformer`.
        tokenizer: its `tfblocks.text.SubwordTokenizer` (the shared vocabulary, or the
            source side's when `target_tokenizer` is another one).
        path: the preset directory; refused if it exists and is not a preset written by
            tfblocks (see `tfblocks/_files.py`).
        hp: optional `HParams` of the training recipe, stored as `hparams.json`.
        target_tokenizer: the target side's tokenizer when the vocabularies are separate
            (`load_target_tokenizer` reads it back); None or `tokenizer`: shared.

    Returns:
        `path`, absolute.

    Example:

    >>> import tempfile, os
    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["Today's lunch is curry."] * 20, vocab_size=30)
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size)
    >>> path = save_preset(tfblocks.build_transformer(hp), tok,
    ...                    os.path.join(tempfile.mkdtemp(), "preset"), hp)
    >>> loaded = load_preset(path)
    >>> loaded.hparams == hp, loaded.tokenizer.vocabulary_size == tok.vocabulary_size
    (True, True)
    """
    if not isinstance(model, Transformer):
        raise ValueError(
            f"`model` must be a tfblocks.Transformer, got {type(model).__name__} '{model.name}'."
        )
    if target_tokenizer is tokenizer:
        target_tokenizer = None
    for name, value in (("tokenizer", tokenizer), ("target_tokenizer", target_tokenizer)):
        if value is not None and value.vocabulary_size > model.vocab_size:
            raise ValueError(
                f"`{name}` has {value.vocabulary_size} ids but the model's vocabulary has "
                f"only {model.vocab_size}."
            )
    if hp is not None and not isinstance(hp, HParams):
        raise ValueError(f"`hp` must be an HParams or None, got {type(hp).__name__}.")

    def write(staging):
        model.save_to_preset(staging)
        keras_tokenizer = TransformerTokenizer(proto=tokenizer.proto)
        keras_tokenizer.save_to_preset(staging)
        if hp is not None:
            with open(os.path.join(staging, HPARAMS_FILE), "w", encoding="utf-8") as f:
                json.dump(dataclasses.asdict(hp), f, indent=2)
        if target_tokenizer is not None:
            target_tokenizer.save(os.path.join(staging, TARGET_TOKENIZER_FILE))

    return replace_directory(path, write, kind=KIND)


def load_preset(path):
    """Loads what `save_preset` wrote: `Preset(model, tokenizer, hparams)`.

    Args:
        path: a preset directory written by `save_preset`.

    Returns:
        A `Preset`; `hparams` is None when none was saved.

    Example:

    >>> import tempfile, os
    >>> import tfblocks
    >>> from tfblocks.text import train_tokenizer
    >>> tok = train_tokenizer(["Today's lunch is curry."] * 20, vocab_size=30)
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=tok.vocabulary_size,
    ...                       num_encoder_layers=0)
    >>> path = save_preset(tfblocks.build_language_model(hp), tok,
    ...                    os.path.join(tempfile.mkdtemp(), "lm"))
    >>> model, tokenizer, saved_hp = load_preset(path)
    >>> model.has_input, saved_hp is None
    (False, True)
    """
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(
            f"`path` must be a preset directory written by save_preset (with config.json), "
            f"got path={path!r}."
        )
    hparams_path = os.path.join(path, HPARAMS_FILE)  # checked first: it is quick to read
    hp = _load_hparams(hparams_path) if os.path.exists(hparams_path) else None
    model = _from_preset(Transformer, path, "config.json")
    keras_tokenizer = _from_preset(TransformerTokenizer, path, "tokenizer.json")
    tokenizer = SubwordTokenizer(keras_tokenizer.proto)
    return Preset(model, tokenizer, hp)


def _from_preset(cls, path, name):
    """`cls.from_preset(path)`; what Keras refuses in the preset's file `name` (in safe
    mode, a class that is neither Keras' nor registered) is a short ValueError naming
    the file instead of Keras' TypeError."""
    try:
        return cls.from_preset(path)
    except (TypeError, ValueError) as error:
        reason = " ".join(str(error).split())
        raise ValueError(f"{os.path.join(path, name)} cannot be loaded: {reason:.200}") from None


def load_target_tokenizer(path):
    """The target side's `SubwordTokenizer` of the preset at `path` when it was saved
    with separate vocabularies, else None (the vocabulary is `load_preset`'s shared one).

    Example:

    >>> import tempfile, os
    >>> load_target_tokenizer(tempfile.mkdtemp()) is None
    True
    """
    file = os.path.join(os.fspath(path), TARGET_TOKENIZER_FILE)
    return SubwordTokenizer.load(file) if os.path.isfile(file) else None


def _load_hparams(path):
    """The `HParams` of a preset's `hparams.json`; a ValueError naming the file (and the
    field) when it is not JSON, not an object, or holds an unknown field or a bad value."""
    values = read_json(path, "a JSON file of HParams", holds="a JSON object of HParams fields")
    known = {field.name for field in dataclasses.fields(HParams)}
    unknown = [name for name in values if name not in known]
    if unknown:
        raise ValueError(
            f"{path} has an unknown HParams field: {unknown[0]}={values[unknown[0]]!r} "
            f"(fields: {', '.join(sorted(known))})."
        )
    try:
        return HParams(**values)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
