"""`import_marian` against what Hugging Face transformers computes with the same folders.

The fixture (`tests/data/marian/`, made by `tests/data/make_marian_fixture.py`) holds tiny
random `MarianMTModel`s and their logits, greedy and beam-4 outputs; nothing here needs
torch or transformers.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.fixtures import marian_ids, marian_to_tfblocks, write_marian_folder
from tfblocks.decoding import Decoder, Greedy
from tfblocks.ids import BOS_ID, PAD_ID, UNK_ID
from tfblocks.models.marian import import_marian
from tfblocks.serving import Translator

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian")
NAMES = ("shared", "multilingual")


@pytest.fixture(scope="module", params=NAMES)
def case(request):
    folder = os.path.join(DATA, request.param)
    imported = import_marian(folder)
    expected = dict(np.load(os.path.join(DATA, f"{request.param}.npz")))
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    size = config["vocab_size"]
    # tfblocks id of each Marian id: pad 0, EOS 1, unknown 2, then Marian id + 2.
    to_tf = np.arange(size) + 2
    to_tf[[config["pad_token_id"], config["eos_token_id"], 1]] = [PAD_ID, 1, 2]
    return imported, expected, to_tf, config


def test_tokenizers_give_hugging_faces_ids(case):
    imported, expected, to_tf, _ = case
    for tokenizer, texts, ids in (
        (imported.source_tokenizer, expected["sources"], expected["source_ids"]),
        (imported.target_tokenizer, expected["targets"], expected["target_ids"]),
    ):
        got = tokenizer.tokenize([str(t) for t in texts]).to_tensor().numpy()
        want = to_tf[ids]
        assert got.tolist() == want[:, : got.shape[1]].tolist()
        assert not want[:, got.shape[1] :].any()  # only padding beyond


def test_logits_equal_hugging_faces(case):
    imported, expected, to_tf, config = case
    source, target = to_tf[expected["source_ids"]], to_tf[expected["target_ids"]]
    logits = imported.model({"inputs": source, "targets": target}).numpy()  # [B, T, V + 1]
    assert logits.shape[-1] == config["vocab_size"] + 1
    real = target != PAD_ID
    np.testing.assert_allclose(logits[..., to_tf][real], expected["logits"][real], atol=1e-4)
    # The added start row takes no probability a float32 sum keeps: e^-30 times pad's.
    np.testing.assert_allclose(logits[..., BOS_ID], logits[..., PAD_ID] - 30.0, atol=1e-4)


def test_greedy_outputs_equal_hugging_faces(case):
    imported, expected, to_tf, _ = case
    limit = int(expected["max_new_tokens"])
    ids, _ = Decoder(imported.model, max_length=limit).decode(
        Greedy(), to_tf[expected["source_ids"]]
    )
    ids = ids.numpy()
    for got, want in zip(ids, to_tf[expected["greedy"]], strict=True):
        end = list(want).index(1) + 1 if 1 in want[: limit - 1] else limit - 1  # HF forces EOS
        assert got[:end].tolist() == want[:end].tolist()


def test_score_of_beam_outputs_equals_hugging_faces_log_probabilities(case):
    imported, expected, to_tf, _ = case
    beam = to_tf[expected["beam"]]  # [B * 4, T], EOS-terminated, 0-padded
    sources = np.repeat(to_tf[expected["source_ids"]], 4, axis=0)
    log_probs = Decoder(imported.model, max_length=beam.shape[1]).score(sources, beam)
    # tfblocks never generates pad, so its softmax leaves pad out, as HF's search does
    # only after its log-softmax: compare with HF's log-probabilities renormalized without it.
    totals = tf.reduce_sum(log_probs, axis=1).numpy()
    np.testing.assert_allclose(totals, expected["beam_log_probs_no_pad"], atol=1e-4)
    # With pad in the softmax, the model's own logits give HF's sums, and HF's beam score is
    # that sum over length ** length_penalty (length: the generated tokens, EOS included),
    # except where HF forced EOS at the limit.
    logits = imported.model({"inputs": sources, "targets": beam}).numpy().astype(np.float64)
    logits[..., BOS_ID] = -np.inf
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    chosen = np.take_along_axis(log_softmax, beam[..., None], -1)[..., 0]
    full = np.where(beam != PAD_ID, chosen, 0.0).sum(1)
    np.testing.assert_allclose(full, expected["beam_log_probs"], atol=1e-4)
    lengths = (beam != PAD_ID).sum(1)
    natural = ~expected["beam_forced"]
    scores = full / lengths ** float(expected["length_penalty"])
    np.testing.assert_allclose(scores[natural], expected["beam_scores"][natural], atol=1e-4)


def test_generation_defaults_and_hparams():
    imported = import_marian(os.path.join(DATA, "shared"))
    assert imported.generation == {"num_beams": 4, "max_length": 64}
    hp = imported.hparams
    assert (hp.norm_first, hp.ffn_activation, hp.norm_epsilon) == (False, "swish", 1e-5)
    assert hp.vocab_size == imported.model.vocab_size == 66


def test_multilingual_tag_stays_one_piece():
    imported = import_marian(os.path.join(DATA, "multilingual"))
    with open(os.path.join(DATA, "multilingual", "vocab.json"), encoding="utf-8") as f:
        tag = json.load(f)[">>fra<<"]
    ids = imported.source_tokenizer.tokenize([">>fra<< the cat"]).to_list()[0]
    assert ids[0] == tag + 2  # tfblocks id of the tag


# "!" only the source's SentencePiece model learnt, "ä" only the target's; "?" neither.
OTHER_SIDE = {"source": ["the cat sleeps in der garten, schläft!?", "ä"],
              "target": ["die katze schläft!", "der hund! sitzt? im garten !"]}  # fmt: skip


def test_a_piece_only_the_other_side_learnt_keeps_its_vocabulary_id(tmp_path):
    """As Hugging Face's `MarianTokenizer`: a piece the side's SentencePiece model leaves
    unknown takes its own id where `vocab.json` (both sides' pieces) holds it."""
    folder = write_marian_folder(tmp_path / "opus")
    imported, to_tf = import_marian(folder), marian_to_tfblocks(folder)
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    for side, texts in OTHER_SIDE.items():
        want = [to_tf[row].tolist() for row in marian_ids(folder, side, texts)]
        flat = [i for row in want for i in row]
        assert any(vocab[piece] + 2 in flat for piece in ("!", "ä")), want
        assert UNK_ID in flat  # "?" stays unknown
        tokenizer = getattr(imported, f"{side}_tokenizer")
        assert tokenizer.tokenize(texts).to_list() == want


def test_the_export_scores_a_piece_of_the_other_side_as_hugging_face_ids(tmp_path):
    """The SavedModel's `score` signature tokenizes the target as the original does."""
    folder = write_marian_folder(tmp_path / "opus")
    imported, to_tf = import_marian(folder), marian_to_tfblocks(folder)
    sources, targets = ["the cat sleeps!"] * 2, OTHER_SIDE["target"]
    source = tf.ragged.constant([to_tf[r] for r in marian_ids(folder, "source", sources)])
    target = tf.ragged.constant([to_tf[r] for r in marian_ids(folder, "target", targets)])
    source, target = source.to_tensor(), target.to_tensor()
    want = tf.reduce_sum(Decoder(imported.model, max_length=32).score(source, target), 1)
    translator = Translator(
        imported.model, imported.source_tokenizer, imported.target_tokenizer, 32, Greedy()
    )
    translator.export(str(tmp_path / "export"))
    saved = tf.saved_model.load(str(tmp_path / "export")).signatures["score"]
    got = saved(source=tf.constant(sources), target=tf.constant(targets))["score"]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)


def _hf_positions(length, channels):
    """Hugging Face's sinusoidal table (what older transformers stored): sin of the even
    channels' angles, then cos of the odd ones'."""
    j = np.arange(channels)
    angles = np.arange(length)[:, None] / np.power(10000, 2 * (j // 2) / channels)[None]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], 1)


def _logits_of(folder, name="shared"):
    expected = dict(np.load(os.path.join(DATA, f"{name}.npz")))
    imported = import_marian(folder)
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    to_tf = np.arange(config["vocab_size"]) + 2
    to_tf[[config["pad_token_id"], config["eos_token_id"], 1]] = [PAD_ID, 1, 2]
    source, target = to_tf[expected["source_ids"]], to_tf[expected["target_ids"]]
    logits = imported.model({"inputs": source, "targets": target}).numpy()[..., to_tf]
    real = target != PAD_ID
    return imported, logits[real], expected["logits"][real]


def test_stored_position_tables_and_untied_softmax_are_read(tmp_path):
    """Older saves hold `embed_positions.weight` (read into a position table) and untied
    models `lm_head.weight` (the softmax): the logits stay Hugging Face's."""
    from safetensors.numpy import load_file, save_file

    folder = _copy(tmp_path)
    weights = load_file(folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    table = _hf_positions(config["max_position_embeddings"], config["d_model"])
    for side in ("encoder", "decoder"):
        # Off by 1e-3 from the formula, so that reading the table is what is tested.
        weights[f"model.{side}.embed_positions.weight"] = (table + 1e-3).astype(np.float32)
    weights["lm_head.weight"] = weights["model.shared.weight"]
    save_file(weights, folder / "model.safetensors")
    _edit_config(folder, tie_word_embeddings=False)
    imported, got, want = _logits_of(folder)
    assert imported.hparams.pos == "emb" and imported.model.softmax is not None
    assert not np.allclose(got, want, atol=1e-4)  # the shifted table was used
    weights = {k: v for k, v in weights.items() if "embed_positions" not in k}
    for side in ("encoder", "decoder"):
        weights[f"model.{side}.embed_positions.weight"] = table.astype(np.float32)
    save_file(weights, folder / "model.safetensors")
    _, got, want = _logits_of(folder)
    np.testing.assert_allclose(got, want, atol=1e-4)


def _copy(tmp_path, name="shared"):
    folder = tmp_path / name
    shutil.copytree(os.path.join(DATA, name), folder)
    return folder


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: os.remove(f / "source.spm"), r"source\.spm: missing"),
        (lambda f: os.remove(f / "config.json"), r"config\.json: missing"),
        (
            lambda f: os.rename(f / "model.safetensors", f / "pytorch_model.bin"),
            r"pytorch_model\.bin: is not a zip archive, not a torch checkpoint",
        ),
        (
            lambda f: _edit_config(f, normalize_before=True),
            r"config\.json: unsupported normalize_before=True",
        ),
        (
            lambda f: _edit_config(f, activation_function="tanh"),
            r"config\.json: unsupported activation_function='tanh'",
        ),
        (
            lambda f: _edit_config(f, model_type="bart"),
            r"config\.json: unsupported model_type='bart'",
        ),
        (
            lambda f: _edit_vocab(f),
            r"vocab\.json: 64 pieces, but config\.json has vocab_size=65 and model\.safetensors' "
            r"embedding 65 rows",
        ),
        (lambda f: _truncate(f / "model.safetensors"), r"model\.safetensors: not a readable"),
        (
            lambda f: shutil.copy(f / "vocab.json", f / "target_vocab.json"),
            r"target_vocab\.json: unsupported: separate source and target vocabularies",
        ),
        (
            lambda f: _add_weight(f, "model.encoder.layernorm_embedding.weight"),
            r"model\.safetensors: unsupported weight model\.encoder\.layernorm_embedding\.weight",
        ),
        (
            lambda f: _edit_config(f, pad_token_id=999),
            r"config\.json: unsupported pad_token_id=999 \(an id below vocab_size=65\)",
        ),
        (
            lambda f: _edit_config(f, decoder_ffn_dim=8),
            r"config\.json: unsupported decoder_ffn_dim=8: tfblocks needs it equal to "
            r"encoder_ffn_dim=32",
        ),
        (  # named by config.json's keys, not by HParams' fields
            lambda f: _edit_config(f, encoder_attention_heads=3, decoder_attention_heads=3),
            r"config\.json: d_model=16 is not a multiple of encoder_attention_heads=3",
        ),
        (  # the wrong one is vocab_size, which decoder_vocab_size and the pieces contradict
            lambda f: _edit_config(f, vocab_size=70, decoder_vocab_size=65),
            r"config\.json: vocab_size=70, but vocab\.json holds 65 pieces",
        ),
        (
            lambda f: (os.remove(f / "model.safetensors"), os.mkdir(f / "model.safetensors")),
            r"model\.safetensors: a folder where a file is expected",
        ),
    ],
)
def test_import_errors_name_the_file_and_value(tmp_path, edit, message):
    folder = _copy(tmp_path)
    edit(folder)
    with pytest.raises(ValueError, match=message) as error:
        import_marian(folder)
    assert "\n" not in str(error.value)


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def _edit_vocab(folder):
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab.pop("<pad>")
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")


def _add_weight(folder, key):
    from safetensors.numpy import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    weights[key] = np.ones(16, np.float32)
    save_file(weights, folder / "model.safetensors")


def _truncate(file):
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _pairs_of(imported):
    """A made-up corpus in the imported tokenizers' ids: `(inputs, targets)` padded."""
    sources = ["the cat sits.", "the dog sleeps.", "the train is late.", "it rains."] * 5
    targets = ["die katze sitzt.", "der hund schläft.", "der zug ist spät.", "es regnet."] * 5
    source = imported.source_tokenizer.tokenize(sources).to_tensor().numpy()
    target = imported.target_tokenizer.tokenize(targets).to_tensor().numpy()
    return {"inputs": source, "targets": target}, target


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_fine_tuning_an_import_lowers_its_loss(lora):
    from tfblocks.training import compile_transformer
    from tfblocks.training.lora import enable_lora

    imported = import_marian(os.path.join(DATA, "shared"))
    model = imported.model
    if lora:
        enable_lora(model, rank=2)
    # The frozen weights (not the dropout layers' integer seed counters).
    frozen = [v for v in model.non_trainable_variables if "float" in str(v.dtype)]
    base = [v.numpy().copy() for v in frozen]
    compile_transformer(model, imported.hparams, jit_compile=False, learning_rate=3e-3)
    x, y = _pairs_of(imported)
    before = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    model.fit(x, y, batch_size=5, epochs=8, verbose=0, shuffle=False)
    after = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
    assert after < before - 0.1, (before, after)
    if lora:  # the base weights (every non-adapter variable) are bit for bit the same
        assert len(frozen) > len(model.trainable_variables)  # kernels, embedding, norms
        for old, variable in zip(base, frozen, strict=True):
            np.testing.assert_array_equal(old, variable.numpy())


# --- Marian's own format: tests/data/marian/npz (make_marian_npz_fixture.py); its
# agreement with CTranslate2's MarianConverter is tests/serving/test_ctranslate2_marian.py.


def _npz_copy(tmp_path, **options):
    """A copy of the npz fixture with `special:model.yml` options replaced."""
    folder = tmp_path / "npz"
    shutil.copytree(os.path.join(DATA, "npz"), folder)
    if options:
        weights = dict(np.load(folder / "model.npz"))
        text = weights["special:model.yml"].tobytes().rstrip(b"\0").decode()
        lines = [line for line in text.splitlines() if line.split(":")[0] not in options]
        lines += [f"{key}: {value}" for key, value in options.items()]
        weights["special:model.yml"] = np.frombuffer(("\n".join(lines) + "\n\0").encode(), np.int8)
        np.savez(folder / "model.npz", **weights)
    return folder


def test_npz_import_maps_marian_ids_and_options():
    imported = import_marian(os.path.join(DATA, "npz"))
    hp = imported.hparams
    assert (hp.norm_epsilon, hp.timescale_rule, hp.ffn_activation) == (1e-9, "t2t", "swish")
    assert imported.model.vocab_size == 64 + 2  # Marian's 64 pieces, pad and BOS added
    # tfblocks id = Marian id + 2 for the pieces (vocab.yml's ids); </s> 0 → 1.
    import sentencepiece
    import yaml

    with open(os.path.join(DATA, "npz", "vocab.yml"), encoding="utf-8") as f:
        vocab = {str(k): int(v) for k, v in yaml.load(f, Loader=yaml.BaseLoader).items()}
    processor = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(DATA, "npz", "source.spm")
    )
    text = "the cat sits on the mat."
    want = [vocab[p] + 2 for p in processor.encode(text, out_type=str)] + [1]
    ids = imported.source_tokenizer.tokenize([text]).to_list()[0]
    assert ids == want
    logits = imported.model({"inputs": np.array([ids]), "targets": np.array([[5, 1]])})
    # The added rows (pad: a zero embedding, BOS: pad's) take no probability a float32 sum
    # keeps: their logits sit ADDED_ROW_MARGIN below the model's lowest bias and below pad's.
    logits = logits.numpy()
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert (probs[..., [PAD_ID, BOS_ID]] < 1e-12).all(), probs[..., [PAD_ID, BOS_ID]]
    np.testing.assert_allclose(logits[..., BOS_ID], logits[..., PAD_ID] - 30.0, atol=1e-4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"transformer-preprocess": "n"}, r"unsupported transformer-preprocess='n'"),
        ({"transformer-ffn-activation": "gelu"}, r"unsupported transformer-ffn-activation"),
        ({"type": "s2s"}, r"unsupported type='s2s'"),
        ({"transformer-postprocess-emb": "nd"}, r"unsupported transformer-postprocess-emb"),
    ],
)
def test_npz_unsupported_options_are_refused(tmp_path, options, message):
    with pytest.raises(ValueError, match=r"model\.npz:special:model\.yml: " + message):
        import_marian(_npz_copy(tmp_path, **options))


def test_npz_refusals_name_the_file(tmp_path):
    folder = _npz_copy(tmp_path)
    weights = dict(np.load(folder / "model.npz"))
    np.savez(folder / "model.npz", **weights, encoder_emb_ln_scale_pre=np.ones((1, 16), "f4"))
    with pytest.raises(ValueError, match=r"model\.npz: unsupported weight encoder_emb_ln_scale"):
        import_marian(folder)
    del weights["decoder_l1_ffn_b2"]
    np.savez(folder / "model.npz", **weights)
    with pytest.raises(ValueError, match=r"model\.npz: no weight decoder_l1_ffn_b2"):
        import_marian(folder)
    (folder / "model.npz").write_bytes((folder / "model.npz").read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"model\.npz: not a readable \.npz file"):
        import_marian(folder)
    np.savez(folder / "model.npz", **weights)
    os.remove(folder / "vocab.yml")
    with pytest.raises(ValueError, match=r"vocab\.yml: missing"):
        import_marian(folder)
