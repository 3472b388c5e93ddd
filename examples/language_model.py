"""A GPT-style language model: the study notes' next-token prediction with a tied softmax.

Trains a decoder-only `tfblocks.Transformer` (`build_language_model`, t2t's
`has_input=False`: causal blocks, no encoder, no cross-attention) on the English side
of the embedded phrasebook. Each position predicts the next token from the ones before
it, through the dot product of the last hidden state with every embedding (tied
softmax). It prints the held-out perplexity, continues a few prompts with greedy search
and with nucleus sampling (`tfblocks.Generator`), exports the generator as a SavedModel
(prompt text in, continuation out) to `--output`/export/1, reloads it and continues the
prompts again.

Run:  python examples/language_model.py [--epochs 4] [--phrasebook-size 6000]
      [--hparams transformer_tiny] [--output runs/language_model] [--verbose]
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the reload)

from tfblocks import text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phrasebook-size", type=int, default=6000, help="pairs generated")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=800)
    parser.add_argument("--max-length", type=int, default=24, help="tokens per sentence")
    parser.add_argument("--hparams", default="transformer_tiny", help="preset name")
    parser.add_argument("--warmup-steps", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=3, help="held-out prompts shown")
    parser.add_argument("--output", default="runs/language_model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="TensorFlow's own log lines")
    return parser.parse_args(argv)


def encode(tokenizer, sentences, max_length):
    """Padded `[N, max_length]` ids (EOS-terminated); longer sentences are dropped."""
    ids = tokenizer.tokenize(tf.constant(sentences))  # ragged, ends with EOS
    keep = (ids.row_lengths() <= max_length).numpy()
    return ids.to_tensor(shape=[None, max_length]).numpy()[keep]


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    splits = text.load_phrasebook(seed=args.seed, size=args.phrasebook_size)
    english = {name: [en for _, en in pairs] for name, pairs in splits.items()}
    tokenizer = text.train_tokenizer(english["train"], args.vocab_size, model_type="bpe")
    train = encode(tokenizer, english["train"], args.max_length)
    test = encode(tokenizer, english["test"], args.max_length)
    print(f"{len(train)} training and {len(test)} held-out sentences, "
          f"vocabulary {tokenizer.vocabulary_size}")  # fmt: skip

    hp = tfblocks.hparams(args.hparams, vocab_size=tokenizer.vocabulary_size, num_encoder_layers=0)
    model = tfblocks.build_language_model(hp)
    schedule = tfblocks.RsqrtDecay(hp.hidden_size, args.warmup_steps, hp.learning_rate_constant)
    tfblocks.compile_transformer(model, hp, learning_rate=schedule)
    print(f"{args.hparams} language model: {model.count_params():,} parameters")
    model.fit(train, train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    held_out = model.evaluate(test, test, batch_size=args.batch_size, verbose=0, return_dict=True)
    print(f"held-out perplexity: {held_out['perplexity']:.3f} "
          f"(next-token accuracy {held_out['accuracy']:.4f})")  # fmt: skip

    sentences = english["test"][: args.prompts]
    prompts = [" ".join(s.split()[:2]) for s in sentences]
    greedy = tfblocks.Generator(model, tokenizer, max_length=args.max_length)
    nucleus = tfblocks.Generator(
        model,
        tokenizer,
        max_length=args.max_length,
        search=tfblocks.Sampling(top_p=0.9, seed=args.seed),
    )
    continued = [t.decode() for t in greedy(prompts).numpy()]
    sampled = [t.decode() for t in nucleus(prompts).numpy()]
    for prompt, sentence, g, s in zip(prompts, sentences, continued, sampled, strict=True):
        print(f"prompt {prompt!r}\n  greedy:  {prompt} {g}\n  top-p:   {prompt} {s}\n"
              f"  held-out sentence: {sentence}")  # fmt: skip

    path = greedy.export(os.path.join(args.output, "export", "1"))
    reloaded = tf.saved_model.load(path).signatures["serving_default"]
    again = [t.decode() for t in reloaded(text=tf.constant(prompts))["continuation"].numpy()]
    print(f"exported to {path}; reloaded continuations equal: {again == continued}")
    if again != continued:
        raise SystemExit("the reloaded SavedModel continues the prompts differently")
    return held_out["perplexity"]


if __name__ == "__main__":
    main()
