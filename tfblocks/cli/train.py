"""`tfblocks-train`: train a translator in a run folder, evaluate it, export it, reload it.

With no arguments (what `make demo` runs, through `examples/translate.py`) it trains
`transformer_tiny` on the embedded Japanese→English phrasebook (no download), reports
BLEU, chrF and exact match on the held-out test split, translates a few sentences
including 今日のランチはカレーだ。, writes the model (KerasHub preset) and the SavedModel
(`export/1`), reloads the SavedModel and translates again.

`--output DIR` is a durable run folder (layout: `tfblocks.translation.run_folder`).
Rerunning the same command continues after the last finished epoch (after a crash, a
`--max-train-minutes` stop, or with a larger `--epochs`); `--init-from OTHER_RUN` starts
from another run's model and tokenizers (fine-tuning on new data; a run of `tfblocks-train`
or of `tfblocks-import`), keeping its architecture, with `--lora-rank R` by training only
low-rank adapters. A folder made with another corpus, vocabulary or
architecture is an error, never silently reused.

Examples:
  tfblocks-train
  tfblocks-train --corpus-dir ../shared/data/small_parallel_enja \\
      --hparams transformer_small --epochs 20 --output runs/enja
  tfblocks-train --corpus-dir new_domain --init-from runs/enja --epochs 5 --output runs/ft
  tfblocks-train --corpus-dir new_domain --init-from runs/enja --lora-rank 8 --output runs/lora
  tfblocks-train --source-lang de --target-lang en --corpus-dir wmt_de_en --output runs/deen
  tfblocks-train --source-lang de --target-lang en \\
      --train-source 'wmt/train.de-*' --train-target 'wmt/train.en-*' \\
      --dev-source wmt/dev.de.gz --dev-target wmt/dev.en.gz \\
      --test-source wmt/test.de --test-target wmt/test.en --output runs/deen
  tfblocks-train --tsv pairs.tsv --source-lang fr --target-lang en \\
      --source-column 1 --target-column 0 --output runs/fren
  tfblocks-train --pairs de-en,fr-en,en-de --corpus-dir corpora --output runs/multi
"""

import dataclasses
import os

from tfblocks import _checks
from tfblocks._allocator import physical_memory_mb
from tfblocks.cli.arguments import add_verbose_argument, command_parser
from tfblocks.cli.console import run_command
from tfblocks.cli.corpus import (
    FILE_FLAGS,
    add_corpus_arguments,
    check_corpus_arguments,
    check_pairs_arguments,
    corpus_source,
    flag_name,
)
from tfblocks.text.shapes import SHAPES
from tfblocks.training.precision import POLICIES
from tfblocks.translation.evaluation import BLEU_TOKENIZE_DEFAULTS, BLEU_TOKENIZERS
from tfblocks.translation.options import DEMO_OVERRIDES
from tfblocks.translation.searches import beam_or_greedy


def parse_args(argv=None):
    parser = command_parser("tfblocks-train", __doc__)
    add_verbose_argument(parser)
    add_corpus_arguments(parser)
    _add_model_arguments(parser)
    _add_fit_arguments(parser)
    _add_run_arguments(parser)
    _add_evaluation_arguments(parser)
    args = parser.parse_args(argv)
    for name in PATH_FLAGS:  # `~/runs/x` as a shell would
        if getattr(args, name):
            setattr(args, name, os.path.expanduser(getattr(args, name)))
    return args


def _add_model_arguments(parser):
    """The directions, the architecture and its overrides."""
    parser.add_argument(
        "--pairs", default=None, metavar="DIRECTIONS",
        help="several directions in one model, e.g. de-en,fr-en,en-de: each read from "
        "--corpus-dir/SOURCE-TARGET/ (or the other way round from TARGET-SOURCE/), a tag <2xx> "
        "in front of each source names the target language, one shared vocabulary balanced "
        "over the languages; --source-lang/--target-lang are not used (default: one "
        "direction, --source-lang -> --target-lang)",
    )  # fmt: skip
    parser.add_argument(
        "--pair-temperature", type=float, default=None, metavar="T",
        help="with --pairs: draw direction i with probability proportional to its pairs n_i "
        "to the power 1/T (default 1: in proportion; larger flattens toward equal shares)",
    )  # fmt: skip
    parser.add_argument(
        "--hparams", default=None,
        help="t2t hparams set name (default transformer_tiny; with --init-from, the init "
        "run's architecture: a set must give the same, and its training settings apply)",
    )  # fmt: skip
    parser.add_argument(
        "--hparams-override",
        default=None,
        metavar="K=V,...",
        help="HParams fields to set, each replacing only that field of the defaults, "
        f"{DEMO_OVERRIDES.replace(',', ', ')} (a short warm-up for small corpora; the "
        "set's own, 8000 steps and constant 2.0 for transformer_tiny, only when named); "
        "with --init-from: that run's settings instead, of which only training settings such "
        "as dropout, learning rate and max_length may change",
    )


def _add_fit_arguments(parser):
    """The length of the training, its batches, averaging and vocabulary."""
    parser.add_argument("--epochs", type=int, default=5, help="total epochs of the run (default 5)")
    parser.add_argument(
        "--steps-per-epoch", type=int, default=None, metavar="N",
        help="an epoch is N optimizer steps of an endless stream of passes over the training "
        "pairs, continued from epoch to epoch (validation, dev BLEU and checkpoints every N "
        "steps; for corpora too large to validate once a pass); default: a pass",
    )  # fmt: skip
    parser.add_argument(
        "--batch-tokens", type=int, default=4096, help="tokens per batch (default 4096)"
    )
    parser.add_argument(
        "--accumulate-steps", type=int, default=1, metavar="N",
        help="batches per optimizer update (gradient accumulation: the update uses the mean "
        "of their gradients and the learning-rate schedule counts updates; default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--ema", type=float, default=None, metavar="DECAY",
        help="keep a moving average of the weights with this decay (0 < DECAY < 1, e.g. "
        "0.999); the average gives dev BLEU, the final model and the export (default: "
        "off)",
    )  # fmt: skip
    parser.add_argument(
        "--vocab-size", type=int, default=1000, metavar="N",
        help="subwords of the SentencePiece vocabulary shared by both languages (of each "
        "language's with --separate-vocab; default 1000)",
    )  # fmt: skip
    parser.add_argument(
        "--separate-vocab", action="store_true",
        help="one SentencePiece vocabulary per language (each of --vocab-size) and untied "
        "source, target and softmax embeddings (default: t2t's one shared vocabulary and "
        "tied embeddings); not with --init-from, which keeps its run's",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer-model", default="unigram", choices=["unigram", "bpe"],
        help="the SentencePiece algorithm (default unigram; a bpe model cannot be exported "
        "to LiteRT, whose tokenizer implements unigram only)",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer-sample",
        type=int,
        default=1_000_000,
        metavar="N",
        help="train the tokenizer on a random sample of at most N pairs (N sentences a side; "
        "seeded by --seed), as SentencePiece's input_sentence_size (default 1,000,000)",
    )


def _add_run_arguments(parser):
    """Where and how the training runs: devices, dtypes, shapes, time, folders, LoRA."""
    parser.add_argument(
        "--strategy", default="auto",
        choices=["auto", "default", "mirrored", "multi_worker", "tpu"],
        help="the tf.distribute strategy (default auto: a TPU if one is found, else all "
        "GPUs, else the default strategy of one device)",
    )  # fmt: skip
    parser.add_argument(
        "--dtype-policy", dest="dtype_policy", default="auto",
        choices=POLICIES,
        help="Keras dtype policy of training (default auto: mixed_bfloat16 on a CPU with "
        "bfloat16 instructions when the step runs without XLA, as for dynamic and packed "
        "batches there, else float32); translation and the export compute in float32",
    )  # fmt: skip
    parser.add_argument(
        "--shapes", default="dynamic", choices=SHAPES,
        help="the training batches: dynamic (the default: length buckets, each batch padded "
        "to its longest pair; no XLA), buckets (a few padded lengths), max_length (one shape) "
        "or packed (several pairs per row of max_length, one shape, almost no padding); the "
        "fixed shapes compile the training step with XLA, except packed rows under "
        "--dtype-policy auto on a CPU with bfloat16 instructions (mixed_bfloat16 without "
        "XLA); packed rows learned more in a time-limited CPU run (benchmarks/README.md, "
        "enja.sh)",
    )  # fmt: skip
    parser.add_argument(
        "--max-train-minutes",
        type=float,
        default=None,
        help="stop training after this long (default: no limit)",
    )
    parser.add_argument("--output", help="the run folder (default: a new temporary folder)")
    parser.add_argument(
        "--init-from",
        help="start from this run folder's model and tokenizer (default: a new model)",
    )
    parser.add_argument(
        "--lora-rank", type=int, default=None, metavar="R",
        help="with --init-from: train only rank-R adapters (LoRA) on the attention "
        "projections; the model and the export hold the merged weights (default: off, "
        "every weight trains)",
    )  # fmt: skip
    parser.add_argument(
        "--lora-ffn", action="store_true",
        help="with --lora-rank: adapt the feed-forward networks' Dense layers too",
    )  # fmt: skip


def _add_evaluation_arguments(parser):
    """Dev and test evaluation, the test search, the corpus limits and the seed."""
    parser.add_argument(
        "--dev-sentences",
        type=int,
        default=200,
        help="dev sentences for BLEU each epoch (default 200; 0 = off)",
    )
    parser.add_argument(
        "--bleu-tokenize", choices=BLEU_TOKENIZERS, default=None,
        help="sacrebleu's tokenizer of dev and test BLEU (default: --target-lang's: "
        f"{BLEU_TOKENIZE_DEFAULTS}); recorded in the run folder",
    )  # fmt: skip
    parser.add_argument(
        "--early-stopping", type=int, default=None, metavar="PATIENCE",
        help="stop after PATIENCE epochs without a better dev BLEU (default: off)",
    )  # fmt: skip
    parser.add_argument(
        "--average-last", type=int, default=0, metavar="K",
        help="average the last K epochs' weights (kept if dev BLEU is not worse; "
        "default 0: off)",
    )  # fmt: skip
    parser.add_argument(
        "--beam-size", type=int, default=4, metavar="N",
        help="the beam of the test translation and the export, recorded for the commands "
        "that use the run (default 4; 1 = greedy)",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=float, default=None,
        help="beam search's length-penalty exponent (default 0.6); not with --beam-size 1",
    )  # fmt: skip
    parser.add_argument(
        "--limit-train", type=int, default=None, metavar="N",
        help="use only N train pairs (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--limit-test", type=int, default=None, metavar="N",
        help="evaluate only N test pairs (default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=0,
        help="seed of the initialization, the shuffling and the tokenizer's sample (default 0)",
    )  # fmt: skip


PATH_FLAGS = ("output", "init_from", "corpus_dir", "tsv")  # `~` is expanded in each
# The largest `--vocab-size`: 2**20 pieces, a softmax of a million columns.
MAX_VOCAB_SIZE = 1 << 20


def check_batch_memory(batch_tokens, vocab_size, memory_mb=None):
    """Refuses a `--batch-tokens` whose batch's logits (`batch_tokens` x `vocab_size`
    float32 values, the step's largest tensor) alone exceed the machine's memory
    (`memory_mb`; None: its physical memory, unchecked where the system does not say).

    >>> check_batch_memory(4096, 8000, memory_mb=1024)
    >>> check_batch_memory(10**9, 8000, memory_mb=1024)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `--batch-tokens` is too large ... take 29802.3 GiB of its 1.0 GiB, got ...
    """
    memory_mb = physical_memory_mb() if memory_mb is None else memory_mb
    logits = batch_tokens * vocab_size * 4  # bytes
    if memory_mb is not None and logits > memory_mb << 20:
        raise ValueError(
            "`--batch-tokens` is too large for this machine: a batch's logits (--batch-tokens "
            f"x --vocab-size float32 values) take {logits / 2**30:.1f} GiB of its "
            f"{memory_mb / 1024:.1f} GiB, got --batch-tokens={batch_tokens} with "
            f"--vocab-size={vocab_size}."
        )


def check_arguments(args):
    """Refuses every option that cannot work, with an error naming the flag and its value,
    before the corpus is read and the run folder is created or touched (so a bad command
    leaves nothing that would refuse the corrected one)."""
    for flag in ("epochs", "batch_tokens", "beam_size", "accumulate_steps", "tokenizer_sample"):
        _checks.check_positive_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    for flag in ("dev_sentences", "average_last", "seed"):
        _checks.check_non_negative_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    for flag in ("early_stopping", "limit_train", "limit_test", "lora_rank", "steps_per_epoch"):
        _checks.check_optional_positive_int(f"--{flag.replace('_', '-')}", getattr(args, flag))
    if args.vocab_size < 8:  # SentencePiece's smallest (pad, EOS, unknown, BOS and more)
        raise ValueError(f"`--vocab-size` must be at least 8, got --vocab-size={args.vocab_size}.")
    if args.vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(
            f"`--vocab-size` must be at most {MAX_VOCAB_SIZE}, got --vocab-size={args.vocab_size}."
        )
    check_batch_memory(args.batch_tokens, args.vocab_size)
    if args.seed >= 2**32:  # NumPy's seeds are 32-bit
        raise ValueError(f"`--seed` must be below 2**32, got --seed={args.seed}.")
    if args.alpha is not None:
        _checks.check_non_negative_float("--alpha", args.alpha)
        if args.beam_size == 1:  # greedy search has no length penalty: it would be ignored
            raise ValueError(
                f"`--alpha` is beam search's length penalty and --beam-size 1 searches "
                f"greedily: drop --alpha={args.alpha} or give --beam-size 2 or more."
            )
    if args.max_train_minutes is not None:
        _checks.check_positive_float("--max-train-minutes", args.max_train_minutes)
    if args.ema is not None:
        _checks.check_fraction("--ema", args.ema)
    if args.lora_rank is not None and args.init_from is None:
        raise ValueError(
            "`--lora-rank` fine-tunes a trained model and needs --init-from, got "
            f"--lora-rank={args.lora_rank} without --init-from."
        )
    if args.separate_vocab and args.init_from is not None:
        raise ValueError(
            "`--separate-vocab` makes new vocabularies; --init-from keeps its run's, got "
            f"--separate-vocab with --init-from={args.init_from!r}."
        )
    if args.lora_ffn and args.lora_rank is None:
        raise ValueError("`--lora-ffn` needs --lora-rank, got --lora-ffn without --lora-rank.")
    if args.strategy == "multi_worker" and args.max_train_minutes is not None:
        raise ValueError(  # each worker's clock would stop it at another step
            "`--max-train-minutes` cannot stop the workers of --strategy multi_worker at the "
            f"same step, got --max-train-minutes={args.max_train_minutes}."
        )
    if args.early_stopping is not None and args.dev_sentences == 0:
        raise ValueError(
            "`--early-stopping` needs dev BLEU, got --early-stopping="
            f"{args.early_stopping} with --dev-sentences=0."
        )
    for flag in PATH_FLAGS + FILE_FLAGS:
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise ValueError(
                f"`{flag_name(flag)}` must name a path, got {flag_name(flag)}={value!r}."
            )
    if check_pairs_arguments(args) is None:  # several directions: their folders are checked
        check_corpus_arguments(args)
    if args.init_from is not None:
        from tfblocks.translation.run_folder import run_language_codes, run_languages

        recorded = run_languages(args.init_from)
        # An M2M-100 / NLLB run takes any direction of its codes (`JobData.load_init`).
        any_direction = run_language_codes(args.init_from)[0] is not None
        if recorded not in (None, (args.source_lang, args.target_lang)) and not any_direction:
            raise ValueError(
                f"`--init-from` is a {recorded[0]}->{recorded[1]} run, got "
                f"--init-from={args.init_from!r} with --source-lang={args.source_lang!r} "
                f"--target-lang={args.target_lang!r}."
            )
        if not os.path.isfile(os.path.join(args.init_from, "model", "config.json")):
            raise ValueError(
                "`--init-from` must be a run folder of tfblocks-train or tfblocks-import (with "
                f"model/config.json), got --init-from={args.init_from!r}."
            )


def worker_output(output):
    """The run folder of this process under `--strategy multi_worker`: `output` for the
    chief (`cluster_task`), `OUTPUT-worker-N` beside it for worker N, so that the workers
    never share a folder (nor its lock) and a rerun continues each from the epoch they all
    finished together; without `--output` (None), a temporary folder for each."""
    from tfblocks.training.distribute import cluster_task

    chief, task = cluster_task()
    if chief or not output:
        return output
    return f"{os.path.normpath(output)}-{task}"


def check_hparams(hp, overrides, batch_tokens, separate_vocab=False):
    """Refuses HParams that `tfblocks-train` cannot train with (`hp` checked its own fields;
    None: those of the `--init-from` run, which the job checks)."""
    for field, flag, why in (
        ("vocab_size", "--vocab-size", " (the tokenizer sets it)"),
        ("accumulate_steps", "--accumulate-steps", ""),
    ):
        if field in overrides:
            raise ValueError(
                f"`--hparams-override` cannot set {field}{why}; use {flag}, got "
                f"{field}={overrides[field]!r}."
            )
    if hp is not None:
        from tfblocks.translation.job import check_max_length

        check_max_length(hp, batch_tokens)
    if separate_vocab and overrides.get("shared_embedding_and_softmax_weights"):
        raise ValueError(
            "`--separate-vocab` unties the embeddings: --hparams-override cannot set "
            "shared_embedding_and_softmax_weights=True with it."
        )


def main(argv=None):
    args = parse_args(argv)
    check_arguments(args)
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the reload)

    from tfblocks.translation import job
    from tfblocks.translation.progress import Timer
    from tfblocks.translation.run_folder import check_output

    # Everything that can be refused is refused before the run folder is created or touched.
    corpus = corpus_source(args)
    options = training_options(args, corpus)
    output = worker_output(args.output) if args.strategy == "multi_worker" else args.output
    if output:
        check_output(output)
    timer = Timer()
    with timer("data"):
        splits = corpus.read()
    print(options.recipe_line(), flush=True)
    return job.TrainingJob(options, splits, timer=timer).run(output)


def training_options(args, corpus=None):
    """The `TrainingOptions` that the (checked) arguments give, with their HParams
    overrides checked; `corpus` is their `CorpusSource` (None: made here)."""
    from tfblocks.models import hparams
    from tfblocks.models.hyperparameters import parse_overrides
    from tfblocks.training import get_strategy
    from tfblocks.translation.options import TrainingOptions

    search = beam_or_greedy(args.beam_size, args.alpha)
    corpus = corpus_source(args) if corpus is None else corpus
    options = TrainingOptions(
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        batch_tokens=args.batch_tokens,
        seed=args.seed,
        strategy=args.strategy,
        shapes=args.shapes,
        dtype_policy=args.dtype_policy,
        time_limit=args.max_train_minutes * 60 if args.max_train_minutes else None,
        dev_sentences=args.dev_sentences,
        bleu_tokenize=args.bleu_tokenize,
        early_stopping=args.early_stopping,
        average_last=args.average_last,
        ema_decay=args.ema,
        lora_rank=args.lora_rank,
        lora_ffn=args.lora_ffn,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        corpus=f"--pairs={args.pairs!r}" if args.pairs else corpus.origin("train"),
        hparams=args.hparams,
        hparams_override=args.hparams_override,
        vocab_size=args.vocab_size,
        tokenizer_model=args.tokenizer_model,
        tokenizer_sample=args.tokenizer_sample,
        separate_vocab=args.separate_vocab,
        accumulate_steps=args.accumulate_steps,
        init_from=args.init_from,
        search=search,
    )
    preset, override_text = options.recipe()
    overrides = parse_overrides(override_text)
    hp = None if args.init_from else hparams(preset, **overrides)  # --init-from: the job's
    check_hparams(hp, overrides, args.batch_tokens, args.separate_vocab)
    if args.strategy == "multi_worker":  # before any TensorFlow op: collectives need it first
        options = dataclasses.replace(options, strategy=get_strategy(args.strategy))
    return options


def run():
    """The console entry point of `tfblocks-train`."""
    # A loss that became NaN; BLEU's MeCab not installed.
    run_command(
        "tfblocks-train",
        main,
        (FloatingPointError, ImportError),
        interrupted="; rerunning the same command continues after the last finished epoch",
    )


if __name__ == "__main__":
    run()
