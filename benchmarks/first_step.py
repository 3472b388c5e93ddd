"""A beam search's first step once per sentence against once per beam row, alternated.

Before its first step, each of a sentence's `beam` rows holds the same ids and state, so
beam search over a batch (`drop_finished`, the default) computes that step on one row per
sentence and repeats the result (`_Beam.first_step`). This script builds two in-memory
`Translator`s of one model (`--preset`, e.g. `benchmarks/enja.sh`'s `model/` folder),
one traced with that step and one with the step of all `beam · B` rows (the previous
code path), checks that they translate alike, then times passes over the
small_parallel_enja test sentences (`--data`; beam 4, batch 32, `stop_early`) in
alternated rounds and prints the median of the per-round ratios (> 1: once per sentence
is faster). `--quick`: an untrained tiny model on 64 phrasebook sentences.

Run:  python benchmarks/first_step.py --preset /tmp/enja/model --rounds 5
      python benchmarks/first_step.py --quick
"""

import argparse
import os
import statistics
import sys
import time

from train_throughput import load

import tfblocks
from tfblocks.decoding import steps
from tfblocks.text import load_phrasebook, read_parallel, train_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "small_parallel_enja")


def translators(model, tokenizer, max_length, sources):
    """`{label: Translator}`: first step once per sentence ("per sentence") or per row."""
    shared = steps._Beam.first_step
    made = {}
    for label in ("per sentence", "per row"):
        if label == "per row":
            steps._Beam.first_step = lambda self, loop, context, end: loop
        try:
            strategy = tfblocks.decoding.beam_or_greedy(4, stop_early=True)
            made[label] = tfblocks.Translator(
                model, tokenizer, tokenizer, max_length=max_length, strategy=strategy
            )
            made[label]([sources[0], sources[1]])  # traces the search with the setting in force
        finally:
            steps._Beam.first_step = shared
    return made


def run_pass(translator, sources, batch=32):
    start = time.perf_counter()
    outputs = []
    for i in range(0, len(sources), batch):
        outputs.extend(t.decode("utf-8") for t in translator(sources[i : i + batch]).numpy())
    return time.perf_counter() - start, outputs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="a preset folder (required unless --quick)")
    parser.add_argument("--data", default=DATA, help="small_parallel_enja (test.ja)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="smoke run: untrained tiny model")
    args = parser.parse_args(argv)
    print(f"start {load()}")
    if args.quick:
        sources = [ja for ja, _ in load_phrasebook()["test"][:64]]
        tokenizer = train_tokenizer(sources * 4, vocab_size=200)
        hp = tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size)
        model, args.rounds, args.max_length = tfblocks.build_transformer(hp), 1, 8
    elif not args.preset:
        sys.exit("first_step.py: --preset DIR (or --quick)")
    else:
        model, tokenizer, _ = tfblocks.load_preset(args.preset)
        path = os.path.join(args.data, "test.ja")
        sources = [ja for ja, _ in read_parallel(path, os.path.join(args.data, "test.en"))][:500]
    made = translators(model, tokenizer, args.max_length, sources)
    outputs = {label: run_pass(t, sources)[1] for label, t in made.items()}  # compiles
    same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
    print(f"{len(sources)} sentences, beam 4, batch 32: {same} translated alike")
    seconds = {label: [] for label in made}
    for _ in range(args.rounds):
        for label, translator in made.items():
            seconds[label].append(run_pass(translator, sources)[0])
    ratios = [r / s for r, s in zip(seconds["per row"], seconds["per sentence"], strict=True)]
    for label, values in seconds.items():
        print(f"first step {label:<13} {statistics.median(values):.3f} s a pass")
    print(
        f"per row / per sentence: {statistics.median(ratios):.3f}× (range "
        f"{min(ratios):.3f}–{max(ratios):.3f}, {args.rounds} rounds)"
    )
    print(f"end {load()}")


if __name__ == "__main__":
    main()
