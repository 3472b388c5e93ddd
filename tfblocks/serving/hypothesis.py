"""`Hypothesis`: one of the n-best translations of a text, with its score."""

from typing import NamedTuple


class Hypothesis(NamedTuple):
    """One of the n-best translations of a text (`Translator.n_best`,
    `CTranslate2Translator.n_best`): its text and its score (the search's: for beam
    search the length-penalized log-probability, the log-probability itself with
    `alpha=0`).

    >>> Hypothesis("Today's lunch is curry.", -1.25)
    Hypothesis(text="Today's lunch is curry.", score=-1.25)
    """

    text: str
    score: float
