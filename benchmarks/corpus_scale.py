"""Corpus size against the cost of starting to train: peak memory and time to the first step.

Writes a made-up parallel corpus of N pairs (a language "xx" of random words and its
"translation" "yy": every word replaced through a fixed dictionary, word order reversed;
3 to 15 words a sentence, 500-pair dev and test splits), then runs `tfblocks-train` on it in
a fresh Python and stops that Python at the end of its first training step, which prints
the seconds since the process started and its peak resident memory (`ru_maxrss`) so far.
Everything the command does before training counts: reading the corpus, its fingerprint,
the length summary, the tokenizer's training, building the model and the input pipeline,
and the first step.

The corpus files are named for the command given: `--legacy-names` writes `train.ja` /
`train.en` (the only names `tfblocks-train` read before `--source-lang/--target-lang`)
and passes no language options; otherwise `train.xx` / `train.yy` with
`--source-lang xx --target-lang yy`; `--stream` / `--no-stream` pass `tfblocks-train
--stream` (the train split streamed from its files) / `--no-stream` (held in memory);
neither: the command chooses (streamed above 64 MiB of train files). `--repo` runs the `tfblocks`
of another checkout (a `git worktree` of an older commit: the before figures). A size
whose run has not reached its first step after `--timeout` seconds is reported as such.

Run:  python benchmarks/corpus_scale.py                          # 100k, 2M and 10M pairs
      python benchmarks/corpus_scale.py --no-stream              # the same, in memory
      python benchmarks/corpus_scale.py --sizes 100000 --legacy-names --repo /tmp/before
      python benchmarks/corpus_scale.py --quick                  # 2,000 pairs, smoke run

Figures: benchmarks/README.md.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs in the child Python: the first training step ends the process with one JSON line.
FIRST_STEP = r"""
import json, os, resource, sys, time
START = float(sys.argv[1])
import keras

class FirstStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
        print("FIRST_STEP " + json.dumps({"seconds": time.time() - START, "peak_mib": peak}),
              flush=True)
        os._exit(0)

fit = keras.Model.fit

def fit_to_first_step(self, *args, callbacks=None, **kwargs):
    return fit(self, *args, callbacks=[*(callbacks or []), FirstStep()], **kwargs)

keras.Model.fit = fit_to_first_step
from tfblocks.cli import train as train_cli
train_cli.main(sys.argv[2:])
print("FIRST_STEP null", flush=True)  # training ended without a step
"""


def made_up_pair(rng, dictionary, words):
    """One (source, target) pair of the made-up language pair."""
    source = rng.choices(words, k=rng.randint(3, 15))
    target = [dictionary[word] for word in reversed(source)]
    return " ".join(source), " ".join(target).capitalize() + "."


def write_corpus(folder, pairs, names, seed=0):
    """`{train,dev,test}.{source,target}` of `pairs` made-up pairs under `folder`."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choices(letters, k=rng.randint(2, 8))) for _ in range(6000)})
    shuffled = rng.sample(words, len(words))
    dictionary = dict(zip(words, ["".join(reversed(w)) + "o" for w in shuffled], strict=True))
    source_lang, target_lang = names
    for split, count in (("train", pairs), ("dev", 500), ("test", 500)):
        paths = [os.path.join(folder, f"{split}.{lang}") for lang in names]
        with (
            open(paths[0], "w", encoding="utf-8") as src,
            open(paths[1], "w", encoding="utf-8") as tgt,
        ):
            for start in range(0, count, 100_000):
                block = [
                    made_up_pair(rng, dictionary, words) for _ in range(min(100_000, count - start))
                ]
                src.write("".join(s + "\n" for s, _ in block))
                tgt.write("".join(t + "\n" for _, t in block))
    return source_lang, target_lang


def first_step(repo, corpus, output, legacy, timeout, vocab_size, stream=None, sample=None):
    """`{"seconds", "peak_mib"}` of `tfblocks-train` on `corpus` at its first step, or
    `{"timeout": seconds}`."""
    argv = ["--corpus-dir", corpus, "--output", output, "--epochs", "1",
            "--vocab-size", str(vocab_size), "--hparams", "transformer_tiny"]  # fmt: skip
    if not legacy:
        argv += ["--source-lang", "xx", "--target-lang", "yy"]
    if stream is not None:
        argv.append("--stream" if stream else "--no-stream")
    if sample is not None:
        argv += ["--tokenizer-sample", str(sample)]
    env = dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    try:
        result = subprocess.run(
            [sys.executable, "-c", FIRST_STEP, str(start), *argv],
            capture_output=True, text=True, timeout=timeout, env=env, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    for line in result.stdout.splitlines():
        if line.startswith("FIRST_STEP "):
            found = json.loads(line.split(" ", 1)[1])
            if found is not None:
                return found
    raise RuntimeError(f"tfblocks-train failed (exit {result.returncode}): {result.stderr[-3000:]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,2000000,10000000", help="pairs, comma-separated")
    parser.add_argument("--repo", default=HERE, help="the checkout whose tfblocks runs")
    parser.add_argument(
        "--legacy-names", action="store_true", help="train.ja/train.en, no --source-lang"
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a size may take")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument(
        "--work-dir", default=None, help="where the corpora go (default: a temporary folder)"
    )
    parser.add_argument(
        "--stream", action=argparse.BooleanOptionalAction, default=None,
        help="tfblocks-train --stream / --no-stream (default: neither, the command's choice)",
    )  # fmt: skip
    parser.add_argument("--tokenizer-sample", type=int, default=None, help="its --tokenizer-sample")
    parser.add_argument("--quick", action="store_true", help="2,000 pairs: a smoke run")
    args = parser.parse_args()
    sizes = [2000] if args.quick else [int(n) for n in args.sizes.split(",")]
    names = ("ja", "en") if args.legacy_names else ("xx", "yy")
    files = "train.ja/.en" if args.legacy_names else "train.xx/.yy"
    mode = {True: "--stream", False: "--no-stream", None: "the default"}[args.stream]
    print(f"repo {args.repo}; files {files}; {mode}")
    print(f"{'pairs':>10} {'corpus MiB':>10} {'first step s':>13} {'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        for size in sizes:
            corpus = os.path.join(work, f"corpus-{size}")
            os.makedirs(corpus)
            write_corpus(corpus, size, names)
            megabytes = (
                sum(os.path.getsize(os.path.join(corpus, f"train.{lang}")) for lang in names)
                / 2**20
            )
            found = first_step(args.repo, corpus, os.path.join(work, f"run-{size}"),
                               args.legacy_names, args.timeout, args.vocab_size,
                               args.stream, args.tokenizer_sample)  # fmt: skip
            if "timeout" in found:
                print(
                    f"{size:>10} {megabytes:>10.0f} {'> ' + str(int(args.timeout)):>13} {'-':>13}"
                )
            else:
                seconds, peak = found["seconds"], found["peak_mib"]
                print(f"{size:>10} {megabytes:>10.0f} {seconds:>13.1f} {peak:>13.0f}")
            shutil.rmtree(corpus)  # made here: gone before the next size is written
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
