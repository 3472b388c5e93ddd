"""Decoding: searches over a step function, and the model's step function.

One search a module: `greedy` (`Greedy`), `sampling` (`Sampling`), `beam_search`
(t2t `BeamSearch`, with its `length_penalty`) and `constrained` (`ConstrainedBeamSearch`:
results that hold given target phrases), on the base `Search` (`base`);
`dropping` runs greedy and beam search with finished sentences leaving the batch. The
searches know nothing of the model. `Decoder` builds a `tfblocks.Transformer`'s step
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

from tfblocks import _lazy

# The public API, listed once (tfblocks/_lazy.py); `SearchStrategy` is the base class'
# name before 0.1.0, kept for one release.
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.decoding.base": ["Search"],
        "tfblocks.decoding.beam_search": ["BeamSearch", "length_penalty"],
        "tfblocks.decoding.constrained": ["ConstrainedBeamSearch"],
        "tfblocks.decoding.controls": ["Controls"],
        "tfblocks.decoding.decoder": ["Decoder"],
        "tfblocks.decoding.ensemble": ["Ensemble"],
        "tfblocks.decoding.greedy": ["Greedy"],
        "tfblocks.decoding.sampling": ["Sampling"],
    },
    deprecated={"SearchStrategy": "Search"},
)
