"""Beam-search work per sentence: how many sentence-steps a batch of translations costs.

A beam-search step computes `beam_size` rows for every sentence still in the batch, so
the work of translating a corpus is about the sum over steps of the sentences computed
(`sentence-steps`). This script counts it for the raw-Japanese small_parallel_enja test
sentences (`--data`) translated by a trained model (`--preset`, e.g. the `model/` folder
of a `benchmarks/enja.sh` run) three ways:

- `dropping`: `Translator` as exported by default (`drop_finished=True`): a sentence
  whose search has ended leaves the batch, which shrinks through 32, 16, 8, 4;
- `whole batch`: `drop_finished=False`: every sentence is computed until the batch's
  last one ends;
- `alone`: batch 1, each sentence searched by itself, so each stops at its own step —
  the floor that no batching can beat with t2t's stopping rule.

All three give the same translations; the counts come from a counter wrapped around
the search's step (`tfblocks.decoding.beam_search._Beam.step`, called once per loop
iteration), so they run without XLA (the count does not depend on it). `--quick` is a
smoke test: an untrained tiny model on 8 phrasebook sentences.

    python benchmarks/beam_steps.py --preset /tmp/enja/model

Figures: benchmarks/README.md.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "small_parallel_enja")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: untrained tiny model, 8 sentences")  # fmt: skip
    parser.add_argument("--preset", help="the trained model (a tfblocks preset folder)")
    parser.add_argument("--data", default=DATA, help="the small_parallel_enja directory")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=64)
    args = parser.parse_args(argv)
    if not args.quick and not args.preset:
        parser.error("--preset DIR is required (or --quick)")
    if args.quick:
        args.sentences, args.batch_size, args.max_length = 8, 4, 12
    return args


def load(args):
    """`(model, tokenizer, sources)`."""
    import tfblocks
    from tfblocks.text import load_phrasebook, read_sentences, train_tokenizer

    if args.quick:
        book = load_phrasebook()
        sources = [source for source, _ in book["test"][: args.sentences]]
        tokenizer = train_tokenizer([t for pair in book["train"][:500] for t in pair], 200)
        hp = tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
        return tfblocks.build_transformer(hp), tokenizer, sources
    path = os.path.join(args.data, "test.ja")
    if not os.path.isfile(path):
        sys.exit(f"beam_steps.py: {path} not found (--data, or --quick)")
    # Joined as training joined the corpus (test.ja is pre-tokenized Japanese).
    sources = [s for s in read_sentences(path) if s][: args.sentences]
    model, tokenizer, _ = tfblocks.load_preset(args.preset)
    return model, tokenizer, sources


def count_steps():
    """Wraps the beam step with a counter; returns the list it appends batch sizes to."""
    import tensorflow as tf

    from tfblocks.decoding import beam_search as decoding

    sizes = []
    step = decoding._Beam.step

    def record(batch):
        sizes.append(int(batch))
        return 0

    def counted(self, loop, context):
        out = step(self, loop, context)
        zero = tf.py_function(record, [tf.shape(loop.alive_seq)[0]], tf.int32)
        zero.set_shape([])
        return out._replace(index=out.index + zero)  # keeps the counter in the graph

    decoding._Beam.step = counted
    return sizes


def main(argv=None):
    args = parse_args(argv)
    import numpy as np

    import tfblocks
    from tfblocks.translation.console import beam_or_greedy

    model, tokenizer, sources = load(args)
    sizes = count_steps()
    modes = (
        ("dropping", True, args.batch_size),
        ("whole batch", False, args.batch_size),
        ("alone", False, 1),
    )
    rows = {}
    for name, drop, batch in modes:
        translator = tfblocks.Translator(
            model, tokenizer, tokenizer, max_length=args.max_length,
            search=beam_or_greedy(args.beam_size),
            jit_compile=False, drop_finished=drop,
        )  # fmt: skip
        sizes.clear()
        outputs, loops = [], 0
        for start in range(0, len(sources), batch):
            before = len(sizes)
            outputs += [t.decode() for t in translator(sources[start : start + batch]).numpy()]
            loops += len(sizes) - before
        rows[name] = (batch, sum(sizes), loops, outputs)
    floor = rows["alone"][1]
    same = all(rows[name][3] == rows["alone"][3] for name in rows)
    lengths = tokenizer.tokenize(rows["alone"][3]).row_lengths().numpy() - 1  # no EOS
    print(
        f"{len(sources)} sentences, beam {args.beam_size}, max_length {args.max_length}, "
        f"mean output {np.mean(lengths):.2f} subwords; same translations in every mode: {same}"
    )
    print(f"{'mode':<12} {'batch':>5} {'sentence-steps':>15} {'per sentence':>13} "
          f"{'loop steps':>10} {'vs alone':>9}")  # fmt: skip
    for name, (batch, steps, loops, _) in rows.items():
        print(f"{name:<12} {batch:>5} {steps:>15} {steps / len(sources):>13.2f} "
              f"{loops:>10} {steps / floor:>8.3f}×")  # fmt: skip


if __name__ == "__main__":
    main()
