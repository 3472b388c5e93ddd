"""Text pipeline: the embedded phrasebook, corpus readers, subword tokenizers and tf.data.

The special ids the tokenizers reserve are in `tfblocks.ids`.
"""

from tfblocks.text.batching import bucket_boundaries
from tfblocks.text.corpus import (
    Corpus,
    StreamedPairs,
    load_splits,
    read_parallel,
    read_sentences,
    read_tsv,
    remove_japanese_spaces,
)
from tfblocks.text.dataset import distribute_dataset, length_summary, make_dataset
from tfblocks.text.phrasebook import PhrasePair, generate_phrasebook, load_phrasebook
from tfblocks.text.tokenizers import SubwordTokenizer, train_tokenizer, train_tokenizers
from tfblocks.text.vocabulary import reordered_tokenizer

__all__ = [
    "Corpus",
    "PhrasePair",
    "StreamedPairs",
    "SubwordTokenizer",
    "bucket_boundaries",
    "distribute_dataset",
    "generate_phrasebook",
    "length_summary",
    "load_phrasebook",
    "load_splits",
    "make_dataset",
    "read_parallel",
    "read_sentences",
    "read_tsv",
    "remove_japanese_spaces",
    "reordered_tokenizer",
    "train_tokenizer",
    "train_tokenizers",
]
