"""Decoding: search strategies over a step function, and the model's step function.

`search` holds the strategies (greedy, sampling, t2t beam search); they know nothing of
the model. `decoder.Decoder` builds a `tfblocks.Transformer`'s step function (encoder
once, K/V caches) and runs any strategy with `Decoder.decode(strategy, ...)`.
"""

from tfblocks.decoding.decoder import Decoder
from tfblocks.decoding.search import beam_search, greedy_search, length_penalty, sample_search

__all__ = ["Decoder", "beam_search", "greedy_search", "length_penalty", "sample_search"]
