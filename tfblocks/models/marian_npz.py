"""Marian's own format for `import_marian`: `model.npz` with `vocab.yml` or SentencePiece files.

A folder as the `marian` toolkit (and the original OPUS-MT releases) writes it: the weights
in one `.npz` file (`model.npz`, else the folder's only `*.npz`) holding the training
options as `special:model.yml`, the vocabulary as `vocab.yml` (else one `*.vocab.yml`:
piece → id) with the SentencePiece models `source.spm` and `target.spm`, or as a
SentencePiece model `*.spm` that is both vocabulary and tokenizer; `decoder.yml` (its
`beam-size`) when present.

`read` turns it into what the Hugging Face reader of `tfblocks.models.marian` gives, so
that one path builds the model: Marian's names become Hugging Face's (`encoder_l1_self_Wq`
→ `model.encoder.layers.0.self_attn.q_proj.weight`, kernels transposed to `[out, in]`),
and the vocabulary gets a `<pad>` at its end with a zero embedding row and a logits bias
`ADDED_ROW_MARGIN` below the lowest of the model's: Marian has no pad and starts the
decoder from a zero vector, which the zero row is (the model's BOS row is pad's, as for
OPUS-MT). The rest is Marian's semantics:
LayerNorm epsilon 1e-9, the timing signal over d/2 − 1 timescales (t2t's rule, sin | cos
concatenated, positions from 0) or the trained table `Wpos`, embeddings × √d.

Supported: Post-LN transformers (`transformer-preprocess: ""`, `transformer-postprocess:
dan`), swish or relu FFN, all embeddings tied (`tied-embeddings-all`, `Wemb`) or an
output layer of its own (`decoder_ff_logit_out_W`). Anything else is refused with the
option and its value, or the weight tfblocks has no place for.
"""

import os

import numpy as np

# An added row's (pad's, BOS's) logits bias sits this far below another's: a probability
# e^-30 ≈ 1e-13 times smaller, lost in any float32 sum, while the label-smoothed loss of
# fine-tuning, which gives every class ε/(V−1), stays finite (a bias of −1e9 would add
# ε/(V−1) · 1e9 to every token's loss).
ADDED_ROW_MARGIN = 30.0
CONFIG_KEY = "special:model.yml"
# Marian's options whose only supported value is given (the defaults Marian writes).
_FIXED = {
    "type": "transformer",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-top": "",
    "transformer-no-projection": "false",
    "transformer-ffn-depth": "2",
    "right-left": "false",
}
_POSTPROCESS_EMB = ("", "d")  # dropout only: no LayerNorm on the embeddings
_ACTIVATIONS = {"swish": "swish", "relu": "relu"}  # Marian's gelu is x·σ(1.702x), not erf's
# Marian's name of a block's part → Hugging Face's.
_ATTENTION = {"self": "self_attn", "context": "encoder_attn"}
_PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def read(path):
    """`(config, vocab, weights, protos, options)` of a Marian folder, in the terms of a
    Hugging Face Marian folder (`config.json`'s keys, `vocab.json`, safetensors names,
    the source and target SentencePiece models' bytes) plus `options` for `_hparams`
    (`norm_epsilon`, `timescale_rule`, `generation`, `file`)."""
    file = _weights_file(path)
    weights = _load(file)
    marian = _options(weights, file)
    vocab, protos = _vocabulary(path)
    size = len(vocab)
    if "<pad>" in vocab:
        fail(path, "the vocabulary holds '<pad>' already; tfblocks adds its own pad.")
    vocab["<pad>"] = size  # the added row: Marian's zero decoder start
    if "</s>" not in vocab:
        fail(path, "the vocabulary has no '</s>' (Marian's end of sentence).")
    converted, positions = _convert(weights, marian, size, file)
    dim = int(marian["dim-emb"])
    heads = int(marian["transformer-heads"])
    ffn = int(marian["transformer-dim-ffn"])
    config = {
        "model_type": "marian",
        "vocab_size": size + 1,
        "d_model": dim,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_layers": int(marian["enc-depth"]),
        "decoder_layers": int(marian["dec-depth"]),
        "activation_function": _ACTIVATIONS[marian["transformer-ffn-activation"]],
        "pad_token_id": size,
        "eos_token_id": vocab["</s>"],
        "decoder_start_token_id": size,
        "scale_embedding": True,
        "tie_word_embeddings": "lm_head.weight" not in converted,
        "max_position_embeddings": positions or 512,
        "dropout": float(marian.get("transformer-dropout", 0.1) or 0.0),
        "attention_dropout": float(marian.get("transformer-dropout-attention", 0) or 0.0),
        "activation_dropout": float(marian.get("transformer-dropout-ffn", 0) or 0.0),
    }
    options = {
        "norm_epsilon": 1e-9,
        "timescale_rule": "t2t",
        "generation": _generation(path),
        "file": file,
    }
    return config, vocab, converted, protos, options


def fail(path, message):
    """The one-line ValueError of an import: `path` (the file), then what is wrong."""
    raise ValueError(f"{path}: {message}")


def weights_file(path):
    """The `.npz` weights of a folder in Marian's own format: `model.npz`, else the one
    `*.npz` file; None when there is none."""
    if not os.path.isdir(path):
        return None
    if os.path.isfile(os.path.join(path, "model.npz")):
        return os.path.join(path, "model.npz")
    found = sorted(name for name in os.listdir(path) if name.endswith(".npz"))
    return os.path.join(path, found[0]) if len(found) == 1 else None


def _weights_file(path):
    file = weights_file(path)
    if file is None:
        fail(os.path.join(path, "model.npz"), "missing (Marian's weights).")
    return file


def _load(file):
    try:
        with open(file, "rb") as f, np.load(f, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError) as error:
        fail(file, f"not a readable .npz file (truncated?): {error}.")
    except Exception as error:  # zipfile.BadZipFile and zlib errors of a damaged file
        fail(file, f"not a readable .npz file (truncated?): {type(error).__name__}: {error}.")


def _yaml(text, file):
    """A YAML document with every scalar a str (so that pieces such as `yes`, `null` or
    `1` stay strings)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - a dependency of tfblocks
        raise ImportError(
            "Reading Marian's .yml files needs PyYAML: `pip install pyyaml`."
        ) from None
    loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as error:
        fail(file, f"not a YAML file: {str(error).splitlines()[0]}.")


def _options(weights, file):
    if CONFIG_KEY not in weights:
        fail(file, f"no {CONFIG_KEY!r} (the options Marian stores with the weights).")
    raw = np.asarray(weights.pop(CONFIG_KEY)).tobytes().rstrip(b"\0")
    marian = _yaml(raw.decode("utf-8"), f"{file}:{CONFIG_KEY}")
    if not isinstance(marian, dict):
        fail(file, f"{CONFIG_KEY} is not a mapping of options.")
    where = f"{file}:{CONFIG_KEY}"
    for key in ("dim-emb", "enc-depth", "dec-depth", "transformer-heads", "transformer-dim-ffn"):
        if key not in marian:
            fail(where, f"no option {key}.")
    for key, value in _FIXED.items():
        if str(marian.get(key, value)) != value:
            fail(where, f"unsupported {key}={marian[key]!r} (tfblocks imports {value!r}).")
    emb = str(marian.get("transformer-postprocess-emb", "d"))
    if emb not in _POSTPROCESS_EMB:
        fail(where, f"unsupported transformer-postprocess-emb={emb!r} ({_POSTPROCESS_EMB}).")
    activation = str(marian.get("transformer-ffn-activation", "swish"))
    if activation not in _ACTIVATIONS:
        fail(
            where,
            f"unsupported transformer-ffn-activation={activation!r} ({sorted(_ACTIVATIONS)}).",
        )
    marian["transformer-ffn-activation"] = activation
    for key, same in (
        ("transformer-decoder-dim-ffn", str(marian["transformer-dim-ffn"])),
        ("transformer-decoder-ffn-depth", "2"),
    ):
        if str(marian.get(key, "0")) not in ("0", same):
            fail(
                where,
                f"unsupported {key}={marian[key]!r}: the decoder's FFN must be the encoder's.",
            )
    return marian


def _vocabulary(path):
    """`(vocab, [source proto, target proto])`: the pieces' Marian ids, and the
    SentencePiece models' bytes."""
    names = sorted(os.listdir(path))
    ymls = ["vocab.yml"] if "vocab.yml" in names else [n for n in names if n.endswith(".vocab.yml")]
    spms = [n for n in names if n.endswith(".spm") and n not in ("source.spm", "target.spm")]
    if ymls:
        texts = []
        for name in ymls:
            with open(os.path.join(path, name), encoding="utf-8") as f:
                texts.append(f.read())
        if len(set(texts)) > 1:
            fail(
                os.path.join(path, ymls[1]),
                "unsupported: separate source and target vocabularies (tfblocks imports one "
                f"vocabulary for both sides; the folder has {', '.join(ymls)}).",
            )
        file = os.path.join(path, ymls[0])
        table = _yaml(texts[0], file)
        if not isinstance(table, dict):
            fail(file, "must map pieces to ids.")
        try:
            vocab = {str(piece): int(i) for piece, i in table.items()}
        except (TypeError, ValueError):
            fail(file, "every id must be an integer.")
        protos = []
        for side in ("source", "target"):
            spm = os.path.join(path, f"{side}.spm")
            if not os.path.isfile(spm):
                fail(
                    spm,
                    f"missing: with {ymls[0]}, the SentencePiece models source.spm and "
                    "target.spm tokenize (tfblocks imports SentencePiece models only).",
                )
            with open(spm, "rb") as f:
                protos.append(f.read())
        return vocab, protos
    if spms:
        protos = []
        for name in spms:
            with open(os.path.join(path, name), "rb") as f:
                protos.append(f.read())
        if len(set(protos)) > 1:
            fail(
                os.path.join(path, spms[1]),
                "unsupported: separate source and target vocabularies (tfblocks imports one "
                f"vocabulary for both sides; the folder has {', '.join(spms)}).",
            )
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_proto=protos[0])
        vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
        return vocab, [protos[0], protos[0]]
    fail(
        os.path.join(path, "vocab.yml"),
        "missing: a Marian folder holds its vocabulary as vocab.yml (or *.vocab.yml, with "
        "source.spm and target.spm) or as a SentencePiece model *.spm.",
    )


def _convert(weights, marian, size, file):
    """Marian's weights under Hugging Face's names; and the trained position table's
    length (0 when the model computes its timing signal)."""
    out, used = {}, set()

    def take(key, shape=None):
        if key not in weights:
            fail(file, f"no weight {key}.")
        value = np.asarray(weights[key], np.float32)
        if shape is not None and value.size == int(np.prod(shape)) and value.ndim <= 2:
            value = value.reshape(shape)  # Marian keeps biases and LayerNorm as [1, d]
        if shape is not None and tuple(value.shape) != tuple(shape):
            fail(file, f"{key} has shape {tuple(value.shape)}, expected {tuple(shape)}.")
        used.add(key)
        return value

    dim = int(marian["dim-emb"])
    ffn = int(marian["transformer-dim-ffn"])
    for separate in ("encoder_Wemb", "decoder_Wemb"):
        if separate in weights:
            fail(
                file,
                f"unsupported weight {separate}: embeddings not tied across source and "
                "target (tied-embeddings-all: false).",
            )
    embedding = take("Wemb", (size, dim))
    out["model.shared.weight"] = np.concatenate([embedding, np.zeros([1, dim], np.float32)])

    def dense(marian_key, bias_key, hf_key, shape):  # shape [in, out]
        out[f"{hf_key}.weight"] = take(marian_key, shape).T.copy()
        out[f"{hf_key}.bias"] = take(bias_key, (shape[1],))

    def norm(marian_key, hf_key):
        out[f"{hf_key}.weight"] = take(f"{marian_key}_ln_scale", (dim,))
        out[f"{hf_key}.bias"] = take(f"{marian_key}_ln_bias", (dim,))

    for side, depth in (("encoder", "enc-depth"), ("decoder", "dec-depth")):
        for i in range(int(marian[depth])):
            marian_block, hf_block = f"{side}_l{i + 1}", f"model.{side}.layers.{i}"
            for part in ("self", "context") if side == "decoder" else ("self",):
                scope, hf = f"{marian_block}_{part}", f"{hf_block}.{_ATTENTION[part]}"
                for letter, projection in _PROJECTIONS.items():
                    dense(
                        f"{scope}_W{letter}", f"{scope}_b{letter}", f"{hf}.{projection}", (dim, dim)
                    )
                norm(f"{scope}_Wo", f"{hf}_layer_norm")
            scope = f"{marian_block}_ffn"
            dense(f"{scope}_W1", f"{scope}_b1", f"{hf_block}.fc1", (dim, ffn))
            dense(f"{scope}_W2", f"{scope}_b2", f"{hf_block}.fc2", (ffn, dim))
            norm(f"{scope}_ffn", f"{hf_block}.final_layer_norm")
    bias = take("decoder_ff_logit_out_b", (size,))
    pad = bias.min() - ADDED_ROW_MARGIN  # the zero row's logit is its bias alone
    out["final_logits_bias"] = np.concatenate([bias, [pad]]).astype(np.float32)[None]
    if "decoder_ff_logit_out_W" in weights:  # an output layer of its own: [d, V]
        head = take("decoder_ff_logit_out_W", (dim, size)).T
        out["lm_head.weight"] = np.concatenate([head, np.zeros([1, dim], np.float32)])
    positions = 0
    if "Wpos" in weights:  # trained positions (transformer-train-position-embeddings)
        table = take("Wpos")
        if table.ndim != 2 or table.shape[1] != dim:
            fail(file, f"Wpos has shape {table.shape}, expected (positions, {dim}).")
        positions = table.shape[0]
        out["model.encoder.embed_positions.weight"] = table
        out["model.decoder.embed_positions.weight"] = table
    unread = sorted(set(weights) - used)
    if unread:  # a part of another architecture: refused rather than dropped
        fail(file, f"unsupported weight {unread[0]} (tfblocks has no place for it).")
    return out, positions


def _generation(path):
    """`{"num_beams": ...}` from Marian's `decoder.yml` (`beam-size`), {} without one."""
    file = os.path.join(path, "decoder.yml")
    if not os.path.isfile(file):
        return {}
    with open(file, encoding="utf-8") as f:
        values = _yaml(f.read(), file)
    if isinstance(values, dict) and str(values.get("beam-size", "")).isdigit():
        return {"num_beams": int(values["beam-size"])}
    return {}
