"""Regenerates `tests/data/marian/npz/`: a tiny random model in Marian's own format.

NumPy only (no torch, no marian): run it from the repository root with tfblocks' venv,

    python tests/data/make_marian_npz_fixture.py

It writes what the `marian` toolkit writes for a Post-LN transformer with all embeddings
tied (`tied-embeddings-all`): `model.npz` (Marian's parameter names, kernels `[in, out]`,
biases and LayerNorm parameters `[1, d]`, the options as `special:model.yml`, a
NUL-terminated int8 array), `vocab.yml` (piece: id, `</s>` 0, `<unk>` 1, no pad) and
`decoder.yml`; the SentencePiece models `source.spm` / `target.spm` and the pieces are
those of the Hugging Face fixture `tests/data/marian/shared/` (its `vocab.json` without
`<pad>`). Every weight is random, LayerNorm gains and biases included, so that a weight
read into the wrong place changes the numbers; the tests compare tfblocks' import with
CTranslate2's `MarianConverter` on this folder.
"""

import json
import os
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "marian", "shared")
OUT = os.path.join(HERE, "marian", "npz")
DIM, HEADS, FFN, LAYERS = 16, 2, 32, (2, 2)
SEED = 7
EOS_BOOST = 2.0  # a random model seldom ends a sentence: EOS's logit bias is raised

OPTIONS = f"""type: transformer
dim-emb: {DIM}
dim-vocabs:
  - {{size}}
  - {{size}}
enc-depth: {LAYERS[0]}
dec-depth: {LAYERS[1]}
transformer-heads: {HEADS}
transformer-dim-ffn: {FFN}
transformer-ffn-depth: 2
transformer-ffn-activation: swish
transformer-preprocess: ""
transformer-postprocess: dan
transformer-postprocess-emb: d
transformer-postprocess-top: ""
transformer-decoder-autoreg: self-attention
transformer-no-projection: false
transformer-train-position-embeddings: false
transformer-guided-alignment-layer: last
transformer-dropout: 0.1
tied-embeddings-all: true
right-left: false
"""


def yaml_key(piece):
    """A vocab.yml key as Marian's YAML writer quotes it: plain when safe, else in double
    quotes with JSON's escapes (valid YAML)."""
    plain = piece and piece[0] not in "-?:,[]{}#&*!|>'\"%@`<> " and ": " not in piece
    plain = plain and not piece.endswith(":") and piece.lower() not in ("yes", "no", "null")
    return piece if plain else json.dumps(piece, ensure_ascii=False)


def main():
    rng = np.random.default_rng(SEED)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for name in ("source.spm", "target.spm"):
        shutil.copy(os.path.join(SHARED, name), OUT)
    with open(os.path.join(SHARED, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    pieces = [p for p, _ in sorted(vocab.items(), key=lambda item: item[1]) if p != "<pad>"]
    assert pieces[:2] == ["</s>", "<unk>"]
    with open(os.path.join(OUT, "vocab.yml"), "w", encoding="utf-8") as f:
        f.writelines(f"{yaml_key(p)}: {i}\n" for i, p in enumerate(pieces))
    with open(os.path.join(OUT, "decoder.yml"), "w", encoding="utf-8") as f:
        f.write("relative-paths: true\nmodels:\n  - model.npz\nvocabs:\n  - vocab.yml\n")
        f.write("  - vocab.yml\nbeam-size: 6\nnormalize: 0.6\n")
    size = len(pieces)

    def kernel(n_in, n_out):
        return (rng.normal(size=(n_in, n_out)) / n_in**0.5).astype(np.float32)

    def small(n):
        return (0.2 * rng.normal(size=(1, n))).astype(np.float32)

    weights = {"Wemb": rng.normal(size=(size, DIM)).astype(np.float32)}
    for side, depth in zip(("encoder", "decoder"), LAYERS, strict=True):
        for i in range(1, depth + 1):
            parts = ("self", "context") if side == "decoder" else ("self",)
            for part in parts:
                scope = f"{side}_l{i}_{part}"
                for letter in "qkvo":
                    weights[f"{scope}_W{letter}"] = kernel(DIM, DIM)
                    weights[f"{scope}_b{letter}"] = small(DIM)
                weights[f"{scope}_Wo_ln_scale"] = 1 + 1.5 * small(DIM)
                weights[f"{scope}_Wo_ln_bias"] = small(DIM)
            scope = f"{side}_l{i}_ffn"
            weights[f"{scope}_W1"], weights[f"{scope}_b1"] = kernel(DIM, FFN), small(FFN)
            weights[f"{scope}_W2"], weights[f"{scope}_b2"] = kernel(FFN, DIM), small(DIM)
            weights[f"{scope}_ffn_ln_scale"] = 1 + 1.5 * small(DIM)
            weights[f"{scope}_ffn_ln_bias"] = small(DIM)
    bias = 2.5 * small(size)
    bias[0, pieces.index("</s>")] += EOS_BOOST
    weights["decoder_ff_logit_out_b"] = bias
    options = OPTIONS.replace("{size}", str(size)).encode("utf-8") + b"\0"
    weights["special:model.yml"] = np.frombuffer(options, np.int8)
    np.savez(os.path.join(OUT, "model.npz"), **weights)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"{OUT}: {total} bytes, vocabulary {size}")


if __name__ == "__main__":
    main()
