"""save_preset / load_preset: the KerasHub preset layout round trip, and what it refuses."""

import json

import numpy as np
import pytest

import tfblocks
from tfblocks.models import Transformer, load_preset, save_preset
from tfblocks.models.preset import TransformerTokenizer
from tfblocks.text import train_tokenizer

SENTENCES = ["今日のランチはカレーだ。", "Today's lunch is curry."]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES * 20, vocab_size=40)


@pytest.mark.parametrize("encoders", [2, 0])
def test_round_trip_gives_the_same_model_tokenizer_and_hparams(tokenizer, tmp_path, encoders):
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, hidden_size=32,
        filter_size=64, num_encoder_layers=encoders, norm_first=False,
    )  # fmt: skip
    build = tfblocks.build_transformer if encoders else tfblocks.build_language_model
    model = build(hp)
    path = save_preset(model, tokenizer, tmp_path / "preset", hp)
    names = sorted(p.name for p in (tmp_path / "preset").iterdir())
    assert {"config.json", "model.weights.h5", "tokenizer.json", "hparams.json"} <= set(names)
    assert (
        json.loads((tmp_path / "preset" / "config.json").read_text())["config"][
            "num_encoder_layers"
        ]
        == encoders
    )
    loaded = load_preset(path)
    assert loaded.hparams == hp and isinstance(loaded.model, Transformer)
    ids = tokenizer.tokenize(SENTENCES).to_tensor().numpy()
    x = {"inputs": ids, "targets": ids} if encoders else ids
    np.testing.assert_array_equal(np.asarray(loaded.model(x)), np.asarray(model(x)))
    np.testing.assert_array_equal(loaded.tokenizer.tokenize(SENTENCES).to_tensor().numpy(), ids)
    # KerasHub's own loaders read it too.
    assert Transformer.from_preset(path).count_params() == model.count_params()
    pieces = np.asarray(TransformerTokenizer.from_preset(path)(SENTENCES[1])).tolist()
    assert pieces == [int(i) for i in ids[1] if i not in (0, tfblocks.EOS_ID)]


def test_refuses_a_users_directory_and_bad_arguments(tokenizer, tmp_path):
    hp = tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
    model = tfblocks.build_transformer(hp)
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="mine"):
        save_preset(model, tokenizer, users, hp)
    assert (users / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="hp"):
        save_preset(model, tokenizer, tmp_path / "p", hp={"hidden_size": 3})
    with pytest.raises(ValueError, match=r"config\.json"):
        load_preset(users)
    small = train_tokenizer(SENTENCES * 20, vocab_size=40)
    tiny = tfblocks.build_transformer(tfblocks.hparams("transformer_tiny", vocab_size=8))
    with pytest.raises(ValueError, match="tokenizer"):
        save_preset(tiny, small, tmp_path / "q")


def test_bad_hparams_json_is_an_error_naming_the_file(tokenizer, tmp_path):
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, hidden_size=32, filter_size=64,
        num_encoder_layers=1, num_decoder_layers=1,
    )  # fmt: skip
    path = save_preset(tfblocks.build_transformer(hp), tokenizer, tmp_path / "preset", hp)
    hparams_file = tmp_path / "preset" / "hparams.json"
    saved = json.loads(hparams_file.read_text())
    for content, words in [
        (json.dumps({**saved, "hiden_size": 3}), "unknown HParams field: hiden_size=3"),
        (json.dumps({**saved, "num_heads": 0}), "num_heads=0"),
        (json.dumps([1, 2]), "must hold a JSON object of HParams fields, got [1, 2]"),
        ("{not json", "is not a JSON file of HParams"),
    ]:
        hparams_file.write_text(content)
        with pytest.raises(ValueError) as error:
            load_preset(path)
        assert str(hparams_file) in str(error.value) and words in str(error.value), error.value
