"""`tfblocks-import marian DIR --output RUN`: a run folder the other commands read, and
nothing left behind when the import is refused."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tfblocks.models import load_preset, load_target_tokenizer
from tfblocks.translation import engines
from tfblocks.translation.import_command import main

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return main(
        [
            "marian",
            os.path.join(DATA, "shared"),
            "--output",
            str(tmp_path_factory.mktemp("runs") / "run"),
        ]
    )


def test_import_writes_a_run_folder_that_translates_like_hugging_face(run):
    for name in ("run.json", "tokenizer.model", "model/config.json", "export/1/saved_model.pb"):
        assert os.path.isfile(os.path.join(run, name)), name
    with open(os.path.join(run, "run.json"), encoding="utf-8") as f:
        settings = json.load(f)["settings"]
    assert settings["generation"] == {"num_beams": 4, "max_length": 64}
    assert settings["import_format"] == "marian"
    expected = np.load(os.path.join(DATA, "shared.npz"))
    _, tokenizer, hp = load_preset(os.path.join(run, "model"))
    assert hp.max_length == 63  # generation_config's max_length without the decoder start
    # The greedy translations start with Hugging Face's greedy ids, as text (HF stopped
    # them at 16 tokens, the last one a forced EOS; the run's max_length is longer).
    translate, _ = engines.load_translate(run, beam_size=1, notice=lambda message: None)
    sources = [str(s) for s in expected["sources"]]
    with open(os.path.join(DATA, "shared", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    to_tf = np.arange(config["vocab_size"]) + 2
    to_tf[[config["pad_token_id"], config["eos_token_id"], 1]] = [0, 1, 2]
    target = load_target_tokenizer(os.path.join(run, "model")) or tokenizer
    want = target.detokenize(tf.constant(to_tf[expected["greedy"]], tf.int32)).numpy()
    got = translate(sources)
    for got_one, want_one, ids in zip(got, want, expected["greedy"], strict=True):
        forced = config["eos_token_id"] not in ids[:-1].tolist()
        assert got_one.startswith(want_one.decode()) if forced else got_one == want_one.decode()


def test_export_translates_as_the_preset_with_the_models_beam(run):
    sources = ["the cat sits on the mat.", "rain"]
    translate, _ = engines.load_translate(run, beam_size=4, notice=lambda message: None)
    saved = tf.saved_model.load(os.path.join(run, "export", "1")).signatures["serving_default"]
    exported = saved(text=tf.constant(sources))["translation"].numpy()
    assert [e.decode() for e in exported] == translate(sources)


def test_refused_import_leaves_no_folder(tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(os.path.join(DATA, "shared"), folder)
    os.remove(folder / "vocab.json")
    output = tmp_path / "run"
    with pytest.raises(ValueError, match=r"vocab\.json: missing"):
        main(["marian", str(folder), "--output", str(output)])
    assert sorted(os.listdir(tmp_path)) == ["broken"]


def test_existing_output_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"--output=.*exists and is not an empty folder"):
        main(["marian", os.path.join(DATA, "shared"), "--output", str(tmp_path / "run")])
    assert os.listdir(tmp_path / "run") == ["notes.txt"]
