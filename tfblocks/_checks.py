"""Argument checks shared by every module (one home; imports nothing heavy).

Each raises `ValueError` naming the argument and echoing the value, the project's
contract for bad input.
"""

import itertools
import math
import numbers


def check_positive_int(name, value):
    """Returns `value` if it is a positive int (bools rejected), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {name}={value!r}.")
    return int(value)


def check_non_negative_int(name, value):
    """Returns `value` if it is an int >= 0 (bools rejected), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer, got {name}={value!r}.")
    return int(value)


def check_optional_positive_int(name, value):
    """Like `check_positive_int` but accepts `None`."""
    return None if value is None else check_positive_int(name, value)


def check_bool(name, value):
    """Returns `value` if it is a bool (True or False, not 0 or 1), else raises ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False, got {name}={value!r}.")
    return value


def check_choice(name, value, choices):
    """Returns `value` if it is one of `choices`, else raises ValueError."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {name}={value!r}.")
    return value


def check_rate(name, value):
    """Returns `value` as a float if `0 <= value < 1` (a dropout rate), else raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {name}={value!r}.")
    return float(value)


def check_fraction(name, value):
    """Returns `value` as a float if `0 < value < 1` (a decay), else raises ValueError."""
    if not is_finite_real(value) or not 0.0 < value < 1.0:
        raise ValueError(f"`{name}` must be a number between 0 and 1, got {name}={value!r}.")
    return float(value)


def check_positive_float(name, value):
    """Returns `value` as a float if it is a finite real number > 0, else raises ValueError
    (`inf` and `nan` are refused: a learning rate or a time of infinity is no setting)."""
    if not is_finite_real(value) or not value > 0:
        raise ValueError(f"`{name}` must be a finite positive number, got {name}={value!r}.")
    return float(value)


def check_non_negative_float(name, value):
    """Returns `value` as a float if it is a finite real number >= 0, else raises ValueError."""
    if not is_finite_real(value) or not value >= 0:
        raise ValueError(f"`{name}` must be a finite number >= 0, got {name}={value!r}.")
    return float(value)


def is_finite_real(value):
    """A real number (not a bool) that is neither infinite nor NaN."""
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def check_increasing_ints(name, value, high=None):
    """A non-empty list/tuple of increasing positive ints (at most `high`), as a tuple."""
    ok = (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(
            isinstance(n, numbers.Integral)
            and not isinstance(n, bool)
            and n > 0
            and (high is None or n <= high)
            for n in value
        )
        and all(a < b for a, b in itertools.pairwise(value))
    )
    if not ok:
        bound = "" if high is None else f" in [1, {high}]"
        raise ValueError(f"`{name}` must be increasing positive ints{bound}, got {name}={value!r}.")
    return tuple(int(n) for n in value)


def length_ladder(name, value, max_length, first):
    """An increasing tuple of lengths ending with `max_length`, from `value`.

    `"auto"` doubles from `first` (first, 2·first, … below `max_length`, then
    `max_length`); a list/tuple of increasing ints in `[1, max_length]` gets
    `max_length` appended when missing; None stays None. Used for the source
    buckets of `Translator` and the cache lengths of `Decoder`.
    """
    if value is None:
        return None
    if isinstance(value, str) and value == "auto":
        lengths, n = [], first
        while n < max_length:
            lengths.append(n)
            n *= 2
        return (*lengths, max_length)
    if isinstance(value, str):
        raise ValueError(f"`{name}` must be 'auto', None or increasing ints, got {name}={value!r}.")
    lengths = check_increasing_ints(name, value, high=max_length)
    return lengths if lengths[-1] == max_length else (*lengths, max_length)


def check_unicode_texts(name, texts):
    """Refuses a str of `texts` (a list) that UTF-8 cannot encode (a lone surrogate such
    as "\\ud800", e.g. from `surrogateescape` decoding): a ValueError naming the item."""
    for i, text in enumerate(texts):
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:
                raise ValueError(
                    f"`{name}[{i}]` is not valid Unicode ({error.reason} at character "
                    f"{error.start}), got {name}[{i}]={text!r:.80}."
                ) from None
    return texts


def check_index(name, value, size, what):
    """Returns `value` as an index in `[0, size)` if it is an int in `[-size, size)` (a
    negative one counts from the end, as Python's), else raises ValueError; `what` names
    the `size` things (e.g. "decoder layers")."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or not -size <= value < size
    ):
        raise ValueError(
            f"`{name}` must be an int in [{-size}, {size}) ({size} {what}), got {name}={value!r}."
        )
    return int(value) % size


def short_repr(value, limit=80):
    """`repr(value)` for an error message, cut to `limit` characters (a long dict or list
    would bury the message).

    >>> short_repr({"a": 1}), short_repr(list(range(100)), 12)
    ("{'a': 1}", '[0, 1, 2, 3…')
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
