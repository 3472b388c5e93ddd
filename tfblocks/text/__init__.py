"""Text pipeline: the embedded phrasebook, corpus readers, subword tokenizers and tf.data."""

from tfblocks.text.corpus import (
    Corpus,
    StreamedPairs,
    load_splits,
    read_parallel,
    read_sentences,
    read_tsv,
    remove_japanese_spaces,
)
from tfblocks.text.dataset import (
    bucket_boundaries,
    distribute_dataset,
    length_summary,
    make_dataset,
    pipeline_files,
)
from tfblocks.text.phrasebook import (
    RUNNING_EXAMPLE,
    PhrasePair,
    generate_phrasebook,
    load_phrasebook,
)
from tfblocks.text.tokenizers import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    SubwordTokenizer,
    train_tokenizer,
    train_tokenizers,
)
from tfblocks.text.vocabulary import reordered_tokenizer

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "RUNNING_EXAMPLE",
    "UNK_ID",
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
    "pipeline_files",
    "read_parallel",
    "read_sentences",
    "read_tsv",
    "remove_japanese_spaces",
    "reordered_tokenizer",
    "train_tokenizer",
    "train_tokenizers",
]
