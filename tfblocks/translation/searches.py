"""The search that a beam width names, as the commands, the training job and the
engines choose it (`--beam-size`, an imported model's `num_beams`)."""

from tfblocks import _checks

# The beam size of a run that recorded none in its run.json (`run_folder.run_beam_size`):
# t2t's default.
DEFAULT_BEAM_SIZE = 4


# Beam search's length-penalty exponent where none is given (t2t's; with CTranslate2, its
# `length_penalty`).
ALPHA = 0.6


def beam_or_greedy(beam_size, alpha=None, stop_early=False):
    """The search a beam width names (`--beam-size`): `Greedy()` for 1, else
    `BeamSearch(beam_size, alpha, stop_early)` (alpha None: `ALPHA`).

    >>> beam_or_greedy(1), beam_or_greedy(4)
    (Greedy(), BeamSearch(beam_size=4, alpha=0.6, stop_early=False))
    """
    from tfblocks.decoding import BeamSearch, Greedy  # imports TensorFlow: not at the top

    _checks.check_bool("stop_early", stop_early)
    if _checks.check_positive_int("beam_size", beam_size) == 1:
        return Greedy()
    return BeamSearch(beam_size, ALPHA if alpha is None else alpha, stop_early)


def search_beam_size(search):
    """The beam size `search` decodes with, as `--beam-size` would name it: 1 for greedy
    search, a beam search's width, `DEFAULT_BEAM_SIZE` for None (`Translator`'s default
    search); None for a search of another kind (sampling).

    >>> search_beam_size(beam_or_greedy(1)), search_beam_size(beam_or_greedy(6))
    (1, 6)
    >>> search_beam_size(None) == DEFAULT_BEAM_SIZE
    True
    """
    from tfblocks.decoding import BeamSearch, Greedy

    if search is None:
        return DEFAULT_BEAM_SIZE
    if isinstance(search, Greedy):
        return 1
    if isinstance(search, BeamSearch):
        return search.beam_size
    return None
