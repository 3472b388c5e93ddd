"""`tfblocks-train`: train a translator in a run folder, evaluate it, export it, reload it.

With no arguments (what `make demo` runs, through `examples/translate.py`) it trains
`transformer_tiny` on the embedded Japanese→English phrasebook (no download), reports
BLEU, chrF and exact match on the held-out test split, translates a few sentences
including 今日のランチはカレーだ。, writes the model (KerasHub preset) and the SavedModel
(`export/1`), reloads the SavedModel and translates again.

`--output DIR` is a durable run folder (layout: `tfblocks.translation.run_folder`).
Rerunning the same command continues after the last finished epoch (after a crash, a
`--max-train-minutes` stop, or with a larger `--epochs`); `--init-from OTHER_RUN` starts
from another run's model and tokenizer (fine-tuning on new data). A folder made with another corpus,
vocabulary or architecture is an error, never silently reused.

Examples:
  tfblocks-train
  tfblocks-train --corpus-dir ../shared/data/small_parallel_enja \\
      --hparams transformer_small --epochs 20 --output runs/enja
  tfblocks-train --corpus-dir new_domain --init-from runs/enja --epochs 5 --output runs/ft
"""

import argparse
import os
import tempfile

from tfblocks.text.dataset import SHAPES
from tfblocks.training.precision import POLICIES
from tfblocks.translation.console import run_command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfblocks-train",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--corpus-dir", help="folder with {train,dev,test}.{ja,en}")
    data.add_argument("--tsv", help="Tatoeba/manythings file: English<TAB>Japanese<TAB>...")
    parser.add_argument("--hparams", default="transformer_tiny", help="t2t preset name")
    parser.add_argument(
        "--hparams-override",
        default=None,
        help="comma-separated key=value HParams overrides (default: the demo's short warm-up, "
        "learning_rate_warmup_steps=200,learning_rate_constant=0.35,max_length=32)",
    )
    parser.add_argument("--epochs", type=int, default=5, help="total epochs of the run")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens per batch")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--tokenizer-model", default="bpe", choices=["bpe", "unigram"])
    parser.add_argument(
        "--strategy", default="auto", choices=["auto", "default", "mirrored", "multi_worker", "tpu"]
    )
    parser.add_argument(
        "--dtype-policy", dest="dtype_policy", default="auto",
        choices=POLICIES,
        help="Keras dtype policy of training (default auto: mixed_bfloat16 on a CPU with "
        "bfloat16 instructions when the step runs without XLA, else float32); translation "
        "and the export compute in float32",
    )  # fmt: skip
    parser.add_argument(
        "--shapes", default="dynamic", choices=SHAPES,
        help="the training batches: dynamic (length buckets, each batch padded to its longest "
        "pair; no XLA), buckets (a few padded lengths), max_length (one shape) or packed "
        "(several pairs per row of max_length, one shape, almost no padding); the fixed shapes "
        "compile the training step with XLA",
    )  # fmt: skip
    parser.add_argument(
        "--max-train-minutes", type=float, default=None, help="stop training after this long"
    )
    parser.add_argument("--output", help="the run folder (default: a new temporary folder)")
    parser.add_argument("--init-from", help="start from this run folder's model and tokenizer")
    parser.add_argument(
        "--dev-sentences", type=int, default=200, help="dev sentences for BLEU each epoch (0=off)"
    )
    parser.add_argument(
        "--early-stopping", type=int, default=None, metavar="PATIENCE",
        help="stop after PATIENCE epochs without a better dev BLEU",
    )  # fmt: skip
    parser.add_argument(
        "--average-last", type=int, default=0, metavar="K",
        help="average the last K epochs' weights (kept if dev BLEU is not worse)",
    )  # fmt: skip
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--limit-train", type=int, default=None, help="use only N train pairs")
    parser.add_argument("--limit-test", type=int, default=None, help="evaluate only N pairs")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops for the reload)

    from tfblocks import text
    from tfblocks._files import replace_file
    from tfblocks.decoding import beam_or_greedy
    from tfblocks.models import hparams, load_preset, save_preset
    from tfblocks.models.hparams import parse_overrides
    from tfblocks.serving import Translator
    from tfblocks.translation import evaluation, job
    from tfblocks.translation.run_folder import RunFolder

    override_text = job.DEMO_OVERRIDES if args.hparams_override is None else args.hparams_override
    # A bad preset, override field or value is refused before anything is written.
    overrides = parse_overrides(override_text)
    hparams(args.hparams, **overrides)
    folder = RunFolder(args.output or tempfile.mkdtemp(prefix="tfblocks-train-"))
    timer = job.Timer()

    with timer("data"):
        splits = text.load_splits(args.corpus_dir, args.tsv, seed=args.seed)
        splits["train"] = splits["train"][: args.limit_train]
        splits["test"] = splits["test"][: args.limit_test]
        init = None
        if args.init_from:
            init = load_preset(os.path.join(args.init_from, "model"))
        settings = {
            "corpus": job.corpus_fingerprint(splits["train"]),
            "vocab_size": args.vocab_size,
            "tokenizer_model": args.tokenizer_model,
            "hparams": args.hparams,
            "hparams_override": overrides,
            "init_from": os.path.abspath(args.init_from) if args.init_from else None,
            "seed": args.seed,
        }
        folder.check_settings(settings, must_match=list(settings))
        tokenizer_path = folder.join("tokenizer.model")
        if init is not None:
            tokenizer = init.tokenizer
        elif os.path.exists(tokenizer_path):
            tokenizer = text.SubwordTokenizer.load(tokenizer_path)
        else:
            tokenizer, _ = text.train_tokenizers(
                splits["train"], vocab_size=args.vocab_size, model_type=args.tokenizer_model
            )
        if not os.path.exists(tokenizer_path):
            replace_file(tokenizer_path, tokenizer.save)
    sizes = {k: len(v) for k, v in splits.items()}
    print(f"pairs {sizes}; shared vocabulary {tokenizer.vocabulary_size} ({args.tokenizer_model})")

    hp = hparams(args.hparams, vocab_size=tokenizer.vocabulary_size, **overrides)
    init_weights = None
    if init is not None:
        if init.model.get_config()["vocab_size"] != hp.vocab_size:
            raise ValueError("the --init-from model's vocabulary does not match its tokenizer")
        init_weights = folder.save_weights(init.model, "init.npz")
    options = job.TrainingOptions(
        epochs=args.epochs,
        batch_tokens=args.batch_tokens,
        seed=args.seed,
        strategy=args.strategy,
        shapes=args.shapes,
        dtype_policy=args.dtype_policy,
        time_limit=args.max_train_minutes * 60 if args.max_train_minutes else None,
        dev_sentences=args.dev_sentences,
        early_stopping=args.early_stopping,
        average_last=args.average_last,
    )
    with timer("train"):
        model, report = job.train_run(folder, splits, tokenizer, hp, options, init_weights)
    strategy = beam_or_greedy(args.beam_size, args.alpha)
    translator = Translator(model, tokenizer, tokenizer, hp.max_length, strategy=strategy)
    with timer("evaluate"):
        metrics, hypotheses = evaluation.evaluate(translator, splits["test"])
    print("test translations (first 3):")
    for (source, reference), hypothesis in list(zip(splits["test"], hypotheses, strict=True))[:3]:
        print(f"  {source}\n    reference:   {reference}\n    translation: {hypothesis}")
    samples = [text.RUNNING_EXAMPLE[0]] + [source for source, _ in splits["test"][:2]]

    with timer("export"):
        save_preset(model, tokenizer, folder.join("model"), hp)
        path = translator.export(folder.join("export", "1"))
    with timer("reload"):
        reloaded = tf.saved_model.load(path).signatures["serving_default"]
        again = reloaded(text=tf.constant(samples))["translation"].numpy()
    in_memory = translator(samples).numpy()
    print("translations (in memory | reloaded SavedModel):")
    for sample, a, b in zip(samples, in_memory, again, strict=True):
        print(f"  {sample} -> {a.decode()} | {b.decode()}")

    seconds = {k: round(v, 1) for k, v in timer.seconds.items()}
    seconds["train"] = report["train_seconds"]  # all reruns of this folder together
    metrics.update(
        preset=args.hparams,
        hparams_override=override_text,
        epochs=report["epochs"],
        history=report["history"],
        best_epoch=report["best_epoch"],
        final_weights=report["final_weights"],
        dtype_policy=report["dtype_policy"],
        stopped=report["stopped"],
        final_loss=report["history"][-1]["loss"] if report["history"] else None,
        parameters=model.count_params(),
        samples={t: b.decode() for t, b in zip(samples, again, strict=True)},
        reload_matches=bool((in_memory == again).all()),
        seconds=seconds,
    )
    for key in ("dev_bleu_averaged", "averaged_epochs"):
        if key in report:
            metrics[key] = report[key]
    metrics_path = job.write_metrics(folder.path, metrics)
    phrasebook = args.corpus_dir is None and args.tsv is None
    print(summary(metrics, report, folder, path, metrics_path, exact_match=phrasebook))
    return metrics


STOPPED = {
    "epochs": "all epochs done",
    "time limit": "stopped by the time limit; rerun the command to continue",
    "early stopping": "stopped early: no better dev BLEU",
}


def summary(metrics, report, folder, export_path, metrics_path, exact_match=True):
    """The closing summary of `tfblocks-train`: scores, epochs, time and where things are.

    `exact_match` shows the exact-match rate (meaningful on the phrasebook's short,
    templated sentences, near 0 on real corpora).
    """
    scores = f"test BLEU {metrics['bleu']}  chrF {metrics['chrf']}"
    if exact_match:
        scores += f"  exact match {metrics['exact_match']:.4f}"
    best = report["best_epoch"]
    lines = [
        "summary",
        f"  {scores}  ({metrics['sentences']} sentences; {metrics['bleu_signature']})",
        f"  {report['epochs']} epochs, {report['train_seconds']} s of training in all "
        f"({STOPPED[report['stopped']]}); best dev-BLEU epoch: "
        f"{'none (no dev BLEU)' if best is None else best}",
        f"  final weights: {report['final_weights']}",
        f"  model:   {folder.join('model')}",
        f"  export:  {export_path}",
        f"  curves:  {report['curves'] or 'not written (no matplotlib)'}",
        f"  metrics: {metrics_path}",
    ]
    return "\n".join(lines)


def run():
    """The console entry point of `tfblocks-train`."""
    run_command("tfblocks-train", main, (ValueError,))


if __name__ == "__main__":
    run()
