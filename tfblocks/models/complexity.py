"""Parameter and FLOP counts of Transformer components, from shapes alone.

The complexity table of the study notes, as numbers: for a sequence of n positions,
model width d, h heads of depth d_k = d / h, FFN inner size f,

| component                    | parameters   | forward FLOPs       |
|------------------------------|--------------|---------------------|
| q, k, v, output projections  | 4·d²         | 4 · 2·n·d²   O(n·d²) |
| attention scores q·kᵀ        | 0            | 2·n·s·d      O(n²·d) |
| weighted sum of the values   | 0            | 2·n·s·d      O(n²·d) |
| restricted attention (r)     | 0            | 2 · 2·n·w·d  O(r·n·d), w = 2r or 3r |
| FFN (dense_relu_dense)       | 2·d·f + f + d | 2 · 2·n·d·f  O(n·d²) |
| 1-D convolution, kernel k    | k·d²         | 2·k·n·d²     O(k·n·d²) |

where s is the number of keys (n for self-attention). FLOPs count a multiply-add as
2 and include only matrix products: the softmax, LayerNorm, biases and residual adds
are O(n·d) or O(n·s) elementwise work, small next to them and left out.
The counts mirror what tfblocks computes: blocked local attention really computes
`ceil(n / r) · r` query rows against windows of `w` keys.
"""

import dataclasses
import math

from tfblocks import _checks


@dataclasses.dataclass(frozen=True)
class Cost:
    """Parameters and forward-pass FLOPs of one component (for one sequence)."""

    params: int = 0
    flops: int = 0

    def __add__(self, other):
        return Cost(self.params + other.params, self.flops + other.flops)

    def __mul__(self, factor):
        return Cost(self.params * factor, self.flops * factor)


def total(costs):
    """Sums a dict (or iterable) of `Cost`s."""
    values = costs.values() if isinstance(costs, dict) else costs
    return sum(values, Cost())


def _check(name, value, allow_none=False):
    if value is None and allow_none:
        return
    _checks.check_positive_int(name, value)


def attention_cost(
    hidden_size,
    num_heads,
    length,
    kv_length=None,
    key_dim=None,
    use_bias=False,
    attention_window=None,
    causal=False,
):
    """Costs of one `MultiHeadAttention` (q/k/v/output projections, scores, weighted sum).

    Example:

    >>> c = attention_cost(hidden_size=512, num_heads=8, length=100)
    >>> c["q_projection"].params, c["attention_scores"].flops
    (262144, 10240000)
    """
    for name, value in (("hidden_size", hidden_size), ("num_heads", num_heads), ("length", length)):
        _check(name, value)
    _check("kv_length", kv_length, allow_none=True)
    _check("key_dim", key_dim, allow_none=True)
    _check("attention_window", attention_window, allow_none=True)
    kv_length = length if kv_length is None else kv_length
    inner = num_heads * (key_dim or hidden_size // num_heads)
    bias = inner if use_bias else 0
    if attention_window is None:
        rows, keys = length, kv_length
    else:
        rows = math.ceil(length / attention_window) * attention_window
        keys = (2 if causal else 3) * attention_window
    return {
        "q_projection": Cost(hidden_size * inner + bias, 2 * length * hidden_size * inner),
        "k_projection": Cost(hidden_size * inner + bias, 2 * kv_length * hidden_size * inner),
        "v_projection": Cost(hidden_size * inner + bias, 2 * kv_length * hidden_size * inner),
        "attention_scores": Cost(0, 2 * rows * keys * inner),
        "attention_weighted_sum": Cost(0, 2 * rows * keys * inner),
        "output_projection": Cost(
            inner * hidden_size + (hidden_size if use_bias else 0), 2 * length * inner * hidden_size
        ),
    }


def ffn_cost(hidden_size, filter_size, length):
    """Cost of `DenseReluDense`: two Dense layers with biases."""
    _check("filter_size", filter_size)
    params = 2 * hidden_size * filter_size + filter_size + hidden_size
    return Cost(params, 2 * 2 * length * hidden_size * filter_size)


def block_cost(
    hidden_size,
    filter_size,
    num_heads,
    length,
    context_length=None,
    cross_attention=False,
    key_dim=None,
    use_bias=False,
    attention_window=None,
    causal=False,
):
    """Per-component costs of one `TransformerBlock`, keyed by component name.

    Example:

    >>> costs = block_cost(hidden_size=512, filter_size=2048, num_heads=8, length=64)
    >>> total(costs).params
    3150336
    """
    costs = {
        f"self_{name}": cost
        for name, cost in attention_cost(
            hidden_size,
            num_heads,
            length,
            key_dim=key_dim,
            use_bias=use_bias,
            attention_window=attention_window,
            causal=causal,
        ).items()
    }
    norms = 2
    if cross_attention:
        if context_length is None:
            raise ValueError("`context_length` is required when cross_attention=True.")
        cross = attention_cost(
            hidden_size,
            num_heads,
            length,
            kv_length=context_length,
            key_dim=key_dim,
            use_bias=use_bias,
        )
        costs.update({f"cross_{name}": cost for name, cost in cross.items()})
        norms = 3
    costs["ffn"] = ffn_cost(hidden_size, filter_size, length)
    costs["layer_norm"] = Cost(norms * 2 * hidden_size, 0)
    return costs


def conv1d_cost(hidden_size, length, kernel_size):
    """A d → d 1-D convolution with kernel k, for comparison: k·d² params, 2·k·n·d² FLOPs."""
    _check("kernel_size", kernel_size)
    return Cost(kernel_size * hidden_size**2, 2 * kernel_size * length * hidden_size**2)


def dense_over_sequence_cost(hidden_size, length):
    """One fully connected layer mapping all n·d inputs to n·d outputs: (n·d)² weights."""
    return Cost((length * hidden_size) ** 2, 2 * (length * hidden_size) ** 2)


def model_cost(hp, source_length, target_length):
    """Per-component costs of a `tfblocks.Transformer` for one sentence pair.

    Args:
        hp: an `HParams`, or the `Transformer` itself (it carries the same fields:
            `hidden_size`, `filter_size`, `num_heads`, `num_encoder_layers`,
            `num_decoder_layers`, `vocab_size`, `norm_first`,
            `shared_embedding_and_softmax_weights`). `num_encoder_layers=0` is the
            decoder-only language model: no encoder, no cross-attention.
        source_length: source positions n_s (ignored without an encoder).
        target_length: target positions n_t.

    Returns:
        dict with `encoder`, `decoder` (all their blocks), `final_norms`, `embedding`
        and `softmax` costs; `total(...)` of it is the whole model.

    Example:

    >>> from tfblocks.models import build_language_model, hparams
    >>> lm = build_language_model(hparams("transformer_tiny", num_encoder_layers=0))
    >>> total(model_cost(lm, None, 16)).params == lm.count_params()
    True
    """
    d, f, h = hp.hidden_size, hp.filter_size, hp.num_heads
    has_input = hp.num_encoder_layers > 0
    encoder = (
        total(block_cost(d, f, h, source_length)) * hp.num_encoder_layers if has_input else Cost()
    )
    decoder_block = block_cost(
        d,
        f,
        h,
        target_length,
        context_length=source_length if has_input else None,
        cross_attention=has_input,
        causal=True,
    )
    decoder = total(decoder_block) * hp.num_decoder_layers
    shared = hp.shared_embedding_and_softmax_weights
    vocab = hp.vocab_size
    embeddings = (1 if shared else 2) if has_input else 1
    stacks = 2 if has_input else 1
    return {
        "embedding": Cost(vocab * d * embeddings, 0),
        "encoder": encoder,
        "decoder": decoder,
        "final_norms": Cost(stacks * 2 * d if hp.norm_first else 0, 0),
        "softmax": Cost(0 if shared else vocab * d, 2 * target_length * d * vocab),
    }
