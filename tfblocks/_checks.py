"""Argument checks shared by every module (one home; imports nothing heavy).

Each raises `ValueError` naming the argument and echoing the value, the project's
contract for bad input.
"""

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


def check_rate(name, value):
    """Returns `value` as a float if `0 <= value < 1` (a dropout rate), else raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {name}={value!r}.")
    return float(value)


def check_positive_float(name, value):
    """Returns `value` as a float if it is a real number > 0, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"`{name}` must be a positive number, got {name}={value!r}.")
    return float(value)
