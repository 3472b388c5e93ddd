"""LoRA fine-tuning (Hu et al. 2021): low-rank adapters on a Transformer's projections.

`enable_lora(model, rank)` gives every attention projection kernel of `model` (q, k, v
and the output transform, in self- and cross-attention; with `ffn=True` also the two
Dense layers of each feed-forward network) Keras' own adapter, `Dense.enable_lora(rank)`:
the layer computes `x · (W + (alpha / rank) · A · B)` with W `[in, out]` frozen, A
`[in, rank]` (He-uniform) and B `[rank, out]` (zeros, so the model starts as it was)
trained, alpha = rank. Every other variable of the model is frozen too (embedding,
LayerNorms, biases), so only the adapters train.

`tfblocks.training.weights.merged_weights(model)` gives the weights of the plain model with
each adapter merged into its kernel, `W + (alpha / rank) · A · B`: a model built without
adapters loads them and computes the same function at no extra cost, which is what a run
folder's final model and export hold. (Keras' own `.weights.h5` of a LoRA layer also holds
the merged kernel, and no adapters; loading it back zeroes the adapters.)

Multi-head attention fuses its q/k/v projections into one matmul only for plain Dense
layers (`MultiHeadAttention._can_fuse`); with adapters each projection runs on its own.
"""

from tfblocks import _checks
from tfblocks.layers import DenseReluDense, MultiHeadAttention


def lora_targets(model, ffn=False):
    """The Dense layers `enable_lora` adapts: every attention layer's q, k, v and output
    projections and, with `ffn`, every feed-forward network's two Dense layers."""
    targets = []
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, MultiHeadAttention):
            denses = (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
            targets.extend(denses)
        elif ffn and isinstance(layer, DenseReluDense):
            targets.extend((layer.filter_dense, layer.output_dense))
    return targets


def enable_lora(model, rank, ffn=False):
    """Adds rank-`rank` adapters to `model`'s projections and freezes everything else.

    Call it on a built model (in `strategy.scope()` when distributing) before compiling,
    so that the optimizer gets only the adapters.

    Args:
        model: a built `Transformer` (or any model with tfblocks attention layers).
        rank: the adapters' rank r, a positive int.
        ffn: adapt the feed-forward networks' Dense layers too.

    Returns:
        The adapted Dense layers.

    Raises:
        ValueError: `rank` is not a positive int, or `model` has no attention layer.

    Example:

    >>> import numpy as np
    >>> import tfblocks
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=50)
    >>> model = tfblocks.build_transformer(hp)
    >>> adapted = enable_lora(model, rank=4)
    >>> len(adapted), sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    (24, 24576)
    """
    rank = _checks.check_positive_int("rank", rank)
    _checks.check_bool("ffn", ffn)
    targets = lora_targets(model, ffn)
    if not targets:
        raise ValueError(f"`model` has no attention layers to adapt, got model={model.name!r}.")
    for dense in targets:
        dense.enable_lora(rank)
    adapters = {id(v) for d in targets for v in (d.lora_kernel_a, d.lora_kernel_b)}
    for variable in model.weights:
        if id(variable) not in adapters:
            variable.trainable = False
    return targets
