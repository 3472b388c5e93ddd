"""On-device serving: LiteRT files (float32, float16, int8) vs the SavedModel and CTranslate2 int8.

One trained model (as `serve.py` trains it: `--hparams`, `--train-minutes` on
small_parallel_enja, or `--preset`) is exported as LiteRT files by
`Translator.export_litert` (`quantization` None / "float16" / "dynamic"), as a
SavedModel (`Translator.export`) and as a CTranslate2 int8 model
(`export_ctranslate2(quantization="int8")`). Each engine translates the first
`--sentences` test sentences one at a time (batch 1, beam `--beam-size`), engines
alternating within each of `--rounds` rounds; it prints per engine the latency median
and p90 (median over rounds), the file size (the SavedModel's folder, the CTranslate2
folder), BLEU, and the share of translations equal to the first engine's (the
SavedModel's). Every engine
runs with `--threads` threads (LiteRT `num_threads`, TF intra-op, CTranslate2
`intra_threads`). An untimed pass first translates one sentence of each source length
with every engine (the SavedModel's XLA compiles a program per length).

The LiteRT files run on the `ai-edge-litert` interpreter with tensorflow-text's
SentencePiece ops registered, in this process.

`--quick` is a smoke test: a tiny model trained for one step, 4 phrasebook sentences,
greedy, the float32 and int8 LiteRT files only, one round.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import serve  # benchmarks/serve.py: the data and the trained model

ENGINES = ("SavedModel", "LiteRT float32", "LiteRT float16", "LiteRT int8", "CT2 int8")
QUICK_ENGINES = ("LiteRT float32", "LiteRT int8")
LITERT = {"LiteRT float32": None, "LiteRT float16": "float16", "LiteRT int8": "dynamic"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: tiny model, 4 sentences, greedy, 2 engines")  # fmt: skip
    serve.add_model_arguments(parser)
    parser.add_argument("--sentences", type=int, default=200, help="test sentences timed")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    args.overrides, args.engines = {}, ENGINES
    if args.quick:
        args.hparams, args.overrides = "transformer_tiny", serve.QUICK_OVERRIDES
        args.vocab_size = 300
        args.train_minutes = min(args.train_minutes, 0.01)  # stops after step 1
        args.max_length, args.sentences, args.beam_size, args.rounds = 16, 4, 1, 1
        args.engines = QUICK_ENGINES
    return args


def litert_engine(path, threads):
    """`translate(list[str]) -> list[str]` with the LiteRT file `path`."""
    import numpy as np
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar

    interpreter = InterpreterWithCustomOps(
        model_path=path, num_threads=threads,
        custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS,
    )  # fmt: skip
    runner = interpreter.get_signature_runner()
    return lambda texts: [
        t.decode("utf-8") for t in runner(text=np.array(texts, object))["translation"]
    ]


def size(path):
    """Bytes of the file `path`, or of every file under the folder `path`."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )


def build_engines(args, model, tokenizer, workdir):
    """`{name: (translate, bytes)}` for `args.engines`."""
    import tensorflow as tf

    import tfblocks
    from tfblocks.translation.searches import beam_or_greedy

    search = beam_or_greedy(args.beam_size)
    translator = tfblocks.Translator(model, tokenizer, tokenizer, args.max_length, search=search)
    engines = {}
    for name in args.engines:
        path = os.path.join(workdir, name.replace(" ", "_"))
        start = time.perf_counter()
        if name == "SavedModel":
            signature = tf.saved_model.load(translator.export(path)).signatures["serving_default"]
            translate = serve._strings(lambda t, f=signature: f(text=tf.constant(t))["translation"])
        elif name in LITERT:
            translator.export_litert(path + ".tflite", quantization=LITERT[name])
            path += ".tflite"
            translate = litert_engine(path, args.threads)
        else:
            tfblocks.export_ctranslate2(model, tokenizer, path, quantization="int8")
            translate = tfblocks.CTranslate2Translator(
                path, beam_size=args.beam_size, max_length=args.max_length,
                compute_type="int8", intra_threads=args.threads, inter_threads=1,
            )  # fmt: skip
        print(f"{name}: exported in {time.perf_counter() - start:.0f} s", flush=True)
        engines[name] = (translate, size(path))
    return engines


def measure(args, engines, pairs, tokenizer):
    """`({name: latencies per round}, {name: outputs})`, batch 1, engines alternating."""
    sources = [s for s, _ in pairs]
    # Untimed: one sentence of each source length (the SavedModel's XLA compiles per length).
    serve.warm_up({name: {1: e[0]} for name, e in engines.items()}, sources, tokenizer, {1})
    latencies = {name: [] for name in engines}
    outputs = {}
    for _ in range(args.rounds):
        for name, (translate, _) in engines.items():
            outputs[name], seconds = serve.run_pass(translate, sources, 1)
            latencies[name].append(seconds)
    return latencies, outputs


def report(args, engines, latencies, outputs, pairs):
    from tfblocks.translation.evaluation import score

    references = [t for _, t in pairs]
    first = next(iter(engines))
    baseline = outputs[first]
    float32 = engines.get("LiteRT float32", (None, None))[1]
    print(f"\nbatch 1, beam {args.beam_size}, {len(pairs)} sentences, {args.threads} threads, "
          f"median of {args.rounds} round(s)")  # fmt: skip
    print(f"| engine | p50 ms | p90 ms | MB | × LiteRT float32 size | BLEU | = {first} |")
    print("|---|---|---|---|---|---|---|")
    for name, (_, nbytes) in engines.items():
        p50 = statistics.median(serve.percentile(s, 50) for s in latencies[name]) * 1e3
        p90 = statistics.median(serve.percentile(s, 90) for s in latencies[name]) * 1e3
        ratio = f"{nbytes / float32:.2f}" if float32 else "–"
        bleu = score(outputs[name], references)["bleu"]
        same = sum(a == b for a, b in zip(outputs[name], baseline, strict=True)) / len(baseline)
        print(f"| {name} | {p50:.1f} | {p90:.1f} | {nbytes / 1e6:.2f} | {ratio} | {bleu:.2f} "
              f"| {same:.0%} |")  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    serve.set_threads(args.threads)
    train_pairs, test_pairs = serve.load_data(args)
    test_pairs = test_pairs[: args.sentences]
    if args.preset:
        import tfblocks

        model, tokenizer, _ = tfblocks.load_preset(args.preset)
    else:
        model, tokenizer = serve.train_model(args, train_pairs)
    with tempfile.TemporaryDirectory() as workdir:
        engines = build_engines(args, model, tokenizer, workdir)
        latencies, outputs = measure(args, engines, test_pairs, tokenizer)
        report(args, engines, latencies, outputs, test_pairs)


if __name__ == "__main__":
    sys.exit(main())
