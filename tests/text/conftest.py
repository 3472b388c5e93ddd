"""The phrasebook pairs and the tokenizer that the text tests share."""

import pytest

from tfblocks.text import phrasebook, train_tokenizers


@pytest.fixture(scope="package")
def pairs():
    return phrasebook.load_phrasebook(seed=0, size=1000)["train"]


@pytest.fixture(scope="package")
def tokenizer(pairs):
    return train_tokenizers(pairs, vocab_size=300, model_type="bpe")[0]
