"""The tiny Transformer and the synthetic data that the training tests and their scripts share.

The scripts under tests/training/ run as `python -m tests.training.NAME` from the
repository root, so they import this module as the tests do, after setting up their
devices (importing it imports `tfblocks`, and so TensorFlow).
"""

import numpy as np

from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# `transformer_tiny` cut down to one encoder and one decoder layer of width 32.
TINY = {"hidden_size": 32, "filter_size": 64, "num_encoder_layers": 1, "num_decoder_layers": 1}
NO_DROPOUT = {"layer_prepostprocess_dropout": 0.0, "attention_dropout": 0.0, "relu_dropout": 0.0}
FIRST_ID = max(PAD_ID, EOS_ID, UNK_ID, BOS_ID) + 1  # the first id of no special token


def tiny_hparams(vocab_size=16, *, dropout=False, **overrides):
    """`hparams("transformer_tiny")` with `TINY`'s sizes and `overrides`; no dropout (so
    that runs on different setups can be compared) unless `dropout`."""
    from tfblocks.models import hparams

    settings = {**TINY, **({} if dropout else NO_DROPOUT), **overrides}
    return hparams("transformer_tiny", vocab_size=vocab_size, **settings)


def tiny_model(hp, *, seed=None, weights=None, **compile_args):
    """`build_transformer(hp)`, in the current strategy's scope.

    `seed`: `keras.utils.set_random_seed(seed)` first. `weights` (a `get_weights()` list)
    replace the initial ones. With `compile_args` the model is compiled with
    `compile_transformer(model, hp, **compile_args)`.
    """
    from tfblocks.models import build_transformer
    from tfblocks.training import compile_transformer

    if seed is not None:
        import keras

        keras.utils.set_random_seed(seed)
    model = build_transformer(hp)
    if weights is not None:
        model.set_weights(weights)
    if compile_args:
        compile_transformer(model, hp, **compile_args)
    return model


def synthetic_pairs(n, length, vocab_size, *, seed=0, padded=True):
    """`(x, y)` of a reversal task: `x = {"inputs": src, "targets": y}` and `y` = each row
    of `src` reversed, int32 `[n, length]`.

    `src` holds random ids from `FIRST_ID` to `vocab_size - 1` (`np.random.default_rng
    (seed)`). With `padded` each row keeps a random 2 to `length` of them and is padded with
    0 after that, so the rows of a batch, and the halves of a batch split between replicas,
    hold different numbers of tokens.
    """
    rng = np.random.default_rng(seed)
    src = rng.integers(FIRST_ID, vocab_size, (n, length)).astype("int32")
    if padded:
        lengths = rng.integers(2, length + 1, n)
        src[np.arange(length)[None, :] >= lengths[:, None]] = 0
    tgt = src[:, ::-1].copy()
    return {"inputs": src, "targets": tgt}, tgt


def synthetic_dataset(n, length, vocab_size, *, batch_size, seed=0, padded=True):
    """`synthetic_pairs(...)` as a `tf.data.Dataset` of batches of `batch_size`, in order."""
    import tensorflow as tf

    pairs = synthetic_pairs(n, length, vocab_size, seed=seed, padded=padded)
    return tf.data.Dataset.from_tensor_slices(pairs).batch(batch_size)


# Characters for `random_unicode_lines`, by kind. Every whitespace character Python knows
# (Unicode's White_Space and U+001C-U+001F) but the line end "\n".
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace() and chr(c) != "\n"]
_KINDS = {
    "ascii": [chr(c) for c in range(0x21, 0x7F)],
    "japanese": [
        chr(c) for c in [*range(0x3041, 0x3097), *range(0x30A1, 0x30FB), *range(0x4E00, 0x4E80)]
    ],
    "whitespace": WHITESPACE,
    "combining": [chr(c) for c in [*range(0x300, 0x370), 0x3099, 0x309A, 0x20DD]],
    "controls": ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\ufeff", "\u200b", "\u200d", "\ufffd"],
    "astral": [chr(c) for c in [*range(0x1F600, 0x1F650), 0x20000, 0x2A6D6, 0x10FFFD]],
    # A lone surrogate cannot be UTF-8: it is written escaped, as `backslashreplace` does.
    "surrogates": [
        chr(c).encode("utf-8", "backslashreplace").decode()
        for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF)
    ],
}


def random_unicode_lines(n, *, seed=0, long_length=5000):
    """`n` random lines (no "\\n" in them) for property-style tests of text handling.

    About one in five is blank (0 to 8 whitespace characters of any kind), one in twenty
    holds `long_length` characters, the others 1 to 40 characters, each of a random kind
    of `_KINDS` (whitespace, combining marks, NUL and other controls, astral characters,
    escaped surrogates, ASCII, Japanese). Seeded Python `random`: the same seed, the same
    lines.
    """
    import random

    rng = random.Random(seed)
    kinds = list(_KINDS.values())
    lines = []
    for _ in range(n):
        draw = rng.random()
        if draw < 0.2:
            lines.append("".join(rng.choices(WHITESPACE, k=rng.randint(0, 8))))
            continue
        length = long_length if draw < 0.25 else rng.randint(1, 40)
        line = "".join(rng.choice(rng.choice(kinds)) for _ in range(length))
        lines.append(line[:length])  # (an escaped surrogate is 6 characters)
    return lines


def batch_rows(ids):
    """The rows of a `[B, L]` batch of ids as tuples, padding left out."""
    return [tuple(int(i) for i in row if i != PAD_ID) for row in np.asarray(ids)]


def dataset_rows(dataset):
    """`(sources, targets)`: the rows of every `({"inputs", "targets"}, targets)` batch of
    `dataset` as tuples (`batch_rows`), checking that the labels are the targets."""
    sources, targets = [], []
    for features, labels in dataset:
        np.testing.assert_array_equal(features["targets"], labels)
        sources += batch_rows(features["inputs"])
        targets += batch_rows(labels)
    return sources, targets


def tokenized_rows(tokenizer, pairs, side):
    """The ids of side `side` (0 = source, 1 = target) of `pairs` as tuples."""
    return [tuple(row) for row in tokenizer.tokenize([p[side] for p in pairs]).to_list()]


# An OPUS-MT folder whose sides' SentencePiece models learnt different pieces: "!" only
# in the source, "ä" only in the target (each side's model leaves the other's unknown).
MARIAN_SOURCE_LINES = ["the cat sleeps!", "the dog sits in the garden!", "a small cat!"] * 5
MARIAN_TARGET_LINES = ["die katze schläft.", "der hund sitzt im garten.", "eine kleine katze."] * 5


def write_marian_folder(folder, generation=None):
    """Writes a Hugging Face Marian folder (as `MarianMTModel.save_pretrained` and
    `MarianTokenizer.save_pretrained` lay it out) at `folder`: SentencePiece models trained
    on `MARIAN_SOURCE_LINES` / `MARIAN_TARGET_LINES` with Marian's ids, `vocab.json` the
    union of both sides' pieces (`</s>` 0, `<unk>` 1, ..., `<pad>` last), and the shared
    fixture's weights with random vocabulary rows; `generation` replaces
    `generation_config.json`'s values. Returns `folder` (a `pathlib.Path`)."""
    import io
    import json
    import pathlib

    import sentencepiece
    from safetensors.numpy import load_file, save_file

    folder, shared = pathlib.Path(folder), pathlib.Path(__file__).parent / "data/marian/shared"
    folder.mkdir(parents=True)
    pieces = ["</s>", "<unk>"]
    for side, lines in (("source", MARIAN_SOURCE_LINES), ("target", MARIAN_TARGET_LINES)):
        model = io.BytesIO()
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=40,
            character_coverage=1.0, normalization_rule_name="identity",
            hard_vocab_limit=False, num_threads=1, minloglevel=2,
        )  # fmt: skip
        (folder / f"{side}.spm").write_bytes(model.getvalue())
        processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not processor.is_control(i) and not processor.is_unknown(i) and piece not in pieces:
                pieces.append(piece)
    pieces.append("<pad>")
    size = len(pieces)
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = json.loads((shared / "config.json").read_text(encoding="utf-8"))
    ids = {"vocab_size": size, "decoder_vocab_size": size, "pad_token_id": size - 1}
    config.update(ids, decoder_start_token_id=size - 1)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    values = json.loads((shared / "generation_config.json").read_text(encoding="utf-8"))
    values.update(bad_words_ids=[[size - 1]], decoder_start_token_id=size - 1)
    values.update(pad_token_id=size - 1, **(generation or {}))
    (folder / "generation_config.json").write_text(json.dumps(values), encoding="utf-8")
    weights = load_file(shared / "model.safetensors")
    rng = np.random.default_rng(0)
    weights["model.shared.weight"] = rng.normal(size=(size, config["d_model"])).astype("float32")
    weights["final_logits_bias"] = (0.5 * rng.normal(size=(1, size))).astype("float32")
    weights["final_logits_bias"][0, 0] += 2.0  # EOS: a random model seldom ends otherwise
    save_file(weights, folder / "model.safetensors")
    return folder


def marian_ids(folder, side, texts):
    """What Hugging Face's `MarianTokenizer` gives `texts` on `side` ("source" or
    "target"), in Marian's ids: each SentencePiece piece (as a string, an unknown one as
    its text) looked up in `vocab.json`, `<unk>` where it has no entry, then `</s>`."""
    import json

    import sentencepiece

    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / f"{side}.spm"))
    return [
        [vocab.get(piece, vocab["<unk>"]) for piece in processor.encode(text, out_type=str)]
        + [vocab["</s>"]]
        for text in texts
    ]


def marian_to_tfblocks(folder):
    """The tfblocks id of each Marian id of the folder (`import_marian`'s renumbering)."""
    import json

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    to_tf = np.arange(config["vocab_size"]) + 2
    to_tf[[config["pad_token_id"], config["eos_token_id"], 1]] = [PAD_ID, EOS_ID, UNK_ID]
    return to_tf
