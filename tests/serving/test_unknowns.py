"""Unknown-word replacement (`tfblocks.serving.unknowns`): a `<unk>` of a translation
becomes its aligned source word, in `replace` (hand-made ids and alignments),
`Translator(...)(texts, replace_unknowns=True)` and `tfblocks-translate --replace-unknowns`.

The end-to-end tests use a tiny untrained model whose logits bias makes every subword
it emits `<unk>`, and one-word sources, so the aligned word is known whatever the
attention.
"""

import numpy as np
import pytest

from tests.cli.test_commands import in_process
from tests.fixtures import tiny_hparams, tiny_model
from tfblocks.cli import translate as translate_cli
from tfblocks.decoding import Ensemble, Greedy
from tfblocks.ids import EOS_ID, PAD_ID, UNK_ID
from tfblocks.models import save_preset
from tfblocks.serving import Translator, unknowns
from tfblocks.text import load_phrasebook, train_tokenizer

MAX_LENGTH = 4
UNKNOWN = "\u2047"  # how SentencePiece writes `<unk>` (" ⁇ ")


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """`(tokenizer, translator, run)`: a phrasebook tokenizer, the greedy `Translator` of
    a tiny model whose logits bias always picks `<unk>`, and a run folder holding it."""
    pairs = load_phrasebook(size=1000)["train"][:200]
    tokenizer = train_tokenizer([side for pair in pairs for side in pair], vocab_size=250)
    hp = tiny_hparams(
        vocab_size=tokenizer.vocabulary_size, max_length=MAX_LENGTH, final_logits_bias=True
    )
    model = tiny_model(hp, seed=0)
    bias = np.zeros([tokenizer.vocabulary_size], np.float32)
    bias[UNK_ID] = 50.0
    model.logits_bias.bias.assign(bias)
    run = tmp_path_factory.mktemp("unk")
    save_preset(model, tokenizer, run / "model", hp)
    # The simplest search to trace (one loop, no XLA): the replacement does not depend on it.
    translator = Translator(
        model, tokenizer, tokenizer, MAX_LENGTH, search=Greedy(), jit_compile=False,
        cache_lengths=None, drop_finished=False,
    )  # fmt: skip
    return tokenizer, translator, run


def _ids(tokenizer, pieces):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    return [UNK_ID if piece == "<unk>" else processor.piece_to_id(piece) for piece in pieces]


def test_replace_puts_the_aligned_source_word_in_place_of_unk(parts):
    tokenizer = parts[0]
    sources = ["I like Zyx curry.", "今日はΩです。"]
    # The source subword aligned to: SentencePiece's `<unk>` for "Z" (then "y", "x": one
    # word) and for "Ω" (written without spaces: that subword's own characters).
    unk = [tokenizer.tokenize([text])[0].numpy().tolist().index(UNK_ID) for text in sources]
    target = [*_ids(tokenizer, ["▁like", "▁", "<unk>", "▁curry"]), EOS_ID, PAD_ID]
    assert UNK_ID not in target[:2] + target[3:]  # only the one `<unk>`
    ids = np.array([[target, target[3:] + [PAD_ID] * 3]] * 2)  # [B 2, K 2, L 6]
    aligned = np.zeros_like(ids)
    aligned[0, :, 2], aligned[1, :, 2] = unk[0] + 1, unk[1]  # "y" of Zyx; Ω itself
    decoded = [["like ⁇ curry", "untouched"]] * 2
    out = unknowns.replace(sources, decoded, ids, aligned, tokenizer, tokenizer)
    assert out == [["like Zyx curry", "untouched"], ["like Ω curry", "untouched"]]


def test_translator_replaces_unknowns_by_the_source_word(parts):
    tokenizer, translator, _ = parts
    texts = ["Zyx", "ｶﾚｰ", ""]
    plain = [t.decode("utf-8") for t in translator(texts).numpy()]
    assert all(text.count(UNKNOWN) == MAX_LENGTH for text in plain[:2]) and plain[2] == ""
    replaced = [t.decode("utf-8") for t in translator(texts, replace_unknowns=True).numpy()]
    # "ｶﾚｰ" is written without spaces: each `<unk>` takes one of its subwords, as written.
    assert replaced[0] == "Zyx" * MAX_LENGTH and replaced[2] == ""
    assert replaced[1] and set(replaced[1]) <= set("ｶﾚｰ")
    with pytest.raises(ValueError, match="Ensemble"):
        Translator(Ensemble([translator.model] * 2), tokenizer, tokenizer, MAX_LENGTH)(
            texts, replace_unknowns=True
        )


def test_translate_command_replaces_unknowns(parts, tmp_path, monkeypatch, capsys):
    run = parts[2]
    source = tmp_path / "in.txt"
    source.write_text("Zyx\n\nQq\n", encoding="utf-8")
    status, out, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, "--input",
                                  source, "--beam-size", "1", "--replace-unknowns")  # fmt: skip
    assert status == 0, err
    assert out.splitlines() == ["Zyx" * MAX_LENGTH, "", "Qq" * MAX_LENGTH]
    # Refused in one line: with an ensemble, and with --score.
    for args, message in (
        (["--model", run], "--replace-unknowns reads one model's cross-attention"),
        (["--score", source], "--score scores given translations: --replace-unknowns"),
    ):
        status, _, err = in_process(translate_cli, monkeypatch, capsys, "--model", run, "--input",
                                    source, "--replace-unknowns", *args)  # fmt: skip
        assert status == 2 and message in err.splitlines()[-1], err
