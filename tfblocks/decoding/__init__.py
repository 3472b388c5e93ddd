"""Decoding: search strategies over a step function, and the model's step function.

`search` holds the strategies (`Greedy`, `Sampling`, t2t `BeamSearch`); they know
nothing of the model. `Decoder` builds a `tfblocks.Transformer`'s step function (encoder
once, K/V caches) and runs any strategy: `Decoder(model, max_length).decode(strategy,
source_ids)`. `Ensemble([model_a, model_b])` decodes several models as one (the mean of
their log-probabilities) wherever a model is taken.

Example:

>>> import numpy as np
>>> import tfblocks
>>> from tfblocks.decoding import BeamSearch, Decoder
>>> model = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=30))
>>> ids, scores = Decoder(model, max_length=6).decode(BeamSearch(beam_size=2),
...                                                   np.array([[5, 6, 7, 1]], "int32"))
>>> tuple(ids.shape)
(1, 6)
"""

from tfblocks.decoding.decoder import Decoder
from tfblocks.decoding.ensemble import Ensemble
from tfblocks.decoding.search import (
    BeamSearch,
    Greedy,
    Sampling,
    SearchStrategy,
    beam_or_greedy,
)
from tfblocks.decoding.steps import length_penalty

__all__ = [
    "BeamSearch",
    "Decoder",
    "Ensemble",
    "Greedy",
    "Sampling",
    "SearchStrategy",
    "beam_or_greedy",
    "length_penalty",
]
