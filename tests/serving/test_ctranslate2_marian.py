"""`export_ctranslate2` of imported Marian / OPUS-MT models: CTranslate2 computes what
tfblocks computes (swish, biases, LayerNorm epsilon 1e-5, `final_logits_bias`, Hugging
Face's timing signal or a stored position table, untied softmax), and
`tfblocks-translate --engine ctranslate2` reads an imported run folder."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("ctranslate2")

from tests.fixtures import marian_ids, write_marian_folder
from tfblocks.decoding import Decoder, Greedy
from tfblocks.ids import PAD_ID
from tfblocks.models.marian import import_marian
from tfblocks.serving.ctranslate2 import CTranslate2Translator
from tfblocks.serving.ctranslate2_export import export_ctranslate2
from tfblocks.serving.savedmodel import Translator

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian")
SOURCES = ["the cat sits on the mat.", "a frog reads the book, quietly!", "rain"]
TARGETS = ["die katze sitzt auf der matte.", "ein frosch liest.", "regen im garten"]
MAX_LENGTH = 16


def full_scores(imported, sources, targets):
    """Each target's summed log-probability with the softmax over every row (what
    CTranslate2's `score_batch` normalizes over), from the model's own logits."""
    source = imported.source_tokenizer.tokenize(sources).to_tensor().numpy()  # EOS-ended
    target = imported.target_tokenizer.tokenize(targets).to_tensor().numpy()
    logits = imported.model({"inputs": source, "targets": target}).numpy().astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_softmax = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    chosen = np.take_along_axis(log_softmax, target[..., None], -1)[..., 0]
    return np.where(target != PAD_ID, chosen, 0.0).sum(1)


def check_agreement(imported, tmp_path, sources=SOURCES, targets=TARGETS):
    """CTranslate2's scores and greedy translations of the export equal tfblocks'."""
    path = export_ctranslate2(
        imported.model,
        imported.source_tokenizer,
        tmp_path / "ct2",
        target_tokenizer=imported.target_tokenizer,
    )
    scorer = CTranslate2Translator(path, beam_size=1)  # max_length 64: sources stay whole
    want = full_scores(imported, sources, targets)
    np.testing.assert_allclose(scorer.score(sources, targets), want, atol=1e-4)
    engine = CTranslate2Translator(path, beam_size=1, max_length=MAX_LENGTH)
    translator = Translator(
        imported.model, imported.source_tokenizer, imported.target_tokenizer, MAX_LENGTH, Greedy()
    )
    ours = [t.decode() for t in translator(tf.constant(sources)).numpy()]
    assert engine(sources) == ours
    return path


@pytest.mark.parametrize("name", ["shared", "multilingual"])
def test_export_of_an_imported_model_scores_and_translates_as_tfblocks(name, tmp_path):
    imported = import_marian(os.path.join(DATA, name))
    sources = [f">>fra<< {s}" for s in SOURCES] if name == "multilingual" else SOURCES
    check_agreement(imported, tmp_path, sources)


def test_pieces_only_the_other_side_learnt_keep_their_ids(tmp_path):
    """CTranslate2 reads a source "ä" and a target "!" (each learnt only by the other
    side's SentencePiece model) as their `vocab.json` ids, as tfblocks and Hugging Face."""
    folder = write_marian_folder(tmp_path / "opus")
    sources, targets = ["the cat sät!", "a dog!"], ["die katze schläft!", "der hund!"]
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["ä"] in marian_ids(folder, "source", sources)[0]
    assert vocab["!"] in marian_ids(folder, "target", targets)[0]
    check_agreement(import_marian(folder), tmp_path, sources, targets)


def test_stored_position_table_and_untied_softmax_are_exported(tmp_path):
    """A stored table that is not the formula and an untied `lm_head` (older saves)."""
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "stored"
    shutil.copytree(os.path.join(DATA, "shared"), folder)
    weights = load_file(folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    rng = np.random.default_rng(0)
    shape = (config["max_position_embeddings"], config["d_model"])
    for side in ("encoder", "decoder"):
        weights[f"model.{side}.embed_positions.weight"] = rng.normal(size=shape).astype("float32")
    weights["lm_head.weight"] = rng.normal(size=weights["model.shared.weight"].shape).astype(
        "float32"
    )
    save_file(weights, folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    imported = import_marian(folder)
    assert imported.model.softmax is not None and imported.hparams.pos == "emb"
    check_agreement(imported, tmp_path)


def test_engine_ctranslate2_decodes_an_imported_run_with_its_num_beams(tmp_path, monkeypatch):
    """Without a beam size, CTranslate2 decodes an imported run (its folder or its
    ctranslate2/, through the library or `tfblocks-translate --engine ctranslate2`) with
    the folder's `num_beams`, the run's one beam size: here 1, greedy, as the model's own
    greedy `Translator` translates."""
    from tfblocks.translation import engines, importing

    folder = tmp_path / "greedy"
    shutil.copytree(os.path.join(DATA, "shared"), folder)
    values = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**values, "num_beams": 1}))
    # Not its SavedModel (export/1: tests/cli/test_import.py), which nothing here reads.
    monkeypatch.setattr(Translator, "export", lambda self, path: path)
    run = importing.import_run(str(folder), str(tmp_path / "run"), ctranslate2=True)
    exported = os.path.join(run, "ctranslate2")
    # The run's max_length (its model/hparams.json), not CTranslate2Translator's 64.
    length = json.loads((tmp_path / "run" / "model" / "hparams.json").read_text())["max_length"]
    want = CTranslate2Translator(exported, beam_size=1, max_length=length)(SOURCES)
    assert CTranslate2Translator(exported, beam_size=1)(SOURCES) != want  # cut at 64
    assert CTranslate2Translator(exported, beam_size=4, max_length=length)(SOURCES) != want
    for path in (run, exported):
        translate, what = engines.load_translate(path, engine="ctranslate2")
        assert translate(SOURCES) == want and what.endswith("(beam 1)"), what
    # `tfblocks-translate --engine ctranslate2` on the run folder: the same, and what the
    # imported model's own greedy Translator gives.
    from tfblocks.cli import translate as translate_cli

    (tmp_path / "in.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    files = ["--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")]
    translate_cli.main(["--model", run, "--engine", "ctranslate2", *files])
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert got == want and len(got) == len(SOURCES)
    imported = import_marian(os.path.join(DATA, "shared"))
    translator = Translator(
        imported.model, imported.source_tokenizer, imported.target_tokenizer, length, Greedy()
    )
    assert got == [t.decode() for t in translator(tf.constant(SOURCES)).numpy()]


# --- Marian's own format (tests/data/marian/npz, made by make_marian_npz_fixture.py) ---

NPZ = os.path.join(DATA, "npz")


def marian_timing_signal(positions, dim):
    """Marian's sinusoid: t2t's timescales over d/2 − 1 steps, sin | cos, from position 0."""
    from tfblocks.layers.embedding import timing_signal

    return timing_signal(positions, dim, timescale_rule="t2t")[0].numpy()


def converter_agrees(imported, folder, tmp_path):
    """CTranslate2's `MarianConverter` on `folder` and tfblocks' import of it: the same
    scores (1e-4) and the same greedy pieces."""
    import ctranslate2
    import sentencepiece
    from ctranslate2.converters import MarianConverter

    output = MarianConverter(
        os.path.join(folder, "model.npz"), [os.path.join(folder, "vocab.yml")]
    ).convert(str(tmp_path / "converted"))
    # The converter leaves LayerNorm's epsilon to CTranslate2's default (1e-5); Marian's
    # own is 1e-9 (its layerNorm), which tfblocks' import keeps: set it in the config.
    with open(os.path.join(output, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert config["layer_norm_epsilon"] is None
    config["layer_norm_epsilon"] = 1e-9
    with open(os.path.join(output, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    engine = ctranslate2.Translator(output, device="cpu")
    pieces = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "source.spm"))
    target = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, "target.spm"))
    sources = [pieces.encode(s, out_type=str) for s in SOURCES]
    targets = [target.encode(t, out_type=str) for t in TARGETS]
    theirs = [sum(r.log_probs) for r in engine.score_batch(sources, targets)]
    translator = Translator(
        imported.model, imported.source_tokenizer, imported.target_tokenizer, 64, Greedy()
    )
    np.testing.assert_allclose(translator.score(SOURCES, TARGETS), theirs, atol=1e-4)
    results = engine.translate_batch(sources, beam_size=1, max_decoding_length=MAX_LENGTH)
    ids, _ = Decoder(imported.model, max_length=MAX_LENGTH).decode(
        Greedy(), imported.source_tokenizer.tokenize(SOURCES).to_tensor()
    )
    ours = sentencepiece.SentencePieceProcessor(model_proto=imported.target_tokenizer.proto)
    for row, result in zip(ids.numpy().tolist(), results, strict=True):
        row = row[: row.index(1)] if 1 in row else row
        assert [ours.id_to_piece(i) for i in row] == result.hypotheses[0]


def test_marian_npz_import_agrees_with_ctranslate2s_marian_converter(tmp_path, monkeypatch):
    """CTranslate2's converter computes its own sinusoid over d/2 timescales, while
    Marian (and tfblocks' import) spaces them over d/2 − 1 (Marian's C++): its table is
    replaced by Marian's for the comparison (and its LayerNorm epsilon, see
    `converter_agrees`)."""
    from ctranslate2.converters import marian as ct2_marian

    monkeypatch.setattr(
        ct2_marian,
        "_make_sinusoidal_position_encodings",
        lambda dim: marian_timing_signal(256, dim),
    )
    imported = import_marian(NPZ)
    assert imported.hparams.norm_epsilon == 1e-9 and imported.hparams.timescale_rule == "t2t"
    assert imported.generation == {"num_beams": 6}  # decoder.yml's beam-size
    converter_agrees(imported, NPZ, tmp_path)
    check_agreement(imported, tmp_path)  # tfblocks' own CTranslate2 export of the import


def test_marian_npz_trained_positions_agree_with_ctranslate2(tmp_path):
    """With a trained position table (`Wpos`) CTranslate2's converter is used as it is."""
    folder = tmp_path / "wpos"
    shutil.copytree(NPZ, folder)
    weights = dict(np.load(folder / "model.npz"))
    dim = weights["Wemb"].shape[1]
    rng = np.random.default_rng(1)
    weights["Wpos"] = rng.normal(size=(64, dim)).astype(np.float32)
    np.savez(folder / "model.npz", **weights)
    imported = import_marian(folder)
    assert imported.hparams.pos == "emb"
    converter_agrees(imported, str(folder), tmp_path)


def test_zero_decoder_start_is_exported(tmp_path):
    """`decoder_start="zeros"` (t2t's, Marian's own) is CTranslate2's
    `start_from_zero_embedding`: the same scores and greedy outputs."""
    import dataclasses

    from tfblocks.models import build_transformer

    imported = import_marian(os.path.join(DATA, "shared"))
    hp = dataclasses.replace(imported.hparams, decoder_start="zeros")
    model = build_transformer(hp)
    model.set_weights(imported.model.get_weights())
    check_agreement(imported._replace(model=model, hparams=hp), tmp_path)
