"""Serving speed and quality: tfblocks (in memory, SavedModel) vs CTranslate2 on the same weights.

Translates the 500 raw-Japanese test sentences of small_parallel_enja (`--data`, see
its SOURCE.md) with one trained model served by each engine:

- `Translator`: `tfblocks.Translator` in memory (XLA-compiled decoding loop);
- `SavedModel`: its export (`Translator.export`), reloaded with `tf.saved_model.load`;
- `SavedModel no-XLA`: the export of `Translator(..., jit_compile=False)` (what TF
  Serving runs without `--xla_cpu_compilation_enabled`);
- `SavedModel one cache`: the export with one self-attention cache of `max_length`
  (`cache_lengths=None`) instead of caches grown 16, 32, 64, … (the default);
- `SavedModel no drop`: the export with one search over the whole batch
  (`drop_finished=False`) instead of finished sentences leaving it;
- `SavedModel padded`: the export without the serving optimizations, sources padded to
  `max_length`, one cache of `max_length` and one search over the whole batch
  (`source_buckets=(max_length,)`, `cache_lengths=None`, `drop_finished=False`);
- `CT2 float32` / `CT2 int8`: `tfblocks.export_ctranslate2` of the same weights,
  run by `tfblocks.CTranslate2Translator` (`compute_type` float32 / int8).

For beam 4 and greedy, at batch 1 and batch 32, it reports target tokens per second
(tokens of each engine's own output, EOS excluded), the per-sentence latency p50 / p95
(a sentence's latency is its batch's wall time), BLEU (`tfblocks.translation.evaluation.score`)
and the share of sentences whose translation equals the in-memory Translator's.
Every engine runs with 2 threads (TF intra-op 2 / inter-op 1, CTranslate2
`intra_threads=2` / `inter_threads=1`; `--threads`). Engines alternate within each of
`--rounds` rounds; the table shows medians over rounds, and each engine's throughput
ratio to CTranslate2 float32 measured in the same rounds. An untimed warm-up pass
compiles every batch shape first (XLA compiles per batch size and source bucket).

`--stop-early` gives tfblocks' beam search CTranslate2's stopping rule (a sentence ends once
`beam_size` hypotheses have finished, `BeamSearch(stop_early=True)`) instead of t2t's.

`--overhead` times something else instead: what n-best lists and scoring cost next to
plain translation (beam 4, batch 32), for `Translator` (in memory, XLA) and CTranslate2
float32: `translate` (the best translation), `n-best 4` (the 4 best, `n_best` of
`num_hypotheses=4`) and `score` (`score` of the references, one forward pass); each
task's ratio to `translate` is the median of the per-round ratios.

`--constraints N` times lexical constraints instead (beam 4, batch 32, `Translator` in
memory, XLA): `BeamSearch` (plain translation), then `translate(texts, constraints=...)`
(`ConstrainedBeamSearch`) with 0, 1, … N phrases per sentence, each phrase one word of
the sentence's reference (its first, last, … alphabetic word; sentences with fewer words
get fewer); each task's time over `BeamSearch`'s (median of the per-round ratios), the
share of translations that hold every phrase and their BLEU.

`--cold` times a cold start instead: a fresh process per engine (`--rounds` of them,
engines alternating) loads the exported model and translates the test sentences once at
batch 32 (beam 4; XLA compiles a program per batch size, source bucket and cache length
during that first pass), then once more. It prints the seconds to load, of the first and
of the second pass, and the first pass's time over CTranslate2 float32's (median of the
per-round ratios; lower is better), for `SavedModel`, `SavedModel XLA cache` (the same
export run with TensorFlow's persistent XLA cache,
`TF_XLA_FLAGS=--tf_xla_persistent_cache_directory=DIR`, filled by one untimed process
first), `SavedModel cache+no Grappler` (the same with TensorFlow's graph optimizer off,
`tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})`, and a
cache of its own), `SavedModel no-XLA` and `CT2 float32`.

`--marian-base` times an imported model instead: it writes a random Hugging Face Marian
folder of transformer-base size (d 512, 8 heads, FFN 2048, 6+6 layers, vocabulary 58,101
as OPUS-MT de-en's; NumPy + safetensors, no torch; a SentencePiece model trained on the
embedded phrasebook, the rest of the vocabulary filler pieces), times
`tfblocks.models.import_marian` on it and the whole `tfblocks-import marian --ctranslate2`
(run folder, SavedModel and CTranslate2 exports), then serves the phrasebook's test
sentences with the import (`Translator`, in memory, XLA) and with CTranslate2 float32
on its export: beam 4, batch 32, CTranslate2's stopping rule on both sides
(`--stop-early`), no length penalty (`--alpha 0`: the two engines' penalties are not the
same formula), `--max-length` for both. The weights are random (EOS's logit bias
raised so that sentences end), so BLEU means nothing; "same" is the share of
translations CTranslate2 gives identically. With `--quick`: d 32, 1+1 layers, vocabulary
600, 4 sentences, one round.

There is no trained model on disk: the script trains `--hparams` (transformer_small)
for `--train-minutes` on the 50k training pairs, or loads `--preset DIR`
(`tfblocks.load_preset`); `--save-preset DIR` keeps what it trained. `--quick` is a smoke
test: a tiny model (d 32, 1+1 layers, `QUICK_OVERRIDES`) trained for one step (no XLA) on
the embedded phrasebook, max_length 16, 4 sentences, beam 4 at batch 32 only
(`QUICK_CONFIGS`), one engine of each kind (`QUICK_ENGINES`), one round.

    python benchmarks/serve.py --train-minutes 5 --save-preset /tmp/serve_small
    python benchmarks/serve.py --preset /tmp/serve_small --rounds 3
    python benchmarks/serve.py --preset /tmp/serve_small --rounds 3 --overhead
    python benchmarks/serve.py --preset /tmp/serve_small --rounds 3 --cold --stop-early
    python benchmarks/serve.py --marian-base --rounds 2
    python benchmarks/serve.py --preset /tmp/serve_small --rounds 3 --constraints 2

Figures: benchmarks/README.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data", "small_parallel_enja")
CONFIGS = (("beam 4", 4, 32), ("beam 4", 4, 1), ("greedy", 1, 32), ("greedy", 1, 1))
# --quick: one beam size (each builds every engine again) and one batch size (XLA compiles
# per batch size); batch 32 holds all of --quick's 4 sentences.
QUICK_CONFIGS = (("beam 4", 4, 32),)
QUICK_OVERRIDES = {
    "hidden_size": 32,
    "filter_size": 64,
    "num_heads": 2,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
}
ENGINES = (
    "Translator",
    "SavedModel",
    "SavedModel no-XLA",
    "SavedModel one cache",
    "SavedModel no drop",
    "SavedModel padded",
    "CT2 float32",
    "CT2 int8",
)
PEER = "CT2 float32"
# --quick's default engines: one of each kind (the other SavedModels run the same code
# with other Translator options: jit_compile, source_buckets, cache_lengths).
QUICK_ENGINES = ("Translator", "SavedModel", "CT2 float32", "CT2 int8")
COLD_ENGINES = (
    "SavedModel",
    "SavedModel XLA cache",
    "SavedModel cache+no Grappler",
    "SavedModel no-XLA",
    "CT2 float32",
)
# Cold-start engines that run the XLA export with a persistent XLA cache (each its own:
# without Grappler the graphs, and so the programs' keys, differ).
CACHED = ("SavedModel XLA cache", "SavedModel cache+no Grappler")


def add_model_arguments(parser):
    """The model the serving benchmarks decode with: a preset, or one trained here."""
    parser.add_argument("--data", default=DATA, help="the small_parallel_enja directory")
    parser.add_argument("--preset", help="load this tfblocks preset instead of training")
    parser.add_argument("--save-preset", help="save the trained model here")
    parser.add_argument("--hparams", default="transformer_small")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--train-minutes", type=float, default=5.0)
    parser.add_argument("--max-length", type=int, default=64, help="the serving max_length")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: tiny model, 1 training step, 4 phrasebook sentences, "
                        "beam 4 at batch 32 only, 4 engines, 1 round")  # fmt: skip
    add_model_arguments(parser)
    parser.add_argument("--sentences", type=int, default=500, help="test sentences used")
    parser.add_argument("--batch1-sentences", type=int, default=200,
                        help="sentences timed at batch 1 (the first N)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", help=f"default: all ({', '.join(ENGINES)})")
    parser.add_argument("--sort", action="store_true",
                        help="also time beam-4 batch-32 with sources sorted by length")  # fmt: skip
    parser.add_argument("--beam-only", action="store_true",
                        help="time beam 4 only (batch 32 and 1), not greedy")  # fmt: skip
    parser.add_argument("--stop-early", action="store_true",
                        help="tfblocks' beam search ends a sentence once beam_size hypotheses "
                        "have finished (CTranslate2's rule) instead of t2t's")  # fmt: skip
    parser.add_argument("--overhead", action="store_true",
                        help="instead of the engines: time n-best (4) and scoring against "
                        "plain translation, beam 4 at batch 32")  # fmt: skip
    parser.add_argument("--constraints", type=int, metavar="N",
                        help="instead of the engines: time translation with 0 … N reference "
                        "words as constraints per sentence against BeamSearch, beam 4 at "
                        "batch 32")  # fmt: skip
    parser.add_argument("--cold", action="store_true",
                        help="instead of the engines: time a fresh process's load and first "
                        "pass (beam 4, batch 32) per engine")  # fmt: skip
    parser.add_argument("--alpha", type=float, default=0.6,
                        help="length penalty: t2t's for tfblocks, CTranslate2's own for it "
                        "(--marian-base: 0, the log-probability for both)")  # fmt: skip
    parser.add_argument("--marian-base", action="store_true",
                        help="instead: import a random transformer-base Marian folder (import "
                        "time), serve it against CTranslate2 float32")  # fmt: skip
    parser.add_argument("--cold-child", nargs=2, metavar=("ENGINE", "PATH"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    args.configs, args.overrides = CONFIGS, {}
    if args.beam_only:
        args.configs = tuple(config for config in CONFIGS if config[1] > 1)
    if args.quick:
        args.hparams = "transformer_tiny"
        args.overrides = QUICK_OVERRIDES
        args.configs = QUICK_CONFIGS
        args.vocab_size = 300
        args.train_minutes = min(args.train_minutes, 0.01)  # TimeLimit: stops after step 1
        args.max_length = 16  # source buckets 8 and 16
        # 4: beam 4's batch never shrinks below 4 sentences (tfblocks.decoding.dropping), so
        # an XLA engine compiles one search program
        args.sentences = min(args.sentences, 4)
        args.batch1_sentences = min(args.batch1_sentences, 2)
        args.rounds = 1
    if args.marian_base:
        args.configs, args.stop_early = QUICK_CONFIGS, True  # beam 4, batch 32; CT2's rule
        args.alpha = 0.0  # the log-probability ranks hypotheses in both engines
        args.engines = args.engines or "Translator,CT2 float32"
    if args.engines is None:
        args.engines = ",".join(QUICK_ENGINES if args.quick else ENGINES)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown:
        parser.error(f"--engines: unknown {unknown}; choose from {list(ENGINES)}")
    args.engines = engines
    return args


def set_threads(threads):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def load_data(args):
    """`(train_pairs, test_pairs)`: raw Japanese sources, English references."""
    from tfblocks.text import load_phrasebook, read_parallel

    if args.quick:
        book = load_phrasebook()
        return list(book["train"][:2000]), list(book["test"][: args.sentences])
    for name in ("train.ja", "test.ja"):
        if not os.path.isfile(os.path.join(args.data, name)):
            sys.exit(f"serve.py: {args.data}/{name} not found (--data, or --quick)")
    test = read_parallel(os.path.join(args.data, "test.ja"), os.path.join(args.data, "test.en"))
    train = [] if args.preset else read_parallel(
        os.path.join(args.data, "train.ja"), os.path.join(args.data, "train.en")
    )  # fmt: skip
    return list(train), list(test)[: args.sentences]


def train_model(args, train_pairs):
    """A model trained for `--train-minutes` (shared SentencePiece vocabulary)."""
    import tfblocks
    from tfblocks.text import make_dataset, train_tokenizer
    from tfblocks.training.callbacks import TimeLimit

    tokenizer = train_tokenizer([side for pair in train_pairs for side in pair], args.vocab_size)
    hp = tfblocks.hparams(args.hparams, vocab_size=tokenizer.vocabulary_size, **args.overrides)
    model = tfblocks.build_transformer(hp)
    # --quick trains without XLA: its one step would spend most of its time compiling.
    tfblocks.compile_transformer(model, hp, learning_rate=1e-3, jit_compile=not args.quick)
    data = make_dataset(train_pairs, tokenizer, tokenizer, batch_tokens=4096,
                        max_length=args.max_length, shapes="buckets", seed=0)  # fmt: skip
    limit = TimeLimit(args.train_minutes * 60)
    start = time.perf_counter()
    history = model.fit(data, epochs=1000, callbacks=[limit], verbose=0)
    print(f"trained {args.hparams} for {time.perf_counter() - start:.0f} s "
          f"({len(history.epoch)} epochs), loss {history.history['loss'][-1]:.3f}")  # fmt: skip
    if args.save_preset:
        tfblocks.save_preset(model, tokenizer, args.save_preset, hp)
    return model, tokenizer


def build_engines(args, model, tokenizer, workdir):
    """`{name: {beam_size: translate(list[str]) -> list[str]}}` for `args.engines`."""
    import tensorflow as tf

    import tfblocks
    from tfblocks.translation.searches import beam_or_greedy

    engines = {}
    # "SavedModel padded": sources padded to max_length, one cache of max_length
    before = {
        "source_buckets": (args.max_length,),
        "extra_length": None,
        "cache_lengths": None,
        "drop_finished": False,
    }
    saved = {"SavedModel": {}, "SavedModel no-XLA": {"jit_compile": False}}
    saved["SavedModel one cache"] = {"cache_lengths": None}
    saved["SavedModel no drop"] = {"drop_finished": False}
    saved["SavedModel padded"] = before
    ct2 = {"CT2 float32": (None, "float32"), "CT2 int8": ("int8", "int8")}
    for name in args.engines:
        engines[name] = {}
        for beam in sorted({beam for _, beam, _ in args.configs}):
            if name == "Translator" or name in saved:
                search = beam_or_greedy(beam, args.alpha, stop_early=args.stop_early)
                options = {"max_length": args.max_length, "search": search}
                options.update(saved.get(name, {}))
                translator = tfblocks.Translator(model, tokenizer, tokenizer, **options)
                if name == "Translator":
                    engines[name][beam] = _strings(translator)
                    continue
                path = translator.export(
                    os.path.join(workdir, f"{name}-{beam}".replace(" ", "_"), "1")
                )
                signature = tf.saved_model.load(path).signatures["serving_default"]
                engines[name][beam] = _strings(
                    lambda texts, f=signature: f(text=tf.constant(texts))["translation"]
                )
            else:
                quantization, compute_type = ct2[name]
                path = os.path.join(workdir, name.replace(" ", "_"))
                if not os.path.isdir(path):
                    tfblocks.export_ctranslate2(model, tokenizer, path, quantization=quantization)
                engines[name][beam] = tfblocks.CTranslate2Translator(
                    path, beam_size=beam, max_length=args.max_length, compute_type=compute_type,
                    intra_threads=args.threads, inter_threads=1, length_penalty=args.alpha,
                )  # fmt: skip
    return engines


def _strings(translate):
    return lambda texts: [t.decode("utf-8") for t in translate(texts).numpy()]


def run_pass(translate, sources, batch):
    """`(outputs, seconds per call)` translating `sources` in batches of `batch`."""
    outputs, seconds = [], []
    for start in range(0, len(sources), batch):
        chunk = sources[start : start + batch]
        begin = time.perf_counter()
        outputs.extend(translate(chunk))
        seconds.append(time.perf_counter() - begin)
    return outputs, seconds


def warm_up(engines, sources, tokenizer, batches, sort=False):
    """Compiles every batch shape of `batches` (the configs' batch sizes, 1 and/or 32).

    Batch 1: one sentence per source length; batch 32: all sentences (and, with `sort`,
    all sentences sorted by length: dropping finished sentences shrinks those batches
    through other shapes).
    """
    lengths = {}
    for text, ids in zip(sources, tokenizer.tokenize(sources).row_lengths().numpy(), strict=True):
        lengths.setdefault(int(ids), text)
    for per_beam in engines.values():
        for translate in per_beam.values():
            if 1 in batches:
                run_pass(translate, list(lengths.values()), 1)
            if 32 in batches:
                run_pass(translate, sources, 32)
                if sort:
                    run_pass(translate, sorted(sources, key=len), 32)


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, round(q / 100 * (len(values) - 1)))]


def measure(args, engines, test_pairs, tokenizer):
    """Rounds over configs × engines (engine order rotated each round)."""
    sources = [s for s, _ in test_pairs]
    configs = list(args.configs)
    if args.sort:
        configs.append(("beam 4 sorted", 4, 32))
    order = list(engines)
    results = {}  # (config, engine) -> list of (tokens/s, p50, p95)
    outputs = {}
    for round_index in range(args.rounds):
        for label, beam, batch in configs:
            texts = sources if batch > 1 else sources[: args.batch1_sentences]
            if label.endswith("sorted"):
                texts = sorted(texts, key=len)
            for name in order:
                out, seconds = run_pass(engines[name][beam], texts, batch)
                tokens = int(tokenizer.tokenize(out).row_lengths().numpy().sum()) - len(
                    out
                )  # no EOS
                latency = [s for s, start in zip(seconds, range(0, len(texts), batch), strict=True)
                           for _ in texts[start : start + batch]]  # fmt: skip
                results.setdefault((label, batch, name), []).append(
                    (tokens / sum(seconds), percentile(latency, 50), percentile(latency, 95))
                )
                if batch > 1 and not label.endswith("sorted"):
                    outputs[(label, name)] = out
        order = order[1:] + order[:1]
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    return configs, results, outputs


def report(args, configs, results, outputs, test_pairs):
    from tfblocks.translation.evaluation import score

    references = [t for _, t in test_pairs]
    first = min(args.batch1_sentences, len(test_pairs))
    print(
        f"\n{args.preset or args.hparams}, max_length {args.max_length}, "
        f"{len(test_pairs)} sentences (batch 1: first {first}), {args.threads} threads, "
        f"median of {args.rounds} round(s)"
    )
    print(
        f"{'decoding':<14} {'batch':>5}  {'engine':<18} {'tok/s':>8} {'vs CT2 f32':>10} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'BLEU':>6} {'same':>6}"
    )
    for label, _, batch in configs:
        peer = results.get((label, batch, PEER))
        for name in args.engines:
            rows = results[(label, batch, name)]
            speed = statistics.median(r[0] for r in rows)
            ratio = ""
            if peer and all(p[0] > 0 for p in peer):
                ratio = statistics.median(r[0] / p[0] for r, p in zip(rows, peer, strict=True))
                ratio = f"{ratio:.2f}×"
            p50 = statistics.median(r[1] for r in rows) * 1000
            p95 = statistics.median(r[2] for r in rows) * 1000
            bleu = same = ""
            if (label, name) in outputs:
                out = outputs[(label, name)]
                bleu = f"{score(out, references)['bleu']:.2f}"
                base = outputs.get((label, "Translator"))
                if base:
                    equal = sum(a == b for a, b in zip(out, base, strict=True))
                    same = f"{100 * equal / len(out):.1f}%"
            print(
                f"{label:<14} {batch:>5}  {name:<18} {speed:>8.0f} {ratio:>10} {p50:>8.1f} "
                f"{p95:>8.1f} {bleu:>6} {same:>6}"
            )


OVERHEAD_TASKS = ("translate", "n-best 4", "score")


def build_overhead(args, model, tokenizer, workdir):
    """`{engine: {task: fn(sources, references)}}` for `OVERHEAD_TASKS`: Translator (XLA)
    and, when CTranslate2 is installed, CT2 float32; beam 4 (length penalty 0.6)."""
    import importlib.util

    import tfblocks
    from tfblocks.decoding import BeamSearch

    translator = tfblocks.Translator(model, tokenizer, tokenizer, max_length=args.max_length,
                                     search=BeamSearch(4, 0.6), num_hypotheses=4)  # fmt: skip
    strings = _strings(translator)
    tasks = {
        "Translator": {
            "translate": lambda sources, references: strings(sources),
            "n-best 4": lambda sources, references: translator.n_best(sources),
            "score": translator.score,
        }
    }
    if importlib.util.find_spec("ctranslate2") is not None:
        path = tfblocks.export_ctranslate2(model, tokenizer, os.path.join(workdir, "ct2"))
        ct2 = tfblocks.CTranslate2Translator(
            path, beam_size=4, max_length=args.max_length, compute_type="float32",
            intra_threads=args.threads, inter_threads=1, num_hypotheses=4,
        )  # fmt: skip
        tasks["CT2 float32"] = {
            "translate": lambda sources, references: ct2(sources),
            "n-best 4": lambda sources, references: ct2.n_best(sources),
            "score": ct2.score,
        }
    return tasks


def constraint_words(reference, n):
    """Up to `n` words of `reference` to constrain its translation with: its first, last,
    second, … alphabetic words, no word twice.

    >>> constraint_words("Kenta reads a book at school.", 3)
    ['Kenta', 'at', 'reads']
    """
    words = list(dict.fromkeys(w for w in reference.split() if w.isalpha()))
    order = [w for pair in zip(words, reversed(words), strict=True) for w in pair]
    return list(dict.fromkeys(order))[:n]


def build_constrained(args, model, tokenizer):
    """`{"Translator": {task: fn(sources, references)}}`: `BeamSearch` and 0 … N words of
    the references as constraints (`constraint_words`), beam 4 (length penalty 0.6)."""
    import tfblocks
    from tfblocks.decoding import BeamSearch

    translator = tfblocks.Translator(model, tokenizer, tokenizer, max_length=args.max_length,
                                     search=BeamSearch(4, 0.6))  # fmt: skip
    strings = _strings(translator)
    tasks = {"BeamSearch": lambda sources, references: strings(sources)}
    for n in range(args.constraints + 1):
        tasks[f"{n} phrase{'s' if n != 1 else ''}"] = lambda sources, references, n=n: [
            t.decode("utf-8")
            for t in translator(
                sources, constraints=[constraint_words(r, n) for r in references]
            ).numpy()
        ]
    return {"Translator": tasks}


def report_constrained(args, tasks, test_pairs):
    """Each constrained task's share of translations holding every phrase, and BLEU."""
    from tfblocks.translation.evaluation import score

    sources, references = [s for s, _ in test_pairs], [t for _, t in test_pairs]
    print(f"\n{'task':<12} {'holds all':>9} {'BLEU':>6}")
    for task, run in tasks["Translator"].items():
        out = [t for i in range(0, len(sources), 32)
               for t in run(sources[i : i + 32], references[i : i + 32])]  # fmt: skip
        n = 0 if task == "BeamSearch" else int(task.split()[0])
        # A phrase's subwords in the translation: its text, maybe inside a longer word.
        held = [
            all(w in t for w in constraint_words(r, n))
            for t, r in zip(out, references, strict=True)
        ]
        bleu = score(out, references)["bleu"]
        print(f"{task:<12} {100 * sum(held) / len(held):>8.1f}% {bleu:>6.2f}")


def measure_overhead(args, tasks, test_pairs):
    """Seconds per pass over `test_pairs` in batches of 32, per (engine, task) and round
    (the tasks' order rotated each round), after an untimed pass that compiles; each
    task's ratio to the first task's."""
    batches = [
        ([s for s, _ in test_pairs[i : i + 32]], [t for _, t in test_pairs[i : i + 32]])
        for i in range(0, len(test_pairs), 32)
    ]
    start = time.perf_counter()
    for per_task in tasks.values():
        for run in per_task.values():
            for sources, references in batches:
                run(sources, references)
    print(f"warm-up (compiles every batch shape): {time.perf_counter() - start:.0f} s")
    seconds = {}
    names = list(next(iter(tasks.values())))
    order = list(names)
    for round_index in range(args.rounds):
        for engine, per_task in tasks.items():
            for task in order:
                begin = time.perf_counter()
                for sources, references in batches:
                    per_task[task](sources, references)
                seconds.setdefault((engine, task), []).append(time.perf_counter() - begin)
        order = order[1:] + order[:1]
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{args.preset or args.hparams}, max_length {args.max_length}, "
        f"{len(test_pairs)} sentences, beam 4, batch 32, {args.threads} threads, "
        f"median of {args.rounds} round(s)"
    )
    print(f"{'engine':<12} {'task':<10} {'seconds':>8} {'vs ' + names[0]:>14}")
    for engine in tasks:
        plain = seconds[(engine, names[0])]
        for task in names:
            rows = seconds[(engine, task)]
            ratio = statistics.median(r / p for r, p in zip(rows, plain, strict=True))
            print(f"{engine:<12} {task:<10} {statistics.median(rows):>8.2f} {ratio:>13.3f}×")


def cold_child(args):
    """In a fresh process: load `args.cold_child`'s engine, translate the test sentences
    twice at batch 32 (beam 4), print the seconds as one JSON line."""
    engine, path = args.cold_child
    set_threads(args.threads)
    import tensorflow as tf

    import tfblocks

    if engine.endswith("no Grappler"):
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

    _, test_pairs = load_data(args)
    sources = [s for s, _ in test_pairs]
    start = time.perf_counter()
    if engine.startswith("SavedModel"):
        signature = tf.saved_model.load(path).signatures["serving_default"]
        translate = _strings(lambda texts: signature(text=tf.constant(texts))["translation"])
    else:
        translate = tfblocks.CTranslate2Translator(
            path, beam_size=4, max_length=args.max_length, compute_type="float32",
            intra_threads=args.threads, inter_threads=1,
        )  # fmt: skip
    loaded = time.perf_counter()
    first = sum(run_pass(translate, sources, 32)[1])
    second = sum(run_pass(translate, sources, 32)[1])
    print(json.dumps({"load": loaded - start, "first": first, "second": second}))


def measure_cold(args, model, tokenizer, workdir):
    """`--cold`: each engine's load and passes in fresh processes, `--rounds` times."""
    import tfblocks
    from tfblocks.translation.searches import beam_or_greedy

    search = beam_or_greedy(4, stop_early=args.stop_early)
    paths = {}
    for name, jit in (("SavedModel", True), ("SavedModel no-XLA", False)):
        translator = tfblocks.Translator(model, tokenizer, tokenizer, max_length=args.max_length,
                                         search=search, jit_compile=jit)  # fmt: skip
        paths[name] = translator.export(os.path.join(workdir, name.replace(" ", "_"), "1"))
    paths["CT2 float32"] = tfblocks.export_ctranslate2(
        model, tokenizer, os.path.join(workdir, "ct2")
    )
    caches = {}
    for engine in CACHED:
        paths[engine] = paths["SavedModel"]
        caches[engine] = os.path.join(workdir, engine.replace(" ", "_") + "_xla_cache")
        os.makedirs(caches[engine])

    def child(engine):
        env = dict(os.environ)
        if engine in caches:
            flags = env.get("TF_XLA_FLAGS", "")
            option = f"--tf_xla_persistent_cache_directory={caches[engine]}"
            env["TF_XLA_FLAGS"] = f"{flags} {option}".strip()
        command = [
            sys.executable, os.path.abspath(__file__), "--cold-child", engine, paths[engine],
            "--data", args.data, "--sentences", str(args.sentences),
            "--max-length", str(args.max_length), "--threads", str(args.threads),
        ]  # fmt: skip
        if args.quick:
            command.append("--quick")
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"serve.py --cold: the {engine} process failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    for engine, cache in caches.items():
        child(engine)  # fills the cache: what a deployment would do once
        size = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
        print(f"{engine}: {len(os.listdir(cache))} programs, {size / 2**20:.1f} MiB")
    order, results = list(COLD_ENGINES), {}
    for round_index in range(args.rounds):
        for engine in order:
            results.setdefault(engine, []).append(child(engine))
        order = order[1:] + order[:1]
        print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{args.preset or args.hparams}, max_length {args.max_length}, "
        f"{len(load_data(args)[1])} sentences, beam 4, batch 32, {args.threads} threads, "
        f"a fresh process per engine and round, median of {args.rounds} round(s)"
    )
    print(f"{'engine':<28} {'load s':>7} {'1st pass s':>10} {'2nd pass s':>10} {'1st / CT2':>10}")
    peer = [r["first"] for r in results[PEER]]
    for engine in COLD_ENGINES:
        rows = results[engine]
        ratio = statistics.median(r["first"] / p for r, p in zip(rows, peer, strict=True))
        print(
            f"{engine:<28} {statistics.median(r['load'] for r in rows):>7.2f} "
            f"{statistics.median(r['first'] for r in rows):>10.2f} "
            f"{statistics.median(r['second'] for r in rows):>10.2f} {ratio:>9.2f}×"
        )


# --marian-base: OPUS-MT de-en's sizes (transformer-base); --quick's tiny ones.
MARIAN_BASE = {"d": 512, "heads": 8, "ffn": 2048, "layers": 6, "vocab": 58101}
MARIAN_QUICK = {"d": 32, "heads": 2, "ffn": 64, "layers": 1, "vocab": 600}
# A random model's logits have std ~1 and their largest of V about sqrt(2 ln V): EOS's
# bias a little below that, so that it is the best token at some steps, not at the first.
EOS_BELOW_MAX = 1.0


def write_marian_folder(folder, size, sentences, max_length, seed=0):
    """A random Hugging Face Marian folder (`config.json`, `model.safetensors`,
    `vocab.json`, `source.spm` = `target.spm`, `generation_config.json`) of `size`."""
    import io

    import numpy as np
    import sentencepiece
    from safetensors.numpy import save_file

    os.makedirs(folder)
    spm = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=spm,
        vocab_size=min(4000, size["vocab"] // 2), model_type="unigram",
        character_coverage=0.9995, hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    for side in ("source", "target"):
        with open(os.path.join(folder, f"{side}.spm"), "wb") as f:
            f.write(spm.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm.getvalue())
    pieces = ["</s>", "<unk>"] + [
        processor.id_to_piece(i) for i in range(processor.get_piece_size())
        if not processor.is_control(i) and not processor.is_unknown(i)
    ]  # fmt: skip
    pieces += [f"▁filler{i}" for i in range(size["vocab"] - 1 - len(pieces))] + ["<pad>"]
    vocab_size, d, ffn = len(pieces), size["d"], size["ffn"]
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({piece: i for i, piece in enumerate(pieces)}, f, ensure_ascii=False)
    config = {
        "model_type": "marian", "vocab_size": vocab_size, "decoder_vocab_size": vocab_size,
        "d_model": d, "encoder_layers": size["layers"], "decoder_layers": size["layers"],
        "encoder_attention_heads": size["heads"], "decoder_attention_heads": size["heads"],
        "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn, "activation_function": "swish",
        "max_position_embeddings": 512, "scale_embedding": True, "tie_word_embeddings": True,
        "share_encoder_decoder_embeddings": True, "pad_token_id": vocab_size - 1,
        "eos_token_id": 0, "decoder_start_token_id": vocab_size - 1,
    }  # fmt: skip
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"num_beams": 4, "max_length": max_length + 1}, f)
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    weights = {"model.shared.weight": normal((vocab_size, d), d**-0.5)}
    bias = normal((1, vocab_size), 0.1)
    bias[0, 0] = (2 * np.log(vocab_size)) ** 0.5 - EOS_BELOW_MAX
    weights["final_logits_bias"] = bias

    def dense(key, n_in, n_out):
        weights[f"{key}.weight"] = normal((n_out, n_in), n_in**-0.5)  # torch's [out, in]
        weights[f"{key}.bias"] = normal((n_out,), 0.02)

    def norm(key):
        weights[f"{key}.weight"] = np.ones(d, np.float32)
        weights[f"{key}.bias"] = np.zeros(d, np.float32)

    for side in ("encoder", "decoder"):
        for i in range(size["layers"]):
            block = f"model.{side}.layers.{i}"
            for part in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    dense(f"{block}.{part}.{projection}", d, d)
                norm(f"{block}.{part}_layer_norm")
            dense(f"{block}.fc1", d, ffn)
            dense(f"{block}.fc2", ffn, d)
            norm(f"{block}.final_layer_norm")
    save_file(weights, os.path.join(folder, "model.safetensors"))
    return sum(w.size for w in weights.values())


def marian_base(args):
    """`--marian-base`: import time of a random transformer-base Marian folder, then its
    serving speed against CTranslate2 float32 on its export."""
    from tfblocks.cli import import_ as import_cli
    from tfblocks.models import import_marian
    from tfblocks.text import load_phrasebook

    book = load_phrasebook()
    corpus = [side for pair in book["train"] for side in pair]
    test_pairs = list(book["test"][: args.sentences])
    size = MARIAN_QUICK if args.quick else MARIAN_BASE
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="serve-marian-") as workdir:
        folder = os.path.join(workdir, "opus-mt-random")
        start = time.perf_counter()
        count = write_marian_folder(folder, size, corpus, args.max_length)
        print(f"wrote a random Marian folder: d {size['d']}, {size['layers']}+{size['layers']} "
              f"layers, vocabulary {size['vocab']}, {count / 1e6:.1f} M parameters "
              f"({time.perf_counter() - start:.1f} s)")  # fmt: skip
        start = time.perf_counter()
        imported = import_marian(folder)
        print(f"import_marian: {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        run = os.path.join(workdir, "run")
        import_cli.main(["marian", folder, "--output", run, "--ctranslate2"])
        print(f"tfblocks-import marian --ctranslate2 (run folder, SavedModel and CTranslate2 "
              f"exports): {time.perf_counter() - start:.1f} s")  # fmt: skip
        args.hparams = f"random Marian d {size['d']} {size['layers']}+{size['layers']} (imported)"
        engines = build_engines(args, imported.model, imported.source_tokenizer, workdir)
        start = time.perf_counter()
        warm_up(engines, [s for s, _ in test_pairs], imported.source_tokenizer, {32})
        print(f"warm-up (compiles every batch shape): {time.perf_counter() - start:.0f} s")
        configs, results, outputs = measure(args, engines, test_pairs, imported.source_tokenizer)
    report(args, configs, results, outputs, test_pairs)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def main(argv=None):
    args = parse_args(argv)
    if args.cold_child:
        cold_child(args)
        return
    set_threads(args.threads)
    if args.marian_base:
        marian_base(args)
        return
    import tfblocks

    train_pairs, test_pairs = load_data(args)
    if args.preset:
        model, tokenizer, _ = tfblocks.load_preset(args.preset)
    else:
        model, tokenizer = train_model(args, train_pairs)
    if args.cold:
        with tempfile.TemporaryDirectory(prefix="serve-") as workdir:
            measure_cold(args, model, tokenizer, workdir)
        return
    if args.constraints is not None:
        tasks = build_constrained(args, model, tokenizer)
        measure_overhead(args, tasks, test_pairs)
        report_constrained(args, tasks, test_pairs)
        return
    if args.overhead:
        with tempfile.TemporaryDirectory(prefix="serve-") as workdir:
            measure_overhead(args, build_overhead(args, model, tokenizer, workdir), test_pairs)
        return
    with tempfile.TemporaryDirectory(prefix="serve-") as workdir:
        engines = build_engines(args, model, tokenizer, workdir)
        start = time.perf_counter()
        batches = {batch for _, _, batch in args.configs}
        warm_up(engines, [s for s, _ in test_pairs], tokenizer, batches, args.sort)
        print(f"warm-up (compiles every batch shape): {time.perf_counter() - start:.0f} s")
        configs, results, outputs = measure(args, engines, test_pairs, tokenizer)
    report(args, configs, results, outputs, test_pairs)


if __name__ == "__main__":
    main()
