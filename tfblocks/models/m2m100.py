"""`import_m2m100` / `import_nllb`: Hugging Face M2M-100 and NLLB-200 folders as a
`tfblocks.Transformer`.

Both are fairseq's multilingual Transformer, saved by transformers as `model_type:
"m2m_100"`: Pre-LN blocks with a final LayerNorm on the encoder and on the decoder,
biases on every projection, a relu FFN, LayerNorm epsilon 1e-5, embeddings × √d
(`scale_embedding`), t2t's sinusoid (sines then cosines, timescales over d/2 − 1 steps)
counted from `padding_idx + 1` = 2 (`position_offset`), one embedding matrix tied to the
output, and the decoder started from `</s>`.

The folder (what `save_pretrained` writes) holds `config.json`, the weights
(`model.safetensors`, its shards, or only `pytorch_model.bin`: `hf_weights`), a
SentencePiece model (`sentencepiece.bpe.model`), the tokenizer's files and optionally
`generation_config.json`. Ids: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, then the pieces
(M2M-100: as its `vocab.json` numbers them; NLLB: SentencePiece id + 1), then the
language tokens (M2M-100 `__de__`, NLLB `deu_Latn`; read from the tokenizer's files,
never from a list in tfblocks), then M2M-100's `<madeupwordN>` / NLLB's `<mask>`. As for
Marian (`tfblocks.models.marian`), the importer renumbers them once into tfblocks' ids
(pad 0, EOS 1, unknown 2, an added BOS row 3 holding the decoder start's embedding, the
rest in the model's order) and rewrites the SentencePiece model in that order.

Language tokens: the source is written `[source code] pieces </s>` — the source
tokenizer holds each code as a tag, so `"deu_Latn Guten Morgen."` tokenizes to the
code's id followed by the pieces of the text — and the translation starts with the
target language's token, which the decoder is made to produce first (Hugging Face's
`forced_bos_token_id`); in the target tokenizer the codes are control pieces, which
text never becomes and which decode to nothing.
"""

import json
import os
import re
from typing import NamedTuple

from tfblocks.models import marian
from tfblocks.models.builders import build_transformer
from tfblocks.models.hf_weights import read_weights
from tfblocks.models.hyperparameters import HParams
from tfblocks.models.marian_npz import fail
from tfblocks.text.tokenizers import SubwordTokenizer
from tfblocks.text.vocabulary import reordered_tokenizer

SENTENCEPIECE_FILES = ("sentencepiece.bpe.model", "spm.model", "sentencepiece.model")
SPECIAL_PIECES = ("<s>", "<pad>", "</s>", "<unk>")
# The forms of language tokens when the tokenizer's files do not list them.
CODE_FORMS = {"m2m100": re.compile(r"^__[a-z]{2,3}(_[A-Za-z]+)?__$"),
              "nllb": re.compile(r"^[a-z]{3}_[A-Z][a-z]{3}$")}  # fmt: skip
# config.json options whose only supported value is fairseq's M2M-100 / NLLB architecture.
_FIXED = {"model_type": "m2m_100", "is_encoder_decoder": True, "scale_embedding": True}


class M2M100Import(NamedTuple):
    """What `import_m2m100` and `import_nllb` return."""

    model: object  # tfblocks.Transformer
    source_tokenizer: SubwordTokenizer
    target_tokenizer: SubwordTokenizer
    hparams: HParams
    generation: dict  # the folder's decoding defaults tfblocks shares: num_beams, max_length
    languages: dict  # language code (as the folder writes it) -> its token's tfblocks id


def import_m2m100(path):
    """Reads a Hugging Face M2M-100 folder (e.g. `facebook/m2m100_418M`) into a
    `tfblocks.Transformer`: see the module docstring.

    Args:
        path: the folder.

    Returns:
        An `M2M100Import(model, source_tokenizer, target_tokenizer, hparams, generation,
        languages)`; `languages` maps each code (`"__de__"`) to its token's id.

    Raises:
        ValueError: one line naming the file and what is wrong (a missing file, a
            `config.json` option tfblocks does not support, a vocabulary of another size
            than the embedding, a weight missing or of another shape).
    """
    return _import(path, "m2m100")


def import_nllb(path):
    """Reads a Hugging Face NLLB-200 folder (e.g. `facebook/nllb-200-distilled-600M`) into a
    `tfblocks.Transformer`: as `import_m2m100`, with NLLB's ids (SentencePiece id + 1) and
    codes (`"deu_Latn"`)."""
    return _import(path, "nllb")


def _import(path, kind):
    path = os.fspath(path)
    config = _read_config(path)
    weights, file = read_weights(path)
    embedding = marian._embedding(weights, path)
    size = int(config["vocab_size"])
    if embedding.shape[0] != size:
        fail(file, f"the embedding has {embedding.shape[0]} rows, config.json's vocab_size={size}.")
    proto = _sentencepiece(path)
    _check_layout(path)
    vocab, codes = _vocabulary(path, kind, proto, size)
    order = marian._order(config, vocab, size, path)  # the folder's id of each tfblocks id
    generation = marian._generation(path)
    hp = _hparams(config, len(order), generation)
    model = build_transformer(hp)
    marian._assign(model, weights, embedding, order, file)
    pieces = marian._pieces(vocab, order)
    unnamed = [piece for piece in pieces if piece.startswith("<unnamed:")]
    source = reordered_tokenizer(proto, pieces, "source_tokenizer", tags=codes, control=unnamed)
    target = reordered_tokenizer(proto, pieces, "target_tokenizer", control=[*codes, *unnamed])
    ids = {piece: i for i, piece in enumerate(pieces)}
    languages = {code: ids[code] for code in codes}
    return M2M100Import(model, source, target, hp, generation, languages)


def _read_json(file):
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        fail(file, "missing (not a Hugging Face M2M-100 / NLLB folder).")
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        fail(file, f"not a JSON file ({error}).")


def _read_config(path):
    if not os.path.isdir(path):
        fail(path, "not a folder (a Hugging Face M2M-100 / NLLB folder is expected).")
    file = os.path.join(path, "config.json")
    config = _read_json(file)
    if not isinstance(config, dict):
        fail(file, "must be a JSON object.")
    for key, value in _FIXED.items():
        if config.get(key, value) != value:
            fail(file, f"unsupported {key}={config[key]!r} (tfblocks imports {value!r}).")
    if "model_type" not in config:
        fail(file, "no model_type (an M2M-100 / NLLB config.json has model_type='m2m_100').")
    activation = config.get("activation_function", "relu")
    if activation not in marian._ACTIVATIONS:
        fail(file, f"unsupported activation_function={activation!r}.")
    marian.check_shapes(config, file)
    if config.get("pad_token_id") != 1:
        fail(file, f"unsupported pad_token_id={config.get('pad_token_id')!r} (fairseq's is 1).")
    return config


def _sentencepiece(path):
    """The folder's SentencePiece model (bytes)."""
    for name in SENTENCEPIECE_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            with open(file, "rb") as f:
                return f.read()
    fail(
        os.path.join(path, SENTENCEPIECE_FILES[0]),
        f"missing: the folder holds none of {', '.join(SENTENCEPIECE_FILES)} (the "
        "tokenizer's SentencePiece model).",
    )


def _added_tokens(path):
    """The tokens the tokenizer's files number beside the pieces, `{content: id}`:
    `tokenizer_config.json`'s `added_tokens_decoder` and `tokenizer.json`'s
    `added_tokens` (either may be missing)."""
    added = {}
    config_file = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config_file):
        decoder = _read_json(config_file).get("added_tokens_decoder") or {}
        added.update({token["content"]: int(i) for i, token in decoder.items()})
    fast_file = os.path.join(path, "tokenizer.json")
    if os.path.isfile(fast_file):
        for token in _read_json(fast_file).get("added_tokens") or []:
            content, i = token["content"], int(token["id"])
            if added.setdefault(content, i) != i:
                fail(
                    fast_file,
                    f"gives {content!r} the id {i}, tokenizer_config.json {added[content]}.",
                )
    return added


def _listed_codes(path):
    """The language codes the tokenizer's files list (`additional_special_tokens`, or
    transformers 5's `extra_special_tokens`, of `tokenizer_config.json`, else of
    `special_tokens_map.json`), in their order; [] when none does."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            continue
        values = _read_json(file)
        for key in ("additional_special_tokens", "extra_special_tokens"):
            listed = values.get(key)
            if isinstance(listed, list) and listed:
                return [token["content"] if isinstance(token, dict) else token for token in listed]
    return []


def _check_layout(path):
    """Refuses NLLB's legacy layout (`legacy_behaviour: true`: `pieces </s> [src_lang]`),
    which the source tokenizer does not write."""
    file = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(file) and _read_json(file).get("legacy_behaviour") in (True, "true", "True"):
        fail(
            file,
            "unsupported legacy_behaviour=true (the source written `pieces </s> [src_lang]`): "
            "tfblocks writes `[src_lang] pieces </s>`, the layout of legacy_behaviour=false.",
        )


def _vocabulary(path, kind, proto, size):
    """`(vocab, codes)`: the folder's id of each piece and token (ids without one get a
    placeholder `<unnamed:ID>`, a control piece) and the language codes, in id order.

    The pieces: M2M-100's `vocab.json`; NLLB's SentencePiece id + 1 after `<s> <pad>
    </s> <unk>` (fairseq's dictionary). The codes: those the tokenizer's files list, each
    at the id they give it, else after the pieces in the listed order (as the tokenizers
    number them: M2M-100 from len(vocab.json), NLLB from SentencePiece's size + 1); a
    folder that lists none: the added tokens of the kind's form (`__de__`, `deu_Latn`)."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    if kind == "m2m100":
        vocab = _read_json(os.path.join(path, "vocab.json"))
        if not isinstance(vocab, dict):
            fail(os.path.join(path, "vocab.json"), "must map pieces to ids (a JSON object).")
        first_code = len(vocab)
    else:  # fairseq's dictionary: the four specials, then SentencePiece's pieces, id + 1
        vocab = {piece: i for i, piece in enumerate(SPECIAL_PIECES)}
        for i in range(3, processor.get_piece_size()):
            vocab[processor.id_to_piece(i)] = i + 1
        first_code = processor.get_piece_size() + 1
    added = _added_tokens(path)
    codes = _listed_codes(path) or [c for c in added if CODE_FORMS[kind].match(c)]
    if not codes:
        fail(
            os.path.join(path, "tokenizer_config.json"),
            "no language codes: neither it nor special_tokens_map.json lists them "
            "(additional_special_tokens), and no added token has the form of "
            f"{'__de__' if kind == 'm2m100' else 'deu_Latn'}.",
        )
    for index, code in enumerate(codes):
        vocab.setdefault(code, added.get(code, first_code + index))
    for content, i in added.items():
        vocab.setdefault(content, i)
    by_id = {}
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < size:
            fail(
                os.path.join(path, "config.json"),
                f"the tokenizer gives {piece!r} the id {i!r}, not below vocab_size={size}.",
            )
        if by_id.setdefault(i, piece) != piece:
            fail(path, f"the tokenizer's files give {by_id[i]!r} and {piece!r} the same id {i}.")
    vocab = {piece: i for i, piece in by_id.items()}
    for i in range(size):  # rows the tokenizer does not name (M2M-100's madeup words, ...)
        if i not in by_id:
            vocab[f"<unnamed:{i}>"] = i
    return vocab, sorted(set(codes), key=vocab.get)


def _hparams(config, vocab_size, generation):
    """The model's `HParams`: fairseq's M2M-100 architecture at the folder's sizes."""
    return marian.config_hparams(
        config,
        vocab_size,
        marian._max_length(config, generation, stored=False),
        activation="relu",
        norm_first=True,
        pos="timing",
        norm_epsilon=1e-5,
        timescale_rule="t2t",
        multiply_embedding_mode="sqrt_depth",
        position_offset=int(config["pad_token_id"]) + 1,
    )
