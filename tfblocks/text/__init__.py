"""Text pipeline: the embedded phrasebook, corpus readers, subword tokenizers and tf.data."""

from tfblocks.text.phrasebook import (
    RUNNING_EXAMPLE,
    PhrasePair,
    generate_phrasebook,
    load_phrasebook,
)

__all__ = [
    "RUNNING_EXAMPLE",
    "PhrasePair",
    "generate_phrasebook",
    "load_phrasebook",
]
