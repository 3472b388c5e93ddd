"""Input shapes for training on real data: dynamic buckets vs max_length padding vs fixed buckets.

Trains the translation job's model (`build_transformer` + `compile_transformer`, the
`tfblocks.translation.job` hparams overrides) on the same pairs, from the same initial weights, once
per mode of `make_dataset(shapes=...)`:

- `dynamic`: t2t's fine length buckets, each batch padded to its longest pair, no XLA (every new
  batch shape would cost an XLA compilation); the translation job's default;
- `max_length-xla`: every batch `[batch_tokens // max_length, max_length]`, XLA (one shape);
- `buckets-xla`: `fixed_bucket_lengths(max_length)` (8, 16, 24, 32, …), one batch size per
  length, XLA compiling the step once per length;
- `buckets4-xla`: the same with lengths every 4 tokens;
- `packed-xla` / `packed`: several pairs per `max_length` row (t2t packing, segment masks in the
  model), one batch shape, with and without XLA (`--modes` also takes `dynamic-xla`,
  `buckets` and `max_length`);
- `MODE-streamed` (e.g. `dynamic-streamed`): MODE on the same train pairs streamed from their
  files (`load_splits(..., stream_train=True)`, a `StreamedPairs`) instead of a list.

The modes run in rounds, one epoch of each per round, so that a change of machine load (the
CI machine is shared) falls on all of them; the load average is printed after every round.
Per mode: real (non-PAD) target tokens per second of training (`fit` only, XLA compilations
included; the same real tokens in every mode), the same without the first epoch (compilations
are there), padding fraction (PAD positions / all positions, targets and sources, over one
pass of the dataset), batches and distinct batch shapes per epoch, XLA compilations of the
train step (= distinct batch shapes when XLA is on; checked against the steps slower than 4×
the median step), dev loss and token accuracy after each epoch (the same dev batches for every
mode), and dev BLEU of greedy decoding on `--bleu-sentences` dev sentences at the end.

`--dtype-policy` sets the training precision of every mode (default float32; `auto` is the
translation job's default: mixed_bfloat16 without XLA on a CPU with bfloat16 instructions).

Run:  python benchmarks/input_shapes.py                     # small_parallel_enja, 20,000 pairs
      python benchmarks/input_shapes.py --modes dynamic --dtype-policy auto
      python benchmarks/input_shapes.py --limit-train 50000 --epochs 3
      python benchmarks/input_shapes.py --modes dynamic,dynamic-streamed   # streamed vs list
      python benchmarks/input_shapes.py --quick             # phrasebook, tiny model, smoke run

Figures: benchmarks/README.md.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from tfblocks import Translator, build_transformer, compile_transformer, hparams
from tfblocks.decoding import Greedy
from tfblocks.models.hyperparameters import parse_overrides
from tfblocks.text import load_splits, make_dataset, train_tokenizers
from tfblocks.text.batching import fixed_bucket_lengths
from tfblocks.training.precision import POLICIES, resolve_dtype_policy
from tfblocks.training.weights import float32_twin
from tfblocks.translation.evaluation import score
from tfblocks.translation.options import DEMO_OVERRIDES

# name -> (make_dataset shapes, XLA, bucket step of fixed_bucket_lengths)
MODES = {
    "dynamic": ("dynamic", False, None),
    "dynamic-xla": ("dynamic", True, None),
    "max_length": ("max_length", False, None),
    "max_length-xla": ("max_length", True, None),
    "buckets": ("buckets", False, 8),
    "buckets-xla": ("buckets", True, 8),
    "buckets4-xla": ("buckets", True, 4),
    "packed": ("packed", False, None),
    "packed-xla": ("packed", True, None),
}
# `MODE-streamed`: MODE on the same train pairs as a `StreamedPairs`, read from the files.
MODES.update({f"{name}-streamed": mode for name, mode in list(MODES.items())})
DEFAULT_CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
DEFAULT_CORPUS = os.path.normpath(os.path.join(DEFAULT_CORPUS, "small_parallel_enja"))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-dir", default=DEFAULT_CORPUS)
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--hparams-override", default=DEMO_OVERRIDES)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tokenizer-model", default="unigram", choices=["bpe", "unigram"])
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--limit-train", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--modes", default="dynamic,max_length-xla,buckets-xla,buckets4-xla")
    parser.add_argument("--bleu-sentences", type=int, default=200, help="0: no BLEU")
    parser.add_argument("--limit-dev", type=int, default=None, help="use only N dev pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype-policy", default="float32", choices=POLICIES,
        help="training dtype policy of every mode (auto: what the translation job picks for "
        "the mode's XLA setting)",
    )  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: phrasebook (64 train, 16 dev pairs), d 32, 1+1 layers, 1 epoch, "
        "modes dynamic and buckets (no XLA), BLEU on 4 sentences of the last mode only",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.corpus_dir, args.hparams, args.vocab_size = None, "transformer_tiny", 300
        args.hparams_override = DEMO_OVERRIDES + (
            ",hidden_size=32,filter_size=64,num_encoder_layers=1,num_decoder_layers=1,max_length=16"
        )
        args.batch_tokens, args.limit_train, args.epochs, args.bleu_sentences = 256, 64, 1, 4
        args.limit_dev = 16
        args.modes = "dynamic,buckets"  # no XLA: its compilations alone take a minute here
    args.modes = args.modes.split(",")
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"--modes: unknown mode {mode!r}; choose from {', '.join(MODES)}")
    return args


class StepTimes(keras.callbacks.Callback):
    """Wall time of every training step."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.seconds.append(time.perf_counter() - self.start)


def dataset_for(mode, pairs, tokenizer, hp, batch_tokens, shuffle, seed, streamed=None):
    shapes, _, step = MODES[mode]
    pairs = streamed if mode.endswith("-streamed") else pairs
    lengths = fixed_bucket_lengths(hp.max_length, step=step) if step else None
    return make_dataset(
        pairs, tokenizer, tokenizer, batch_tokens=batch_tokens, max_length=hp.max_length,
        shuffle=shuffle, seed=seed, shapes=shapes, bucket_lengths=lengths,
    )  # fmt: skip


def padding_stats(dataset):
    """Real target tokens, PAD fractions (targets, sources), batches and shapes of one pass."""
    real = target_cells = source_real = source_cells = batches = 0
    shapes = set()
    for features, labels in dataset:
        ids, source = labels.numpy(), features["inputs"].numpy()
        real, target_cells = real + int((ids != 0).sum()), target_cells + ids.size
        source_real, source_cells = (
            source_real + int((source != 0).sum()),
            source_cells + source.size,
        )
        shapes.add((ids.shape, source.shape))
        batches += 1
    return {
        "real_tokens": real,
        "pad_targets": 1 - real / target_cells,
        "pad_sources": 1 - source_real / source_cells,
        "batches": batches,
        "shapes": len(shapes),
    }


def dev_bleu(model, tokenizer, hp, pairs):
    if model.compute_dtype != "float32":  # translate in float32, as the translation job
        model = float32_twin(hp, model)
    translator = Translator(model, tokenizer, tokenizer, hp.max_length, search=Greedy())
    hypotheses = [h.decode("utf-8") for h in translator([s for s, _ in pairs]).numpy()]
    return score(hypotheses, [t for _, t in pairs])["bleu"]


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main(argv=None):
    args = parse_args(argv)
    splits = load_splits(args.corpus_dir, seed=args.seed)
    train = splits["train"][: args.limit_train]
    streamed = None
    if any(mode.endswith("-streamed") for mode in args.modes):
        streamed = load_splits(args.corpus_dir, seed=args.seed, stream_train=True)["train"]
        streamed = streamed.limited(args.limit_train)
    splits["dev"] = splits["dev"][: args.limit_dev]
    tokenizer, _ = train_tokenizers(train, args.vocab_size, args.tokenizer_model)
    hp = hparams(
        args.hparams, vocab_size=tokenizer.vocabulary_size, **parse_overrides(args.hparams_override)
    )
    print(
        f"{args.corpus_dir or 'phrasebook'}: {len(train)} train pairs, {len(splits['dev'])} dev; "
        f"{args.hparams} ({args.hparams_override}), vocab {tokenizer.vocabulary_size} "
        f"({args.tokenizer_model}), batch_tokens {args.batch_tokens}, max_length {hp.max_length}, "
        f"{args.epochs} epochs; load {loadavg()}"
    )
    # One dev dataset for every mode (the metrics do not depend on padding).
    dev = make_dataset(
        splits["dev"], tokenizer, tokenizer, batch_tokens=args.batch_tokens,
        max_length=hp.max_length, shuffle=False, shapes="buckets",
    )  # fmt: skip
    runs = {}
    for mode in args.modes:
        shapes, xla, _ = MODES[mode]
        data = dataset_for(mode, train, tokenizer, hp, args.batch_tokens, True, args.seed, streamed)
        keras.utils.set_random_seed(args.seed)  # the same initial weights in every mode
        policy = resolve_dtype_policy(args.dtype_policy, xla)
        model = compile_transformer(build_transformer(hp, dtype=policy), hp, jit_compile=xla)
        model.jit_compile = False  # dev evaluation without XLA: no compilation per dev shape
        model.make_test_function()
        model.jit_compile = xla
        stats = padding_stats(data)
        runs[mode] = {"model": model, "data": data, "stats": stats, "xla": xla, "seconds": []}
        runs[mode].update(steps=StepTimes(), dev=[])
        print(
            f"{mode:>15}: shapes={shapes!r}, XLA {'on' if xla else 'off'}, {policy}, "
            f"{stats['batches']} batches/epoch, {stats['shapes']} batch shapes, PAD "
            f"{stats['pad_targets']:.1%} of target / {stats['pad_sources']:.1%} of source positions"
        )
    for epoch in range(args.epochs):
        for mode, run in runs.items():
            start = time.perf_counter()
            run["model"].fit(
                run["data"], initial_epoch=epoch, epochs=epoch + 1, callbacks=[run["steps"]],
                shuffle=False, verbose=0,
            )  # fmt: skip
            run["seconds"].append(time.perf_counter() - start)
            steps = run["steps"].seconds[-run["stats"]["batches"] :]  # this epoch's steps
            slow = sum(1 for s in steps if s > 4 * statistics.median(steps))
            result = run["model"].evaluate(dev, verbose=0, return_dict=True)
            run["dev"].append((result["loss"], result["accuracy"]))
            print(
                f"epoch {epoch + 1} {mode:>15}: {run['seconds'][-1]:7.1f} s, "
                f"{run['stats']['real_tokens'] / run['seconds'][-1]:7.0f} real target tokens/s, "
                f"dev loss {result['loss']:.4f} accuracy {result['accuracy']:.4f}; median step "
                f"{statistics.median(steps):.3f} s, {slow} steps > 4× it (compilations)"
            )
        print(f"load after round {epoch + 1}: {loadavg()}")

    print(
        f"\n{'mode':>15} {'train s':>8} {'tok/s':>7} {'ratio':>6} {'tok/s>1':>8} {'PAD tgt':>8} "
        f"{'PAD src':>8} {'shapes':>6} {'XLA comp':>8} {'slow':>5} {'dev acc':>8} {'dev loss':>8}"
    )
    base = None
    for mode, run in runs.items():
        real, seconds = run["stats"]["real_tokens"], run["seconds"]
        speed = real * len(seconds) / sum(seconds)
        later = real * (len(seconds) - 1) / sum(seconds[1:]) if len(seconds) > 1 else float("nan")
        base = base or speed
        steps = run["steps"].seconds
        slow = sum(1 for s in steps if s > 4 * statistics.median(steps))
        loss, accuracy = run["dev"][-1]
        line = (
            f"{mode:>15} {sum(seconds):8.1f} {speed:7.0f} {speed / base:5.2f}× {later:8.0f} "
            f"{run['stats']['pad_targets']:8.1%} {run['stats']['pad_sources']:8.1%} "
            f"{run['stats']['shapes']:6d} {run['stats']['shapes'] if run['xla'] else 0:8d} "
            f"{slow:5d} {accuracy:8.4f} {loss:8.4f}"
        )
        print(line, flush=True)
    if args.bleu_sentences:  # after the table, which stays even if decoding fails
        # --quick: the last mode's only (each mode's runs the same code and compiles a Translator)
        for mode, run in list(runs.items())[-1:] if args.quick else runs.items():
            bleu = dev_bleu(run["model"], tokenizer, hp, splits["dev"][: args.bleu_sentences])
            print(f"{mode:>15} dev BLEU (greedy, {args.bleu_sentences} sentences) {bleu:.2f}")
    accuracies = {mode: [f"{a:.4f}" for _, a in run["dev"]] for mode, run in runs.items()}
    print(f"dev accuracy per epoch: {accuracies}")
    print(f"load at the end: {loadavg()}")
    return runs


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
