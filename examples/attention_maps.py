"""Attention maps of a Japanese→English Transformer on 今日のランチはカレーだ。

The study notes draw, by hand, how much each query token attends to each key token.
This script draws the real thing: it trains a Pre-LN `transformer_tiny` on the embedded
phrasebook (400 steps of 64 pairs, t2t's rsqrt schedule with a 100-step warm-up: about a
minute on 2 CPU cores), or loads `--model` (a `tfblocks-train` run folder or its `model/`
preset), or `--model`/`--tokenizer` (a `build_transformer` model
saved as .keras and its SentencePiece model). It translates `--sentence` with greedy
decoding, then runs the model's own forward pass (`model.encode` / `model.decode` /
`model.logits`) once more over the source and the translation with
`return_attention_scores=True`, and checks the logits against the greedy translation,
so the maps are those of the forward pass that produced the translation.

Writes the folder `--output-dir` as a whole (new, empty or an earlier output of this
script, checked before training; anything else is refused, never overwritten):
encoder_self_attention.png, decoder_self_attention.png and cross_attention.png, one
heatmap per layer (rows) and head (columns), keys on the x axis,
queries on the y axis. The decoder's queries are its inputs (<s>, then the translation);
in the cross-attention map each query row is labelled with the token it predicts.
Japanese labels need a CJK font: the script looks for one among the system fonts (e.g.
Debian's fonts-noto-cjk; `--font PATH` chooses one); with none it prints the characters
it cannot draw as \\u escapes and says so.

Run:  python examples/attention_maps.py [--steps 400] [--sentence 今日のランチはカレーだ。]
      [--model runs/enja | --model model.keras --tokenizer tokenizer.model]
      [--output-dir runs/attention_maps]
"""

import argparse
import os
import re

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import matplotlib
import numpy as np
import sentencepiece

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import font_manager, ft2font

from tfblocks import text

# tfblocks' internal writer of whole folders (the exports use it too); not public API.
from tfblocks._files import check_directory, replace_directory
from tfblocks.text.phrasebook import RUNNING_EXAMPLE

KIND = "tfblocks-attention-maps"  # what the output folder's marker file names

CJK_FONT = re.compile(r"cjk|ipa|takao|gothic|mincho|hiragino|meiryo|msgothic", re.IGNORECASE)


def train_model(args):
    """A Pre-LN `--hparams` model trained `--steps` steps on the phrasebook."""
    splits = text.load_phrasebook(seed=args.seed, size=args.phrasebook_size)
    tokenizer, _ = text.train_tokenizers(splits["train"], args.vocab_size, model_type="bpe")
    data = text.make_dataset(
        splits["train"],
        tokenizer,
        tokenizer,
        batch_tokens=args.batch_tokens,
        max_length=16,
        shapes="max_length",
        seed=args.seed,
    )
    keras.utils.set_random_seed(args.seed)
    hp = tfblocks.hparams(args.hparams, vocab_size=tokenizer.vocabulary_size)
    model = tfblocks.build_transformer(hp)
    schedule = tfblocks.RsqrtDecay(hp.hidden_size, args.warmup_steps, args.learning_rate_constant)
    tfblocks.compile_transformer(model, hp, jit_compile=args.jit_compile, learning_rate=schedule)
    epochs = max(1, args.steps // 100)
    model.fit(
        data.repeat(), epochs=epochs, steps_per_epoch=args.steps // epochs, verbose=2, shuffle=False
    )
    return model, tokenizer


def attention_weights(model, source, target):
    """Encoder self, decoder self and cross-attention weights, one [H, T, S] array per layer.

    The model's own `encode` / `decode` / `logits` (the forward pass that training and
    decoding run), asked for the attention weights of every block.
    """
    memory, encoder_scores = model.encode(source, return_attention_scores=True)  # [1, S, d]
    decoder_in = np.asarray(tfblocks.models.shift_right(target))  # [1, T]: <s>, translation
    hidden, decoder_scores = model.decode(
        decoder_in,
        memory,
        tfblocks.models.padding_mask(source),
        return_attention_scores=True,
    )
    logits = np.asarray(model.logits(hidden))  # [1, T, vocab]
    chosen = np.take_along_axis(logits, target[..., None], axis=-1)[..., 0]  # [1, T]
    best = np.delete(logits, [tfblocks.PAD_ID, tfblocks.BOS_ID], axis=-1).max(axis=-1)
    assert np.all(chosen >= best - 1e-4), "the greedy tokens are not the argmax of this pass"
    maps = {
        "encoder_self_attention": [np.asarray(s["self_attention"])[0] for s in encoder_scores],
        "decoder_self_attention": [np.asarray(s["self_attention"])[0] for s in decoder_scores],
        "cross_attention": [np.asarray(s["cross_attention"])[0] for s in decoder_scores],
    }
    return maps, decoder_in


def label_font(strings, font_path):
    """A FontProperties drawing every character of `strings` (None: the default font), and a
    function that \\u-escapes what the chosen font cannot draw."""
    needed = {c for string in strings for c in string}
    default = font_manager.findfont(font_manager.FontProperties())
    if font_path:
        candidates = [] if font_path == "none" else [font_path]
    else:
        system = sorted(p for p in font_manager.findSystemFonts() if CJK_FONT.search(p))
        candidates = [default, *system]
    for path in candidates:
        font = ft2font.FT2Font(path)
        if all(font.get_char_index(ord(c)) for c in needed):
            return font_manager.FontProperties(fname=path), str
    print("No font covers the Japanese tokens (install fonts-noto-cjk, or pass --font):")
    print("the characters the default font cannot draw are shown as \\u escapes.")
    font = ft2font.FT2Font(default)
    return None, lambda s: "".join(c if font.get_char_index(ord(c)) else ascii(c)[1:-1] for c in s)


def plot(weights, queries, keys, title, path, font, query_label):
    """One heatmap per layer (row) and head (column), tokens on both axes."""
    layers, heads = len(weights), weights[0].shape[0]
    width, height = 0.25 * len(keys) + 1.0, 0.25 * len(queries) + 1.0  # inches per heatmap
    fig, axes = plt.subplots(
        layers,
        heads,
        figsize=(heads * width + 1.0, layers * height + 0.6),
        squeeze=False,
        layout="constrained",
    )
    for layer, row in enumerate(axes):
        for head, ax in enumerate(row):
            image = ax.imshow(weights[layer][head], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_xticks(range(len(keys)))
            ax.set_yticks(range(len(queries)))
            # Every panel has the same tokens: only the bottom row and the left column
            # name them (drawing each label once per panel was most of the plotting time).
            if layer == layers - 1:
                ax.set_xticklabels(keys, rotation=90, fontproperties=font, fontsize=7)
            else:
                ax.tick_params(labelbottom=False)
            if head == 0:
                ax.set_yticklabels(queries, fontproperties=font, fontsize=7)
            else:
                ax.tick_params(labelleft=False)
            ax.set_title(f"layer {layer}, head {head}", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
    fig.supxlabel("key", fontsize=9)
    fig.supylabel(query_label, fontsize=9)
    fig.suptitle(title, fontproperties=font)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    parser.add_argument("--sentence", default=RUNNING_EXAMPLE[0])
    parser.add_argument(
        "--model", help="a run folder, a preset folder, or a build_transformer .keras file"
    )
    parser.add_argument("--tokenizer", help="its SentencePiece .model (with a .keras --model)")
    parser.add_argument("--hparams", default="transformer_tiny")
    parser.add_argument("--steps", type=int, default=400, help="training steps (64 pairs)")
    parser.add_argument("--warmup-steps", type=int, default=100)
    parser.add_argument("--learning-rate-constant", type=float, default=0.35, help="peak 3e-3")
    parser.add_argument("--batch-tokens", type=int, default=1024, help="64 pairs × 16 tokens")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--phrasebook-size", type=int, default=25_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--font", help="font file for the tokens ('none': escapes)")
    parser.add_argument("--output-dir", default="runs/attention_maps")
    args = parser.parse_args()
    keras_file = bool(args.model) and args.model.endswith(".keras")
    if keras_file != bool(args.tokenizer):
        parser.error("--tokenizer goes with a .keras --model (a run folder holds its tokenizer)")
    try:  # a folder that would be refused is refused now, not after the training
        check_directory(args.output_dir, KIND, arg="--output-dir")
    except ValueError as error:
        parser.error(str(error))

    if args.model and not keras_file:
        preset = os.path.join(args.model, "model")
        model, tokenizer, _ = tfblocks.load_preset(preset if os.path.isdir(preset) else args.model)
    elif args.model:
        model = keras.saving.load_model(args.model)
        tokenizer = text.SubwordTokenizer.load(args.tokenizer)
    else:
        model, tokenizer = train_model(args)
    source = tokenizer.tokenize([args.sentence]).to_tensor().numpy()  # [1, S], ends with EOS
    ids, _ = tfblocks.Decoder(model, max_length=32, jit_compile=False).decode(
        tfblocks.decoding.Greedy(), source
    )
    ids = ids.numpy()
    target = ids[:, : int(np.sum(ids[0] != 0))]  # [1, T]: up to and including EOS
    translation = tokenizer.detokenize(target).numpy()[0].decode()
    print(f"{args.sentence} → {translation}")

    maps, decoder_in = attention_weights(model, source, target)
    pieces = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto).id_to_piece
    src_tokens = [pieces(int(i)) for i in source[0]]
    dec_tokens = [pieces(int(i)) for i in decoder_in[0]]  # <s> + translation
    out_tokens = [pieces(int(i)) for i in target[0]]  # translation + </s>
    strings = [*src_tokens, *dec_tokens, *out_tokens, args.sentence, translation]
    font, show = label_font(strings, args.font)
    src, dec, out = ([show(t) for t in tokens] for tokens in (src_tokens, dec_tokens, out_tokens))
    plots = (
        ("encoder_self_attention", src, src, "query"),
        ("decoder_self_attention", dec, dec, "query (decoder input)"),
        ("cross_attention", out, src, "query, labelled with the token it predicts"),
    )

    def write(folder):
        for kind, queries, keys, query_label in plots:
            title = f"{kind.replace('_', ' ')}: {show(args.sentence)} → {show(translation)}"
            path = os.path.join(folder, f"{kind}.png")
            plot(maps[kind], queries, keys, title, path, font, query_label)

    replace_directory(args.output_dir, write, KIND, arg="--output-dir")
    for kind, *_ in plots:
        path = os.path.join(args.output_dir, f"{kind}.png")
        print(f"wrote {path}: {len(maps[kind])} layers × {maps[kind][0].shape[0]} heads")
    last = np.mean(maps["cross_attention"][-1], axis=0)  # [T, S], last layer, mean over heads
    print("cross-attention, last layer, mean over heads: predicted token ← source token")
    for t, token in enumerate(out):
        print(f"  {token} ← {src[int(np.argmax(last[t]))]} ({np.max(last[t]):.2f})")


if __name__ == "__main__":
    main()
