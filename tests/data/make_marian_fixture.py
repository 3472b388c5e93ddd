"""Regenerates the Marian / OPUS-MT test fixture: tiny random Hugging Face `MarianMTModel`s
and what transformers computes with them.

The only file of the project that imports torch and transformers; run it with a separate
environment (tfblocks and its tests never need them):

    python3 -m venv /tmp/fixture-venv
    /tmp/fixture-venv/bin/pip install torch transformers sentencepiece safetensors numpy
    /tmp/fixture-venv/bin/python tests/data/make_marian_fixture.py

It writes, for each model NAME below, `tests/data/marian/NAME/` as an OPUS-MT folder
(`config.json`, `generation_config.json`, `model.safetensors`, `source.spm`, `target.spm`,
`vocab.json`, `tokenizer_config.json`, ...) and `tests/data/marian/NAME.npz` with what
transformers computed (Marian ids, 0-padded rows are padded with Marian's pad id):

    source_ids, target_ids    `MarianTokenizer` ids of SOURCES / TARGETS (EOS-terminated)
    logits                    float32 `[B, T, V]`, teacher-forced on target_ids
    greedy                    greedy `generate` ids (without the decoder start)
    beam, beam_scores         beam 4, all 4 hypotheses per source, and their
                              `sequences_scores` (HF: sum of log-probs / length ** lp)
    beam_log_probs            each hypothesis' summed log-probabilities over the whole
                              vocabulary (what HF's score divides)
    beam_log_probs_no_pad     the same with the pad id left out of every softmax
    beam_forced               True where a hypothesis reached max_new_tokens (HF then forces
                              EOS and adds 0 for it, so its score is not beam_log_probs')
    length_penalty, max_new_tokens

Every weight is random, LayerNorm gains and biases and `final_logits_bias` included (and
the pad row of the embedding), so that a weight read into the wrong place changes the
numbers. The SentencePiece models are trained here on the made-up sentences below.
"""

import json
import os
import shutil
import tempfile

import numpy as np
import sentencepiece
import torch
from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "marian")

SOURCE_LINES = [
    "the cat sits on the mat.",
    "the dog sleeps in the garden.",
    "today's lunch is curry.",
    "a small frog asked the teacher for advice.",
    "we walk to the station every morning.",
    "the train is late again.",
    "she reads a book about the sea.",
    "my brother cooks rice and fish.",
    "the children play near the river.",
    "it rains in the mountains.",
]
TARGET_LINES = [
    "die katze sitzt auf der matte.",
    "der hund schläft im garten.",
    "das mittagessen heute ist curry.",
    "ein kleiner frosch bat den lehrer um rat.",
    "wir gehen jeden morgen zum bahnhof.",
    "der zug ist wieder spät.",
    "sie liest ein buch über das meer.",
    "mein bruder kocht reis und fisch.",
    "die kinder spielen am fluss.",
    "es regnet in den bergen.",
]
# What the fixture's numbers are computed on (not all seen by the SentencePiece training).
SOURCES = ["the cat sits on the mat.", "a frog reads the book, quietly!", "rain"]
TARGETS = ["die katze sitzt auf der matte.", "ein frosch liest.", "regen im garten"]
TAGS = [">>fra<<", ">>deu<<"]
WEIGHT_SCALE = 1.0
MAX_NEW_TOKENS = 16
SEED = 0
EOS_BOOST = 2.0

MODELS = {
    # A shared vocabulary (one vocab.json, tied embeddings), as most OPUS-MT models.
    "shared": {"d_model": 16, "heads": 2, "ffn": 32, "layers": (2, 2), "tags": False},
    # A multilingual model: `>>xx<<` target-language tags in the vocabulary.
    "multilingual": {"d_model": 24, "heads": 3, "ffn": 40, "layers": (2, 1), "tags": True},
}


def train_spm(lines, path, vocab_size, user_defined=()):
    """A tiny unigram SentencePiece model with Marian's special ids (unk 0, <s> 1, </s> 2)."""
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=path,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        normalization_rule_name="identity",  # keeps the file small (no NFKC table)
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
        user_defined_symbols=list(user_defined),
    )
    os.replace(path + ".model", path)
    os.remove(path + ".vocab")


def make_vocab(folder, tags):
    """vocab.json as OPUS-MT's: </s> 0, <unk> 1, the tags, both sides' pieces, <pad> last."""
    pieces = ["</s>", "<unk>", *(TAGS if tags else [])]
    for name in ("source.spm", "target.spm"):
        processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(folder, name))
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if not processor.is_control(i) and not processor.is_unknown(i) and piece not in pieces:
                pieces.append(piece)
    pieces.append("<pad>")
    vocab = {piece: i for i, piece in enumerate(pieces)}
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=1)
    return vocab


def randomize(model, generator, eos_boost):
    """Every parameter and `final_logits_bias` random: LayerNorm gains around 1, kernels
    scaled by their fan-in, biases and LayerNorm offsets small but not zero."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "layer_norm" in name:
                parameter.copy_(1.0 + 0.3 * noise if name.endswith("weight") else 0.2 * noise)
            elif name.endswith("bias"):
                parameter.copy_(0.2 * noise)
            elif parameter.ndim == 2 and "embed" not in name:  # [out, in]
                parameter.copy_(WEIGHT_SCALE * noise / parameter.shape[1] ** 0.5)
            else:  # the embedding, its pad row too
                parameter.copy_(noise)
        bias = model.final_logits_bias
        bias.copy_(0.5 * torch.randn(bias.shape, generator=generator))
        bias[0, model.config.eos_token_id] += eos_boost


def build(name, spec, seed):
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    train_spm(SOURCE_LINES, os.path.join(folder, "source.spm"), 48)
    train_spm(TARGET_LINES, os.path.join(folder, "target.spm"), 48)
    vocab = make_vocab(folder, spec["tags"])
    size = len(vocab)
    pad, eos = vocab["<pad>"], vocab["</s>"]
    config = MarianConfig(
        vocab_size=size,
        decoder_vocab_size=size,
        d_model=spec["d_model"],
        encoder_layers=spec["layers"][0],
        decoder_layers=spec["layers"][1],
        encoder_attention_heads=spec["heads"],
        decoder_attention_heads=spec["heads"],
        encoder_ffn_dim=spec["ffn"],
        decoder_ffn_dim=spec["ffn"],
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=pad,
        eos_token_id=eos,
        decoder_start_token_id=pad,
        forced_eos_token_id=eos,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    model.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=eos,
        decoder_start_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=eos,
        pad_token_id=pad,
        max_length=64,
        num_beams=4,
    )
    tokenizer = MarianTokenizer(
        os.path.join(folder, "source.spm"),
        os.path.join(folder, "target.spm"),
        os.path.join(folder, "vocab.json"),
    )
    # A random model seldom ends a sentence: EOS's logit bias is raised a little.
    randomize(model, torch.Generator().manual_seed(seed), EOS_BOOST)
    model.save_pretrained(folder)
    # What the files hold, as a user loads them (tied weights as saved, not as in memory).
    model = MarianMTModel.from_pretrained(folder).eval()
    with tempfile.TemporaryDirectory() as scratch:  # the tokenizer's own files
        tokenizer.save_pretrained(scratch)
        for file in ("tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(os.path.join(scratch, file)):
                shutil.copy(os.path.join(scratch, file), folder)
    return folder, model, tokenizer


def sources(spec):
    return [(f"{TAGS[i % 2]} " if spec["tags"] else "") + s for i, s in enumerate(SOURCES)]


def record(name, model, tokenizer, spec):
    pad = model.config.pad_token_id
    batch = tokenizer(sources(spec), text_target=TARGETS, return_tensors="pt", padding=True)
    labels = batch.pop("labels")
    with torch.no_grad():
        logits = model(**batch, labels=labels).logits  # [B, T, V]
    max_new_tokens, length_penalty = MAX_NEW_TOKENS, 0.6
    options = {"max_new_tokens": max_new_tokens, "do_sample": False}
    with torch.no_grad():
        greedy = model.generate(**batch, num_beams=1, **options)
        beam = model.generate(
            **batch,
            num_beams=4,
            num_return_sequences=4,
            length_penalty=length_penalty,
            early_stopping=True,
            output_scores=True,
            return_dict_in_generate=True,
            **options,
        )
    transitions = model.compute_transition_scores(
        beam.sequences, beam.scores, beam.beam_indices, normalize_logits=False
    )  # [N, T]: log-probs as HF's search added them (0 for its forced EOS at the limit)
    sequences = beam.sequences[:, 1:]  # without the decoder start
    source_rows = batch["input_ids"].repeat_interleave(4, dim=0)
    source_mask = batch["attention_mask"].repeat_interleave(4, dim=0)
    decoder_input = beam.sequences[:, :-1]
    with torch.no_grad():
        step_logits = model(
            input_ids=source_rows, attention_mask=source_mask, decoder_input_ids=decoder_input
        ).logits.double()  # [N, T, V]
    real = sequences != pad  # the generated tokens, EOS included
    full = torch.log_softmax(step_logits, -1).gather(-1, sequences[..., None])[..., 0]
    without = step_logits.clone()
    without[..., pad] = -float("inf")
    no_pad = torch.log_softmax(without, -1).gather(-1, sequences[..., None])[..., 0]
    full = torch.where(real, full, 0.0).sum(1)
    no_pad = torch.where(real, no_pad, 0.0).sum(1)  # (-inf at padding otherwise)
    lengths = real.sum(1).double()
    # HF's score is the summed log-probability over (generated tokens) ** length_penalty;
    # a hypothesis that reached `max_new_tokens` got EOS forced (log-probability 0 added).
    forced = real.sum(1) == max_new_tokens
    expected = transitions.double().sum(1) / lengths**length_penalty
    assert torch.allclose(expected.float(), beam.sequences_scores, atol=1e-4)
    assert torch.allclose(full[~forced].float(), transitions.sum(1)[~forced], atol=1e-4)
    np.savez_compressed(
        os.path.join(OUT, f"{name}.npz"),
        sources=np.array(sources(spec)),
        targets=np.array(TARGETS),
        source_ids=batch["input_ids"].numpy().astype(np.int32),
        target_ids=labels.numpy().astype(np.int32),
        logits=logits.numpy().astype(np.float32),
        greedy=greedy[:, 1:].numpy().astype(np.int32),
        beam=sequences.numpy().astype(np.int32),
        beam_scores=beam.sequences_scores.numpy().astype(np.float32),
        beam_log_probs=full.numpy(),
        beam_log_probs_no_pad=no_pad.numpy(),
        beam_forced=forced.numpy(),
        length_penalty=np.float32(length_penalty),
        max_new_tokens=np.int32(max_new_tokens),
    )


def main():
    os.makedirs(OUT, exist_ok=True)
    for seed, (name, spec) in enumerate(MODELS.items(), start=SEED):
        folder, model, tokenizer = build(name, spec, seed)
        record(name, model, tokenizer, spec)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        print(f"{folder}: {size} bytes, vocab {model.config.vocab_size}")
        data = np.load(os.path.join(OUT, f"{name}.npz"))
        print("greedy", data["greedy"].tolist(), "\nbeam", data["beam"].tolist())


if __name__ == "__main__":
    main()
