"""Regenerates the M2M-100 / NLLB-200 test fixture: tiny random Hugging Face
`M2M100ForConditionalGeneration`s and what transformers computes with them.

Like the other `make_*_fixture.py` scripts, it imports torch and transformers; run it with a
separate environment (tfblocks and its tests never need them):

    python3 -m venv /tmp/fixture-venv
    /tmp/fixture-venv/bin/pip install torch transformers sentencepiece safetensors numpy protobuf
    /tmp/fixture-venv/bin/python tests/data/make_m2m100_fixture.py

(made with transformers 5.25, torch 2.14, sentencepiece 0.2.) It writes, under
`tests/data/m2m100/`:

    m2m100/   an M2M-100 folder: `config.json`, `generation_config.json`, the weights as
              sharded safetensors (`model-0000i-of-0000n.safetensors` and
              `model.safetensors.index.json`), `M2M100Tokenizer`'s `vocab.json`,
              `sentencepiece.bpe.model` and `tokenizer_config.json`. vocab.json lists
              `<s> <pad> </s> <unk>` (0-3) and then the SentencePiece pieces in the order of
              their frequency in the training lines (as fairseq's dict.txt), not in the
              model's own order: ids come from vocab.json, never from the .model file. The
              100 `__xx__` language codes follow the vocabulary (len(vocab.json) + i).
    nllb/     an NLLB-200 folder (the options of facebook/nllb-200-distilled-600M's
              config.json at tiny sizes): `config.json`, `generation_config.json`, only
              `pytorch_model.bin` (a torch.save state dict, as many NLLB folders on the Hub),
              `sentencepiece.bpe.model`, and `tokenizer.json` / `tokenizer_config.json` of
              transformers' (tokenizers-backed) `NllbTokenizer`, non-legacy. Its ids are
              fairseq's: `<s> <pad> </s> <unk>` 0-3, SentencePiece piece i (i >= 3) is i + 1,
              SentencePiece's unknown is 3, then the 202 `xxx_Xxxx` codes, then `<mask>`.

`vocab_size` is, as in the real checkpoints, larger than what the tokenizers know: M2M-100's
has fairseq's 8 "madeupword" rows after the language codes (facebook/m2m100_418M: 128004 +
100 + 8 = 128112), NLLB's 2 rows after `<mask>` (256204 + 2 = 256206). The random models do
generate some of those ids.

and `m2m100.npz`, `nllb.npz` with what transformers computed (rows padded with the pad id):

    sources, targets          the texts (str)
    src_langs, tgt_langs      each row's language codes as the tokenizer takes them (str:
                              `en` / `eng_Latn`)
    source_ids                [src_code] pieces </s>, tokenized with the row's `src_lang`
    target_ids                [tgt_code] pieces </s>, `text_target` with the row's `tgt_lang`
    decoder_input_ids         `shift_tokens_right(target_ids)`: decoder start (</s>) first
    logits                    float32 `[B, T, V]`, teacher-forced on decoder_input_ids
    forced_bos                each row's target language id (`forced_bos_token_id`)
    greedy                    greedy `generate` ids (without the decoder start; the forced
                              language id first)
    beam, beam_scores         beam 2, both hypotheses per source (rows 2b, 2b + 1), and
                              their `sequences_scores` (HF: the summed log-probabilities of
                              the generated tokens, 0 for the forced language id, over
                              (number of generated tokens, language id and EOS included)
                              ** length_penalty)
    early_stopping            the generation config's value the beam search ran with
    length_penalty, max_new_tokens, decoder_start_token_id

`generate` takes one `forced_bos_token_id`, so greedy and beam ran once per target language,
on that language's rows of the padded batch (padding columns kept). Every weight is random,
LayerNorm gains and biases included (and the pad row of the embedding), so that a weight read
into the wrong place changes the numbers; the final decoder LayerNorm's bias is pushed
towards the EOS embedding so that some hypotheses end before max_new_tokens. The
SentencePiece models are trained here on the made-up sentences below.
"""

import collections
import json
import os
import shutil
import tempfile

import numpy as np
import sentencepiece
import torch
from tokenizers.models import BPE
from transformers import (
    GenerationConfig,
    M2M100Config,
    M2M100ForConditionalGeneration,
    M2M100Tokenizer,
    NllbTokenizer,
)
from transformers.convert_slow_tokenizer import SentencePieceExtractor
from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right
from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "m2m100")

LINES = {
    "en": [
        "the cat sits on the mat.",
        "the dog sleeps in the garden.",
        "today it rains.",
        "we eat fish today.",
        "my brother reads a book.",
        "the train is late again.",
        "the children play by the river.",
        "she drinks tea every morning.",
        "the old man walks to the station.",
        "where is the station?",
        "i like the sea.",
        "the mountain is high.",
        "the book is on the table.",
        "we go to school.",
        "the teacher is kind.",
        "the water is cold.",
        "he writes a letter to his mother.",
        "the flowers in the garden are red.",
        "the bird sings in the tree.",
        "it is a small house.",
        "the cat eats fish.",
        "the sun is hot today.",
        "my sister plays in the garden.",
        "the dog drinks water.",
    ],
    "de": [
        "die katze sitzt auf der matte.",
        "der hund schläft im garten.",
        "heute regnet es.",
        "wir essen heute fisch.",
        "mein bruder liest ein buch.",
        "der zug ist wieder spät.",
        "die kinder spielen am fluss.",
        "sie trinkt jeden morgen tee.",
        "der alte mann geht zum bahnhof.",
        "wo ist der bahnhof?",
        "ich mag das meer.",
        "der berg ist hoch.",
        "das buch liegt auf dem tisch.",
        "wir gehen zur schule.",
        "der lehrer ist nett.",
        "das wasser ist kalt.",
        "er schreibt seiner mutter einen brief.",
        "die blumen im garten sind rot.",
        "der vogel singt im baum.",
        "es ist ein kleines haus.",
        "die katze frisst fisch.",
        "die sonne ist heute heiß.",
        "meine schwester spielt im garten.",
        "der hund trinkt wasser.",
    ],
    "ja": [
        "猫がマットの上に座っている。",
        "犬は庭で寝ている。",
        "今日は雨です。",
        "今日は魚を食べます。",
        "兄は本を読んでいる。",
        "電車はまた遅れている。",
        "子どもたちは川で遊んでいる。",
        "彼女は毎朝お茶を飲む。",
        "おじいさんは駅まで歩く。",
        "駅はどこですか？",
        "私は海が好きです。",
        "山は高い。",
        "本は机の上にある。",
        "私たちは学校に行く。",
        "先生はやさしい。",
        "水は冷たい。",
        "彼は母に手紙を書く。",
        "庭の花は赤い。",
        "鳥が木の上で歌っている。",
        "小さい家です。",
        "猫は魚を食べる。",
        "今日は暑い。",
        "姉は庭で遊んでいる。",
        "犬は水を飲む。",
    ],
}
# What the fixture's numbers are computed on: (source language, target language, source,
# target). Row 0 is the longest (the others are padded against it); ☕ is in no training line.
ROWS = [
    ("en", "de", "the old man walks to the station every morning with his dog.", "der hund."),
    ("ja", "en", "猫は庭で寝ている。", "the cat sleeps in the garden."),
    ("en", "de", "rain ☕", "regen"),
    ("de", "ja", "wir trinken tee.", "私たちはお茶を飲む。"),
]
CODES = {
    "m2m100": {"en": "en", "de": "de", "ja": "ja"},
    "nllb": {"en": "eng_Latn", "de": "deu_Latn", "ja": "jpn_Jpan"},
}
MAX_NEW_TOKENS = 10
LENGTH_PENALTY = 1.0
NUM_BEAMS = 2
SHARD_SIZE = "24KB"
EMBED_STD = 0.3
WEIGHT_SCALE = 4.0
EOS_BOOST = 2.5

COMMON = {
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
    "scale_embedding": True,
    "activation_function": "relu",
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "tie_word_embeddings": True,
}
MODELS = {
    # facebook/m2m100_418M's options (its layerdrop too), dropout 0.
    "m2m100": {
        "config": {
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
            "encoder_layerdrop": 0.05,
            "decoder_layerdrop": 0.05,
        },
        "generation": {"num_beams": 2, "early_stopping": True, "max_length": 16},
        "spm_size": 150,
        "extra_rows": 8,  # fairseq's 8 "madeupword"s: 128112 = 128004 + 100 codes + 8
        "seed": 5,
    },
    # facebook/nllb-200-distilled-600M's options.
    "nllb": {
        "config": {
            "dropout": 0.1,
            "attention_dropout": 0.1,
            "activation_dropout": 0.0,
            "encoder_layerdrop": 0.0,
            "decoder_layerdrop": 0.0,
            "tokenizer_class": "NllbTokenizer",
        },
        "generation": {"max_length": 16},
        "spm_size": 160,
        "extra_rows": 2,  # 256206 = 256204 tokens + 2
        "seed": 4,
    },
}


def all_lines():
    return [line for lines in LINES.values() for line in lines]


def train_spm(path, vocab_size):
    """A tiny BPE SentencePiece model (SentencePiece's own ids: <unk> 0, <s> 1, </s> 2)."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(all_lines()),
        model_prefix=path,
        vocab_size=vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        normalization_rule_name="identity",  # keeps the file small (no NFKC table)
        num_threads=1,
        minloglevel=2,
    )
    os.replace(path + ".model", path + ".model.tmp")
    os.remove(path + ".vocab")
    os.replace(path + ".model.tmp", path)
    return sentencepiece.SentencePieceProcessor(model_file=path)


def texts_to_check():
    return all_lines() + [text for _, _, *texts in ROWS for text in texts]


def m2m100_vocab(processor, path):
    """vocab.json as M2M-100's (fairseq's dict.txt): the four specials, then the pieces, most
    frequent in the training lines first (ties in SentencePiece's order)."""
    counts = collections.Counter(
        piece for line in all_lines() for piece in processor.encode(line, out_type=str)
    )
    pieces = [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not processor.is_control(i) and not processor.is_unknown(i)
    ]
    pieces.sort(key=lambda piece: -counts[piece])  # stable: SentencePiece's order on ties
    vocab = {token: i for i, token in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces])}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    return vocab


def m2m100_tokenizer(folder, spec):
    with tempfile.TemporaryDirectory() as scratch:
        spm = os.path.join(scratch, "sentencepiece.bpe.model")
        processor = train_spm(spm, spec["spm_size"])
        vocab = m2m100_vocab(processor, os.path.join(scratch, "vocab.json"))
        tokenizer = M2M100Tokenizer(os.path.join(scratch, "vocab.json"), spm, src_lang="en")
        tokenizer.save_pretrained(folder)
    # The Hub's M2M-100 folders (written by transformers 4) list the language codes in
    # special_tokens_map.json; transformers 5 writes no such file, and no other file of
    # its names them: written here as those folders hold it, the codes in id order.
    codes = sorted(tokenizer.lang_token_to_id, key=tokenizer.lang_token_to_id.get)
    with open(os.path.join(folder, "special_tokens_map.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                   "sep_token": "</s>", "pad_token": "<pad>",
                   "additional_special_tokens": codes}, f, indent=2)  # fmt: skip
    tokenizer = M2M100Tokenizer.from_pretrained(folder)
    for text in texts_to_check():  # the pieces' ids are vocab.json's
        pieces = processor.encode(text, out_type=str)
        expected = [vocab.get(piece, vocab["<unk>"]) for piece in pieces]
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected, text
    return tokenizer


def nllb_tokenizer(folder, spec):
    """`NllbTokenizer` on the fairseq ids of a SentencePiece model trained here."""
    spm = os.path.join(folder, "sentencepiece.bpe.model")
    processor = train_spm(spm, spec["spm_size"])
    extracted = SentencePieceExtractor(spm).extract(BPE)
    pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *pieces, *FAIRSEQ_LANGUAGE_CODES, "<mask>"]
    tokenizer = NllbTokenizer(
        vocab={token: i for i, token in enumerate(tokens)},
        merges=extracted["merges"],
        extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES),
        src_lang="eng_Latn",
        legacy_behaviour=False,
    )
    tokenizer.save_pretrained(folder)
    tokenizer = NllbTokenizer.from_pretrained(folder)
    assert tokenizer.convert_tokens_to_ids(tokens) == list(range(len(tokens)))
    for text in texts_to_check():  # SentencePiece's id i is i + 1, its unknown (0) is 3
        expected = [i + 1 if i else 3 for i in processor.encode(text)]
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == expected, text
    return tokenizer


def tokenizer_size(tokenizer):
    """The ids the tokenizer knows: its vocabulary and the language codes (transformers 5's
    `len(M2M100Tokenizer)` leaves the codes out)."""
    if isinstance(tokenizer, M2M100Tokenizer):
        return tokenizer.encoder_size + len(tokenizer.lang_code_to_id)
    return len(tokenizer)


def randomize(model, generator, eos_boost):
    """Every parameter random: LayerNorm gains around 1, kernels scaled by their fan-in,
    biases and LayerNorm offsets small but not zero, embedding rows (pad's too) normal.
    (The scales make the layers outweigh the embedding, so the model does not repeat its
    last token forever.)"""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "layer_norm" in name:
                parameter.copy_(1.0 + 0.3 * noise if name.endswith("weight") else 0.2 * noise)
            elif name.endswith("bias"):
                parameter.copy_(0.2 * noise)
            elif parameter.ndim == 2 and "embed" not in name and "shared" not in name:
                parameter.copy_(WEIGHT_SCALE * noise / parameter.shape[1] ** 0.5)  # [out, in]
            else:  # the shared embedding (and output projection)
                parameter.copy_(EMBED_STD * noise)
        # A random model seldom ends a sentence: the last LayerNorm's output leans to EOS.
        eos = model.model.shared.weight[model.config.eos_token_id]
        model.model.decoder.layer_norm.bias += eos_boost * eos / eos.norm()


def build(name, spec):
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    make_tokenizer = m2m100_tokenizer if name == "m2m100" else nllb_tokenizer
    tokenizer = make_tokenizer(folder, spec)
    size = tokenizer_size(tokenizer) + spec["extra_rows"]
    config = M2M100Config(vocab_size=size, **COMMON, **spec["config"])
    torch.manual_seed(spec["seed"])
    model = M2M100ForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=0,
        decoder_start_token_id=2,
        eos_token_id=2,
        pad_token_id=1,
        **spec["generation"],
    )
    randomize(model, torch.Generator().manual_seed(spec["seed"]), EOS_BOOST)
    if name == "m2m100":
        model.save_pretrained(folder, max_shard_size=SHARD_SIZE)
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    else:  # transformers 5 writes only safetensors: the state dict as older versions did
        with tempfile.TemporaryDirectory() as scratch:
            model.save_pretrained(scratch)
            for file in ("config.json", "generation_config.json"):
                shutil.copy(os.path.join(scratch, file), folder)
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
    # What the files hold, as a user loads them.
    loaded = M2M100ForConditionalGeneration.from_pretrained(folder).eval()
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    return folder, loaded, tokenizer


def pad_rows(rows, pad):
    width = max(len(row) for row in rows)
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def record(name, model, tokenizer):
    config = model.config
    pad = config.pad_token_id
    codes = CODES[name]
    src_langs = [codes[src] for src, _, _, _ in ROWS]
    tgt_langs = [codes[tgt] for _, tgt, _, _ in ROWS]
    source_rows, target_rows = [], []
    for (_, _, source, target), src_lang, tgt_lang in zip(ROWS, src_langs, tgt_langs, strict=True):
        tokenizer.src_lang, tokenizer.tgt_lang = src_lang, tgt_lang
        encoded = tokenizer(source, text_target=target)
        source_rows.append(encoded["input_ids"])
        target_rows.append(encoded["labels"])
    source_ids, target_ids = pad_rows(source_rows, pad), pad_rows(target_rows, pad)
    mask = (source_ids != pad).long()
    decoder_input_ids = shift_tokens_right(target_ids, pad, config.decoder_start_token_id)
    forced_bos = torch.tensor(
        tokenizer.convert_tokens_to_ids(
            [lang if name == "nllb" else f"__{lang}__" for lang in tgt_langs]
        )
    )
    assert source_ids[:, 0].tolist() == tokenizer.convert_tokens_to_ids(
        [lang if name == "nllb" else f"__{lang}__" for lang in src_langs]
    )
    assert target_ids[:, 0].tolist() == forced_bos.tolist()
    with torch.no_grad():
        logits = model(
            input_ids=source_ids, attention_mask=mask, decoder_input_ids=decoder_input_ids
        ).logits  # [B, T, V]
        same = model(input_ids=source_ids, attention_mask=mask, labels=target_ids).logits
    assert torch.equal(logits, same)

    options = {"max_new_tokens": MAX_NEW_TOKENS, "do_sample": False}
    greedy = [None] * len(ROWS)
    beam = [None] * (NUM_BEAMS * len(ROWS))
    beam_scores = torch.zeros(NUM_BEAMS * len(ROWS))
    for code in sorted(set(forced_bos.tolist())):  # one `generate` per target language
        rows = [i for i, c in enumerate(forced_bos.tolist()) if c == code]
        inputs = {"input_ids": source_ids[rows], "attention_mask": mask[rows]}
        with torch.no_grad():
            out = model.generate(**inputs, num_beams=1, forced_bos_token_id=code, **options)
            searched = model.generate(
                **inputs,
                num_beams=NUM_BEAMS,
                num_return_sequences=NUM_BEAMS,
                length_penalty=LENGTH_PENALTY,
                forced_bos_token_id=code,
                output_scores=True,
                return_dict_in_generate=True,
                **options,
            )
        transitions = model.compute_transition_scores(
            searched.sequences, searched.scores, searched.beam_indices, normalize_logits=False
        )
        generated = searched.sequences[:, 1:]
        lengths = (generated != pad).sum(1).double()
        expected = transitions.double().sum(1) / lengths**LENGTH_PENALTY
        assert torch.allclose(expected.float(), searched.sequences_scores, atol=1e-4)
        for j, i in enumerate(rows):
            greedy[i] = out[j, 1:].tolist()
            for k in range(NUM_BEAMS):
                beam[NUM_BEAMS * i + k] = generated[NUM_BEAMS * j + k].tolist()
                beam_scores[NUM_BEAMS * i + k] = searched.sequences_scores[NUM_BEAMS * j + k]
    greedy, beam = pad_rows(greedy, pad), pad_rows(beam, pad)
    eos = config.eos_token_id
    for row in [*greedy.tolist(), *beam.tolist()]:  # pad only after EOS, never generated
        end = row.index(eos) + 1 if eos in row else len(row)
        assert pad not in row[:end] and set(row[end:]) <= {pad}, row
    np.savez_compressed(
        os.path.join(OUT, f"{name}.npz"),
        sources=np.array([source for _, _, source, _ in ROWS]),
        targets=np.array([target for _, _, _, target in ROWS]),
        src_langs=np.array(src_langs),
        tgt_langs=np.array(tgt_langs),
        source_ids=source_ids.numpy().astype(np.int32),
        target_ids=target_ids.numpy().astype(np.int32),
        decoder_input_ids=decoder_input_ids.numpy().astype(np.int32),
        logits=logits.numpy().astype(np.float32),
        forced_bos=forced_bos.numpy().astype(np.int32),
        greedy=greedy.numpy().astype(np.int32),
        beam=beam.numpy().astype(np.int32),
        beam_scores=beam_scores.numpy().astype(np.float32),
        early_stopping=np.bool_(model.generation_config.early_stopping),
        length_penalty=np.float32(LENGTH_PENALTY),
        max_new_tokens=np.int32(MAX_NEW_TOKENS),
        decoder_start_token_id=np.int32(config.decoder_start_token_id),
    )


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, spec in MODELS.items():
        folder, model, tokenizer = build(name, spec)
        record(name, model, tokenizer)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        print(f"{folder}: {size} bytes, vocab {model.config.vocab_size}, files", os.listdir(folder))
        data = np.load(os.path.join(OUT, f"{name}.npz"))
        for key in ("source_ids", "target_ids", "greedy", "beam", "beam_scores"):
            print(key, data[key].tolist())


if __name__ == "__main__":
    main()
