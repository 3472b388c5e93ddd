"""Decoding: search strategies over a step function, and the model's step function.

One strategy a module: `greedy` (`Greedy`), `sampling` (`Sampling`), `beam_search`
(t2t `BeamSearch`, with its `length_penalty`) and `constrained` (`ConstrainedBeamSearch`:
results that hold given target phrases), on the base `SearchStrategy` (`base`);
`dropping` runs greedy and beam search with finished sentences leaving the batch. The
strategies know nothing of the model. `Decoder` builds a `tfblocks.Transformer`'s step
function (encoder once, K/V caches) and runs any of them, passed as the search:
`Decoder(model, max_length).decode(search, source_ids)`. `Ensemble([model_a, model_b])`
decodes several models as one (the mean of their log-probabilities) wherever a model is
taken.

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

from tfblocks.decoding.base import SearchStrategy
from tfblocks.decoding.beam_search import BeamSearch, length_penalty
from tfblocks.decoding.constrained import ConstrainedBeamSearch
from tfblocks.decoding.decoder import Decoder
from tfblocks.decoding.ensemble import Ensemble
from tfblocks.decoding.greedy import Greedy
from tfblocks.decoding.sampling import Sampling

__all__ = [
    "BeamSearch",
    "ConstrainedBeamSearch",
    "Decoder",
    "Ensemble",
    "Greedy",
    "Sampling",
    "SearchStrategy",
    "length_penalty",
]
