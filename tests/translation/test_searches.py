"""The search a beam width names (`tfblocks.translation.searches`)."""

import pytest

from tfblocks.decoding import BeamSearch, Greedy
from tfblocks.translation.searches import beam_or_greedy


def test_a_beam_size_names_greedy_or_beam_search():
    assert beam_or_greedy(1) == Greedy() and beam_or_greedy(5, 1.0) == BeamSearch(5, 1.0)
    assert beam_or_greedy(4, stop_early=True) == BeamSearch(4, 0.6, stop_early=True)
    for args, match in (((0,), "beam_size=0"), ((2, 0.6, 1), "stop_early=1")):
        with pytest.raises(ValueError, match=match):
            beam_or_greedy(*args)
