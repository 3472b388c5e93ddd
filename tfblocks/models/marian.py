"""`import_marian`: a Hugging Face Marian / OPUS-MT folder as a `tfblocks.Transformer`.

The folder is what `MarianMTModel.save_pretrained` and the OPUS-MT releases hold:
`config.json`, `model.safetensors` (read with the `safetensors` package's NumPy API: no
torch), `vocab.json` (piece → model id), `source.spm` and `target.spm` (SentencePiece), and
optionally `generation_config.json`. The model is built from `HParams` with Marian's
architecture options (Post-LN without a final LayerNorm, biases on every projection, the
FFN's activation, LayerNorm epsilon 1e-5, `final_logits_bias`, Hugging Face's timing signal
over d/2 timescales) and every weight is mapped; anything the file holds that tfblocks
cannot mean the same way is refused with the key and value.

Special ids: OPUS-MT numbers `</s>` 0, `<unk>` 1, the pieces, and `<pad>` last, has no BOS
and starts the decoder from pad's embedding. tfblocks' ids are fixed project-wide (pad 0,
EOS 1, unknown 2, BOS 3: the searches, losses and serving rely on them), so the importer
renumbers the vocabulary once instead: pad, EOS and unknown move to 0–2, a BOS row holding
the decoder-start embedding (pad's) is added at 3, and the other tokens follow in Marian's
order (tfblocks id = Marian id + 2). The embedding rows and the logits bias are permuted
alike (BOS's bias is `ADDED_ROW_MARGIN` below pad's, so it takes no probability that a float32
sum keeps, and a label-smoothed fine-tuning loss stays finite), and the SentencePiece
models are rewritten in that order (`tfblocks.text.reordered_tokenizer`), so the piece →
id mapping travels inside the tokenizers. The imported model gives every string the
probabilities the original gives it.
"""

import json
import os
from typing import NamedTuple

import numpy as np

from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfblocks.models import marian_npz
from tfblocks.models.builders import build_transformer
from tfblocks.models.hf_weights import read_weights
from tfblocks.models.hyperparameters import HParams, hparams
from tfblocks.models.marian_npz import ADDED_ROW_MARGIN
from tfblocks.models.marian_npz import fail as _fail
from tfblocks.text.tokenizers import SubwordTokenizer
from tfblocks.text.vocabulary import reordered_tokenizer

REQUIRED_FILES = ("config.json", "vocab.json", "source.spm", "target.spm")
WEIGHTS_FILE = "model.safetensors"
EMBEDDING_KEYS = (
    "model.shared.weight",
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
)
_ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}
# config.json options whose only supported value is Marian's (older transformers wrote them).
_FIXED = {
    "model_type": "marian",
    "is_encoder_decoder": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
    "share_encoder_decoder_embeddings": True,
}


class MarianImport(NamedTuple):
    """What `import_marian` returns."""

    model: object  # tfblocks.Transformer
    source_tokenizer: SubwordTokenizer
    target_tokenizer: SubwordTokenizer
    hparams: HParams
    generation: dict  # Hugging Face's decoding defaults tfblocks shares: num_beams, max_length


def import_marian(path):
    """Reads a Hugging Face Marian folder (OPUS-MT) into a `tfblocks.Transformer`.

    Args:
        path: the folder (`config.json`, `model.safetensors`, `vocab.json`, `source.spm`,
            `target.spm`; `generation_config.json` if present; the weights may also be
            sharded or in `pytorch_model.bin`: `tfblocks.models.hf_weights`), or a folder
            in Marian's own format (`model.npz` with `vocab.yml` and `source.spm` / `target.spm`, or
            with a SentencePiece vocabulary `*.spm`: see `tfblocks.models.marian_npz`).

    Returns:
        A `MarianImport(model, source_tokenizer, target_tokenizer, hparams, generation)`:
        the model in tfblocks' ids (see the module docstring), `SubwordTokenizer`s in
        the same ids, its `HParams` and `generation`, the folder's decoding defaults
        (`num_beams`, `max_length`; Marian's `decoder.yml`: `beam-size`) that tfblocks
        means the same way.

    Raises:
        ValueError: one line naming the file and what is wrong: a missing file, a `config.json`
            option tfblocks does not support (key and value), a vocabulary whose size is
            not the embedding's, a weight missing or of the wrong shape, a truncated or
            unreadable safetensors file.

    Example:

    >>> import os, tfblocks
    >>> folder = os.path.join(os.path.dirname(tfblocks.__file__), os.pardir, "tests", "data",
    ...                       "marian", "shared")  # a tiny random OPUS-MT folder
    >>> model, source_tokenizer, target_tokenizer, hp, generation = import_marian(folder)
    >>> ids = source_tokenizer.tokenize(["the cat sits on the mat."])
    >>> tuple(model({"inputs": ids.to_tensor(), "targets": ids.to_tensor()}).shape)
    (1, 18, 66)
    >>> generation, hp.ffn_activation, model.vocab_size
    ({'num_beams': 4, 'max_length': 64}, 'swish', 66)
    """
    path = os.fspath(path)
    if marian_npz.weights_file(path) is not None and not os.path.isfile(
        os.path.join(path, "config.json")
    ):  # Marian's own format
        config, vocab, weights, protos, options = marian_npz.read(path)
    else:
        config = _read_config(path)
        vocab = _read_json(os.path.join(path, "vocab.json"))
        weights, file = read_weights(path)
        protos = []
        for side in ("source", "target"):
            with open(os.path.join(path, f"{side}.spm"), "rb") as f:
                protos.append(f.read())
        options = {"generation": _generation(path), "file": file}
    size = int(config["vocab_size"])
    embedding = _embedding(weights, path)
    _check_vocab(vocab, size, embedding.shape, path)
    order = _order(config, vocab, size, path)  # Marian id of each tfblocks id
    generation = options.pop("generation")
    file = options.pop("file", os.path.join(path, WEIGHTS_FILE))
    hp = _hparams(config, weights, len(order), generation, **options)
    model = build_transformer(hp)
    _assign(model, weights, embedding, order, file)
    pieces = _pieces(vocab, order)
    tokenizers = [
        reordered_tokenizer(proto, pieces, name=f"{side}_tokenizer")
        for side, proto in zip(("source", "target"), protos, strict=True)
    ]
    return MarianImport(model, *tokenizers, hp, generation)


def _read_json(file):
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{file}: missing (not a Hugging Face Marian folder).") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{file}: not a JSON file ({error}).") from None


def _read_config(path):
    if not os.path.isdir(path):
        raise ValueError(f"{path}: not a folder (a Hugging Face Marian folder is expected).")
    for name in (*REQUIRED_FILES, WEIGHTS_FILE):
        if os.path.isdir(os.path.join(path, name)):  # there, but not what it should be
            _fail(os.path.join(path, name), "a folder where a file is expected.")
    for name in REQUIRED_FILES:
        if not os.path.isfile(os.path.join(path, name)):
            _fail(
                os.path.join(path, name),
                f"missing: a Hugging Face Marian folder holds {', '.join(REQUIRED_FILES)} "
                f"and {WEIGHTS_FILE}.",
            )
    file = os.path.join(path, "config.json")
    config = _read_json(file)
    for key, value in _FIXED.items():
        if key in config and config[key] != value:
            _fail(file, f"unsupported {key}={config[key]!r} (tfblocks imports {value!r}).")
    if "model_type" not in config:
        _fail(file, "no model_type (a Marian config.json has model_type='marian').")
    activation = config.get("activation_function", "swish")
    if activation not in _ACTIVATIONS:
        _fail(file, f"unsupported activation_function={activation!r} ({sorted(_ACTIVATIONS)}).")
    if os.path.isfile(os.path.join(path, "target_vocab.json")):
        _fail(
            os.path.join(path, "target_vocab.json"),
            "unsupported: separate source and target vocabularies (tfblocks imports one "
            "vocab.json for both sides).",
        )
    decoder_size, size = config.get("decoder_vocab_size"), config.get("vocab_size")
    if decoder_size not in (None, size):
        pieces = _count_pieces(os.path.join(path, "vocab.json"))
        if decoder_size == pieces:  # vocab_size is the one that disagrees with the pieces
            _fail(
                file,
                f"vocab_size={size!r}, but vocab.json holds {pieces} pieces (as "
                f"decoder_vocab_size={decoder_size!r} says).",
            )
        _fail(
            file,
            f"unsupported decoder_vocab_size={decoder_size!r}: a target vocabulary apart from "
            f"the source's (vocab_size={size!r}).",
        )
    check_shapes(config, file)
    return config


def check_shapes(config, file):
    """Refuses (one line naming `file`) a BART-family `config.json` whose encoder and
    decoder differ in heads or FFN width, or whose heads do not divide `d_model`."""
    for encoder, decoder in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if config.get(encoder) != config.get(decoder):
            _fail(
                file,
                f"unsupported {decoder}={config.get(decoder)!r}: tfblocks needs it equal to "
                f"{encoder}={config.get(encoder)!r}.",
            )
    heads, width = config.get("encoder_attention_heads"), config.get("d_model")
    if not isinstance(heads, int) or not isinstance(width, int):
        _fail(file, f"d_model={width!r} and encoder_attention_heads={heads!r} must be integers.")
    if heads < 1 or width % heads:
        _fail(
            file,
            f"d_model={width} is not a multiple of encoder_attention_heads={heads} (each head "
            "takes d_model / heads of the channels).",
        )


def _count_pieces(file):
    """The number of pieces of the `vocab.json` file, or None where it cannot be read."""
    try:
        with open(file, encoding="utf-8") as f:
            vocab = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return len(vocab) if isinstance(vocab, dict) else None


def _embedding(weights, path):
    for key in EMBEDDING_KEYS[:2]:
        if key in weights:
            return weights[key]
    _fail(os.path.join(path, WEIGHTS_FILE), "no model.shared.weight (the token embedding).")


def _check_vocab(vocab, size, shape, path):
    file = os.path.join(path, "vocab.json")
    if not isinstance(vocab, dict):
        _fail(file, "must map pieces to ids (a JSON object).")
    if len(vocab) != size or shape[0] != size:
        _fail(
            file,
            f"{len(vocab)} pieces, but config.json has vocab_size={size} and "
            f"model.safetensors' embedding {shape[0]} rows.",
        )
    if sorted(vocab.values()) != list(range(size)):
        _fail(file, f"the ids must be 0…{size - 1}, each once.")


def _order(config, vocab, size, path):
    """The Marian id of each tfblocks id: pad, EOS, unknown, decoder start, then the rest."""
    special = {
        PAD_ID: config.get("pad_token_id"),
        EOS_ID: config.get("eos_token_id"),
        UNK_ID: vocab.get("<unk>"),
        BOS_ID: config.get("decoder_start_token_id", config.get("pad_token_id")),
    }
    for tf_id, key in (
        (PAD_ID, "pad_token_id"),
        (EOS_ID, "eos_token_id"),
        (BOS_ID, "decoder_start_token_id"),
    ):
        if not isinstance(special[tf_id], int) or not 0 <= special[tf_id] < size:
            _fail(
                os.path.join(path, "config.json"),
                f"unsupported {key}={special[tf_id]!r} (an id below vocab_size={size}).",
            )
    if special[UNK_ID] is None:
        _fail(os.path.join(path, "vocab.json"), "no '<unk>' piece.")
    taken = {special[PAD_ID], special[EOS_ID], special[UNK_ID]}
    rest = [i for i in range(size) if i not in taken]
    return np.array([special[i] for i in (PAD_ID, EOS_ID, UNK_ID, BOS_ID)] + rest)


def _pieces(vocab, order):
    by_id = {i: piece for piece, i in vocab.items()}
    pieces = [by_id[int(i)] for i in order]
    pieces[BOS_ID] = "<s>" if "<s>" not in vocab else "<s:tfblocks>"
    return pieces


def _max_length(config, generation, stored):
    """`HParams.max_length`: the stored position table's size, or the longest output of
    `generation_config.json` (HF's `max_length` counts the decoder start, tfblocks' not),
    within the model's positions."""
    positions = int(config.get("max_position_embeddings", 512))
    if stored or "max_length" not in generation:
        return positions
    return max(2, min(positions, generation["max_length"] - 1))


def _hparams(
    config, weights, vocab_size, generation, norm_epsilon=1e-5, timescale_rule="half_depth"
):
    """The model's `HParams`; Hugging Face's LayerNorm epsilon and timing signal unless
    given (Marian's own: 1e-9, t2t's d/2 − 1 rule)."""
    stored = "model.encoder.embed_positions.weight" in weights
    return config_hparams(
        config,
        vocab_size,
        _max_length(config, generation, stored),
        activation="swish",
        norm_first=False,
        pos="emb" if stored else "timing",
        norm_epsilon=norm_epsilon,
        timescale_rule=timescale_rule,
        multiply_embedding_mode="sqrt_depth" if config.get("scale_embedding") else "none",
    )


def config_hparams(config, vocab_size, max_length, activation, **architecture):
    """The `HParams` of a Hugging Face BART-family `config.json` (Marian, M2M-100 / NLLB):
    its sizes, dropout rates and activation (`activation` when it names none), biases on
    every projection, a `final_logits_bias` (the added BOS row's margin), the decoder
    started from BOS, and the family's `architecture` fields."""
    return hparams(
        "transformer_base_v1",
        vocab_size=vocab_size,
        hidden_size=int(config["d_model"]),
        filter_size=int(config["encoder_ffn_dim"]),
        num_heads=int(config["encoder_attention_heads"]),
        num_encoder_layers=int(config["encoder_layers"]),
        num_decoder_layers=int(config["decoder_layers"]),
        layer_prepostprocess_dropout=float(config.get("dropout", 0.1)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        relu_dropout=float(config.get("activation_dropout", 0.0)),
        shared_embedding_and_softmax_weights=bool(config.get("tie_word_embeddings", True)),
        max_length=max_length,
        ffn_activation=_ACTIVATIONS[config.get("activation_function", activation)],
        attention_use_bias=True,
        ffn_use_bias=True,
        final_logits_bias=True,
        decoder_start="bos",
        **architecture,
    )


def _assign(model, weights, embedding, order, file):
    """Every Marian weight into its tfblocks variable (kernels transposed: torch keeps
    `[out, in]`, Keras `[in, out]`); a missing key or another shape is refused, naming
    `file` (the weights file)."""
    used = set()

    def take(key, shape):
        if key not in weights:
            _fail(file, f"no weight {key}.")
        value = weights[key]
        if tuple(value.shape) != tuple(shape):
            _fail(file, f"{key} has shape {tuple(value.shape)}, expected {tuple(shape)}.")
        used.add(key)
        return value

    def dense(layer, key):
        kernel = layer.kernel
        layer.kernel.assign(take(f"{key}.weight", kernel.shape[::-1]).T)
        layer.bias.assign(take(f"{key}.bias", layer.bias.shape))

    def norm(layer, key):
        layer.gamma.assign(take(f"{key}.weight", layer.gamma.shape))
        layer.beta.assign(take(f"{key}.bias", layer.beta.shape))

    def attention(layer, key):
        for name, torch_name in (
            ("query_dense", "q_proj"),
            ("key_dense", "k_proj"),
            ("value_dense", "v_proj"),
            ("output_dense", "out_proj"),
        ):
            dense(getattr(layer, name), f"{key}.{torch_name}")

    def block(layer, key):
        attention(layer.self_attention, f"{key}.self_attn")
        norm(layer.self_attention_norm, f"{key}.self_attn_layer_norm")
        if layer.cross_attention is not None:
            attention(layer.cross_attention, f"{key}.encoder_attn")
            norm(layer.cross_attention_norm, f"{key}.encoder_attn_layer_norm")
        dense(layer.ffn.filter_dense, f"{key}.fc1")
        dense(layer.ffn.output_dense, f"{key}.fc2")
        norm(layer.ffn_norm, f"{key}.final_layer_norm")

    table = embedding[order]  # [V + 1, d]: tfblocks' rows
    for layer in {id(e): e for e in (model.source_embedding, model.target_embedding)}.values():
        layer.embeddings.assign(table)
    for side, layer in (("encoder", model.source_embedding), ("decoder", model.target_embedding)):
        key = f"model.{side}.embed_positions.weight"
        if layer.position_embeddings is not None:
            layer.position_embeddings.assign(take(key, layer.position_embeddings.shape))
    for i, layer in enumerate(model.encoder_blocks):
        block(layer, f"model.encoder.layers.{i}")
    for i, layer in enumerate(model.decoder_blocks):
        block(layer, f"model.decoder.layers.{i}")
    for layer, key in (
        (model.encoder_norm, "model.encoder"),
        (model.decoder_norm, "model.decoder"),
    ):
        if layer is not None:  # Pre-LN's final LayerNorms (M2M-100 / NLLB)
            norm(layer, f"{key}.layer_norm")
    if model.softmax is not None:
        head = take("lm_head.weight", embedding.shape)
        model.softmax.kernel.assign(head[order].T)  # [d, V + 1]
    if "final_logits_bias" in weights:
        bias = take("final_logits_bias", (1, embedding.shape[0]))[0][order].copy()
    else:  # none (M2M-100 / NLLB; Hugging Face starts Marian's at zeros too)
        bias = np.zeros(len(order), "float32")
    bias[BOS_ID] -= ADDED_ROW_MARGIN  # the added BOS row (the start token's): never predicted
    model.logits_bias.bias.assign(bias)
    # The token embedding under its other names (tied copies), read above as `embedding`.
    used.update(EMBEDDING_KEYS + (() if model.softmax is not None else ("lm_head.weight",)))
    # Older M2M-100 files keep the sinusoid they compute (a buffer): tfblocks computes it.
    used.update(key for key in weights if key.endswith(".embed_positions.weights"))
    unread = sorted(set(weights) - used)
    if unread:  # a part of another architecture: refused rather than dropped
        _fail(file, f"unsupported weight {unread[0]} (tfblocks has no place for it).")


def _generation(path):
    """The decoding defaults of `generation_config.json` tfblocks shares (beam size, maximum
    length); {} when the folder has none."""
    file = os.path.join(path, "generation_config.json")
    if not os.path.isfile(file):
        return {}
    values = _read_json(file)
    return {key: int(values[key]) for key in ("num_beams", "max_length") if key in values}
