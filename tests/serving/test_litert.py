"""export_litert: the LiteRT file translates as the Translator does, alone in a fresh process."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from ai_edge_litert import interpreter as litert  # the `litert` extra, part of `test`

import tfblocks
from tests.serving.test_ctranslate2 import _hparams, _trained, data  # noqa: F401 (a fixture)
from tfblocks.cli import export as export_cli
from tfblocks.decoding import Greedy, Sampling
from tfblocks.models import save_preset
from tfblocks.serving import Translator
from tfblocks.serving.litert import custom_ops, file_metadata
from tfblocks.text import load_phrasebook, train_tokenizer
from tfblocks.translation import evaluation

pytestmark = pytest.mark.heavy  # converts whole translators: scheduled first

MAX_LENGTH = 16

# Runs a LiteRT file with the interpreter and tensorflow-text's ops only: argv = the file,
# then the texts as JSON; prints the translations, scores and whether tfblocks was loaded.
RUN_FILE = """
import json, sys
import numpy as np
from ai_edge_litert.interpreter import InterpreterWithCustomOps
from tensorflow_text import tflite_registrar

interpreter = InterpreterWithCustomOps(
    model_path=sys.argv[1], custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
)
out = interpreter.get_signature_runner()(text=np.array(json.loads(sys.argv[2]), object))
print(json.dumps({
    "translation": [t.decode("utf-8") for t in out["translation"]],
    "score": out["score"].tolist(),
    "tfblocks": "tfblocks" in sys.modules,
}))
"""


def _run(path, texts):
    """`(translations, scores)` of the LiteRT file `path` for `texts`, in this process."""
    from tensorflow_text import tflite_registrar

    interpreter = litert.InterpreterWithCustomOps(
        model_path=path, custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
    )
    out = interpreter.get_signature_runner()(text=np.array(texts, object))
    return [t.decode("utf-8") for t in out["translation"]], out["score"]


@pytest.fixture(scope="module")
def texts():
    """The phrasebook test split's first sources, and two blank lines."""
    return [s for s, _ in load_phrasebook(size=1000)["test"][:40]] + ["", " \u3000"]


@pytest.fixture(scope="module")
def beam(data, tmp_path_factory):  # noqa: F811
    """`(Translator, file)`: beam search 4 (the default), float32."""
    _, tokenizer = data
    translator = Translator(_trained(data), tokenizer, tokenizer, MAX_LENGTH)
    path = translator.export_litert(tmp_path_factory.mktemp("litert") / "beam.tflite")
    return translator, path


def test_beam_file_translates_as_the_translator(beam, texts):
    translator, path = beam
    translations, scores = _run(path, texts)
    assert translations == [t.decode("utf-8") for t in translator(texts).numpy()]
    expected = translator.serve(np.array(texts))["score"].numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
    assert translations[-2:] == ["", ""] and len(set(translations)) > 5
    with open(path, "rb") as f:
        assert custom_ops(f.read()) == [
            "TFText>FastSentencepieceDetokenize",
            "TFText>FastSentencepieceTokenize",
        ]  # no Select TF op


def test_a_batch_of_blank_texts_gives_empty_translations(beam):
    """Blank texts alone (no subword in the whole batch) give "" with score 0, as beside
    other texts; the file records no target language (a model of one direction)."""
    _, path = beam
    for blanks in ([""], ["   \t "], ["", " \u3000", "\n"]):
        translations, scores = _run(path, blanks)
        assert translations == [""] * len(blanks)
        assert scores.tolist() == [0.0] * len(blanks)
    assert file_metadata(path) == {"target_lang": None}


def test_fresh_process_runs_the_file_without_tfblocks(beam, texts):
    translator, path = beam
    done = subprocess.run(
        [sys.executable, "-c", RUN_FILE, str(path), json.dumps(texts[:6])],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["translation"] == [t.decode("utf-8") for t in translator(texts[:6]).numpy()]
    assert out["tfblocks"] is False


def test_greedy_float32_and_int8_from_the_command(data, texts, tmp_path):  # noqa: F811
    """`tfblocks-export litert`: the greedy float32 file translates as the Translator;
    the int8 one is smaller by most of its weights' bytes and scores within 1 BLEU."""
    _, tokenizer = data
    model = _trained(data)
    greedy = Translator(model, tokenizer, tokenizer, MAX_LENGTH, search=Greedy())
    float32 = greedy.export_litert(tmp_path / "greedy.tflite")
    translations, _ = _run(float32, texts)
    assert translations == [t.decode("utf-8") for t in greedy(texts).numpy()]

    hp = _hparams(tokenizer, max_length=MAX_LENGTH)  # `_trained`'s architecture
    save_preset(model, tokenizer, tmp_path / "run" / "model", hp)
    argv = ["litert", "--model", str(tmp_path / "run"), "--output", str(tmp_path / "i8.tflite")]
    int8 = export_cli.main([*argv, "--quantization", "dynamic", "--beam-size", "1"])
    weights = 4 * model.count_params()  # float32 bytes
    assert os.path.getsize(float32) - os.path.getsize(int8) > 0.5 * weights
    references = [t for _, t in load_phrasebook(size=1000)["test"][:40]]
    bleu = [evaluation.score(_run(p, texts[:40])[0], references)["bleu"] for p in (float32, int8)]
    assert abs(bleu[0] - bleu[1]) <= 1.0, bleu
    with pytest.raises(ValueError, match="exists; choose a new file"):
        export_cli.main(argv)


def test_what_litert_cannot_hold_is_refused_before_writing(beam, tmp_path):
    translator, _ = beam
    path = tmp_path / "refused.tflite"
    ensemble = tfblocks.Ensemble([translator.model, translator.model])
    tokenizer = translator.source_tokenizer
    hp = tfblocks.hparams(
        "transformer_tiny", vocab_size=tokenizer.vocabulary_size, pos="emb", max_length=8
    )  # fmt: skip: a table of 8 positions
    short = tfblocks.build_transformer(hp)
    pairs = load_phrasebook(size=1000)["train"][:100]
    bpe = train_tokenizer([side for pair in pairs for side in pair], 300, model_type="bpe")
    bpe_model = tfblocks.build_transformer(
        tfblocks.hparams("transformer_tiny", vocab_size=bpe.vocabulary_size)
    )
    cases = [
        (Translator(bpe_model, bpe, bpe, MAX_LENGTH), {}, "a bpe SentencePiece model"),
        (Translator(short, tokenizer, tokenizer, MAX_LENGTH), {}, "exceeds the 8 positions"),
        (Translator(ensemble, tokenizer, tokenizer, MAX_LENGTH), {}, "Ensemble"),
        (Translator(translator.model, tokenizer, tokenizer, MAX_LENGTH, search=Sampling()),
         {}, "greedy or beam search"),
        (translator, {"quantization": "int4"}, "`quantization` must be one of"),
        (translator, {"beam_size": 0}, "beam_size"),
    ]  # fmt: skip
    for refused, kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            refused.export_litert(path, **kwargs)
    assert os.listdir(tmp_path) == []
