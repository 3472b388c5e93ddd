"""The encoder and decoder stacks of a `Transformer`: made and run here, held by the model.

A stack is a list of `TransformerBlock`s and, when Pre-LN, a final LayerNorm. They stay
plain attributes of the model (`encoder_blocks`, `encoder_norm`, `decoder_blocks`,
`decoder_norm`) rather than a Keras layer of their own, so every weight keeps its path
(`encoder_layer_0/...`, `decoder_norm/gamma`) and saved weights keep loading. `run_stack`
is the one loop over a stack's blocks: `encode`, `decode` and cached decoding share it.
"""

import keras

from tfblocks.layers import TransformerBlock

SIDES = ("encoder", "decoder")


def make_stack(side, config, dtype=None):
    """The blocks and final LayerNorm of the encoder or the decoder.

    Args:
        side: `"encoder"` (non-causal self-attention) or `"decoder"` (causal, with
            cross-attention over the encoder output in an encoder–decoder).
        config: the model's arguments, as `options.check_arguments` returns them.
        dtype: dtype policy of the layers.

    Returns:
        `(blocks, final_norm)`: the blocks named `"{side}_layer_{i}"` (none for the encoder
        of a decoder-only model), and the LayerNorm `"{side}_norm"` that ends a Pre-LN
        stack (None for Post-LN or an empty stack).
    """
    if side not in SIDES:
        raise ValueError(f"`side` must be one of {SIDES}, got side={side!r}.")
    decoder = side == "decoder"
    blocks = [
        TransformerBlock(
            num_heads=config["num_heads"],
            filter_size=config["filter_size"],
            dropout=config["dropout"],
            attention_dropout=config["attention_dropout"],
            relu_dropout=config["relu_dropout"],
            norm_first=config["norm_first"],
            causal=decoder,
            cross_attention=decoder and config["num_encoder_layers"] > 0,
            activation=config["ffn_activation"],
            use_bias=config["attention_use_bias"],
            ffn_use_bias=config["ffn_use_bias"],
            epsilon=config["norm_epsilon"],
            max_relative_position=config["max_relative_position"],
            dtype=dtype,
            name=f"{side}_layer_{i}",
        )
        for i in range(config[f"num_{side}_layers"])
    ]
    final_norm = None
    if config["norm_first"] and blocks:
        final_norm = keras.layers.LayerNormalization(
            epsilon=config["norm_epsilon"], dtype=dtype, name=f"{side}_norm"
        )
    return blocks, final_norm


def run_stack(blocks, final_norm, x, caches=None, return_attention_scores=False, **block_kwargs):
    """Runs embedded inputs `[B, L, d]` through a stack's blocks and final LayerNorm.

    Args:
        blocks: the stack's `TransformerBlock`s.
        final_norm: the stack's final LayerNorm, or None (Post-LN).
        x: the embedded inputs `[B, L, d]`.
        caches: None, or one cache per block (`Transformer.init_cache`) for incremental
            decoding; each block then also returns its updated cache.
        return_attention_scores: each block also returns its dict of attention weights
            (not with `caches`).
        **block_kwargs: the arguments every block gets (masks, `context`, `cache_index`,
            `training`).

    Returns:
        The stack's output `[B, L, d]`; with `caches`, `(output, new_caches)`; with
        `return_attention_scores`, `(output, scores)`: lists with one entry per block.
    """
    if caches is None:
        own = [{"return_attention_scores": return_attention_scores}] * len(blocks)
    elif return_attention_scores:
        raise ValueError("`return_attention_scores` is not supported with `caches`.")
    else:
        own = [{"cache": cache} for cache in caches]
    returns_pairs = caches is not None or return_attention_scores
    extras = []  # each block's new cache or attention weights
    for block, block_own in zip(blocks, own, strict=True):
        x = block(x, **block_own, **block_kwargs)
        if returns_pairs:
            x, extra = x
            extras.append(extra)
    x = x if final_norm is None else final_norm(x)
    return (x, extras) if returns_pairs else x
