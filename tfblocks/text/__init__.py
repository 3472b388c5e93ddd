"""Text pipeline: the embedded phrasebook, corpus readers, subword tokenizers and tf.data.

The special ids the tokenizers reserve are in `tfblocks.ids`.
"""

from tfblocks import _lazy

# Imported now, or on first use in a `tfblocks-*` command (tfblocks/_lazy.py), whose
# parser reads `tfblocks.text.corpus` and `tfblocks.text.shapes`, without TensorFlow.
__getattr__, __dir__, __all__ = _lazy.public_names(
    __name__,
    {
        "tfblocks.text.batching": ["bucket_boundaries"],
        "tfblocks.text.corpus": ["load_splits", "read_parallel", "read_sentences", "read_tsv"],
        "tfblocks.text.dataset": ["distribute_dataset", "length_summary", "make_dataset"],
        "tfblocks.text.pairs": ["Corpus", "remove_japanese_spaces"],
        "tfblocks.text.phrasebook": ["PhrasePair", "generate_phrasebook", "load_phrasebook"],
        "tfblocks.text.streamed": ["StreamedPairs"],
        "tfblocks.text.tokenizers": ["SubwordTokenizer", "train_tokenizer", "train_tokenizers"],
        "tfblocks.text.vocabulary": ["reordered_tokenizer"],
    },
)
