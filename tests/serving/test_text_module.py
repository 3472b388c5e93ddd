"""What Translator and Generator share: blank lines found in the graph."""

import numpy as np
import tensorflow as tf

from tfblocks.serving import text_module

# Blank lines beyond ASCII: ideographic and no-break spaces, a line separator, tabs, NEL.
BLANKS = ["\u3000\u3000", "\t\u00a0\u2028 \u2029", "\x1c\x85\u202f\u205f\x0b"]


def test_blank_is_what_python_strips():
    # Every code point (surrogates cannot be UTF-8): blank in the graph exactly when
    # `str.strip()` leaves nothing, as CTranslate2Translator decides it.
    points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    blank = text_module.blank_lines(tf.constant([chr(c) for c in points])).numpy()
    np.testing.assert_array_equal(blank, [not chr(c).strip() for c in points])
    lines = ["", "\u3000" * 5000, *BLANKS, "a\u3000", "\u200b", "\x00", "\u3000x\u3000"]
    got = text_module.blank_lines(tf.constant(lines)).numpy().tolist()
    assert got == [not line.strip() for line in lines] == [True] * 5 + [False] * 4
