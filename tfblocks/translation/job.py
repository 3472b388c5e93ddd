"""The translation job: corpus → tokenizer → `fit`, epoch by epoch, in a durable run folder.

`tfblocks-train` (and `examples/translate.py`, which calls it) is a thin command line
over `train_run`. What the job keeps is described in `tfblocks.translation.run_folder`;
here is what it does with it:

- Each epoch is one `model.fit` call on a dataset shuffled with the seed and the epoch
  number, so epoch e sees the same batches whether the run went straight through or was
  stopped and continued. With `steps_per_epoch=N` an epoch is N steps of one endless
  stream of passes over the corpus (pass p shuffled from the seed and p), epoch e its
  steps [e·N, (e+1)·N): one `fit` goes through the epochs left on that stream, and a
  continued run starts it at step e·N by skipping the steps before (the input pipeline
  reads, tokenizes and batches them again, without training: time proportional to the
  data already trained on, spent once per continuation).
- After each finished epoch the model and optimizer state, the epoch's weights and the
  progress (epochs, total training time, history) are saved as one commit
  (`RunFolder.commit`): a kill at any moment leaves the folder at the last recorded
  epoch, with no file of a later one.
- A loss that is not finite (NaN or infinite) stops the run with a `FloatingPointError`
  naming the epoch and step; nothing of that epoch is saved.
- Rerunning the same command continues after the last finished epoch: after a crash,
  a `--max-train-minutes` stop, or a finished run given a larger `--epochs`.
- Validation: loss, token accuracy and the unsmoothed cross-entropy on the dev split
  (Keras), plus dev BLEU and chrF (sacrebleu) of greedy translations of up to
  `dev_sentences` dev sentences with the cached decoder, in the progress output and
  TensorBoard. `early_stopping` stops after that many epochs without a higher dev BLEU;
  the best epoch's weights are kept and become the final model. When dev BLEU ties, the
  later epoch is the best (its weights had more training); early stopping still counts
  from the last epoch that raised the BLEU.
- `average_last=K` averages the last K epochs' weights (t2t `avg_checkpoints`) and keeps
  the average when its dev BLEU is at least the best single epoch's.
- `ema_decay` keeps a moving average of the weights during training; the run's weights
  (dev BLEU, `best.npz`, `last.npz`, the checkpoints, the final model) are then the
  averages, while the training state keeps the trained weights and the average, so a
  continued run continues both. `lora_rank` fine-tunes low-rank adapters only
  (`tfblocks.training.lora`); the run's weights are then the merged kernels, in the
  layout of the model without adapters.

sacrebleu (the `examples` extra) is imported only when BLEU is computed.
"""

import dataclasses
import hashlib
import os
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from tfblocks import _checks
from tfblocks._files import write_json
from tfblocks.decoding import Greedy
from tfblocks.models.builders import build_transformer
from tfblocks.serving.savedmodel import Translator
from tfblocks.text import distribute_dataset, make_dataset
from tfblocks.text.corpus import StreamedPairs
from tfblocks.text.dataset import SHAPES
from tfblocks.training import averaged_weights, compile_transformer, get_strategy
from tfblocks.training.callbacks import EpochProgress, FiniteLoss, TimeLimit
from tfblocks.training.lora import enable_lora, merged_weights
from tfblocks.training.multi_worker import patch_keras
from tfblocks.training.precision import POLICIES, resolve_dtype_policy
from tfblocks.translation.curves import CURVES_FILE, plot_curves
from tfblocks.translation.run_folder import assign_weights, average_weights, load_weights

# The demo's defaults: a shorter warm-up and a lower constant than t2t's 8000 / 2.0,
# which are tuned for hundreds of thousands of steps; peak rate ≈ 2.2e-3 at d=128.
DEMO_OVERRIDES = "learning_rate_warmup_steps=200,learning_rate_constant=0.35,max_length=32"
# Strategies under which each worker reads its own shard of the training pairs and each
# replica takes whole batches from it (`distribute_dataset`); under the others (the
# default strategy, one device) the training input is `make_dataset`'s, as it is.
SHARDED_INPUT = (
    tf.distribute.MirroredStrategy,
    tf.distribute.MultiWorkerMirroredStrategy,
    tf.distribute.TPUStrategy,
)


class Timer:
    """Wall time of named phases: `with timer("train"): ...`, then `timer.seconds`."""

    def __init__(self):
        self.seconds = {}

    def __call__(self, phase):
        timer = self

        class _Phase:
            def __enter__(self):
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                elapsed = time.perf_counter() - self.start
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + elapsed

        return _Phase()


def corpus_fingerprint(pairs):
    """A short SHA-256 of the pairs, to tell whether a run folder saw the same corpus (a
    `StreamedPairs`: its own, from its files' sizes, first and last MiB)."""
    if isinstance(pairs, StreamedPairs):
        return pairs.fingerprint()
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(source.encode("utf-8") + b"\t" + target.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """How `train_run` trains (what may change between reruns of one run folder).

    Attributes:
        epochs: total epochs of the run (a rerun with more continues).
        steps_per_epoch: None (an epoch is a pass over the training pairs), or N: an
            epoch is N optimizer steps of an endless stream of passes (pass p shuffled
            from `seed` and p), epoch e taking the stream's steps [e·N, (e+1)·N). A
            continued run starts the stream at its first epoch's step (reading and
            batching the steps before it, without training); a run folder keeps the
            value it was trained with.
        batch_tokens: token budget of a training step, over all replicas under a
            strategy (each of R replicas gets `batch_tokens // R`).
        seed: seed of the initialisation and of every epoch's shuffle.
        strategy: a `get_strategy` kind or a `tf.distribute.Strategy`.
        shapes: the batches (`make_dataset(shapes=...)`): `"dynamic"` (length buckets,
            each batch padded to its longest pair), `"buckets"` (a few padded lengths),
            `"max_length"` (one shape) or `"packed"` (several pairs per row, one shape).
            The fixed-shape modes compile the training step with XLA (once per shape).
        dtype_policy: `"auto"` (`mixed_bfloat16` for a step without XLA on a CPU with
            bfloat16 instructions, else float32; `tfblocks.training.precision`),
            `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`. Only training uses it:
            dev BLEU, the returned model and its exports compute in float32.
        time_limit: seconds of training in this invocation (None = no limit).
        dev_sentences: dev sentences translated for dev BLEU/chrF after each epoch (0 = off).
            The epoch with the highest dev BLEU gives `best.npz`; on a tie the later one.
        early_stopping: stop after this many epochs without a higher dev BLEU (None = off).
        average_last: average the last K epochs' weights at the end (0 = off).
        keep_checkpoints: epoch checkpoints kept (at least `average_last`).
        ema_decay: None, or keep a moving average of the weights with this decay
            (0 < d < 1), which then gives dev BLEU, the checkpoints and the final model;
            Keras' validation loss and accuracy stay those of the trained weights.
        lora_rank: None, or train only rank-r adapters on the attention projections
            (LoRA, `tfblocks.training.lora`), the rest of the model frozen; meant for
            fine-tuning (`init_weights`).
        lora_ffn: with `lora_rank`, adapt the feed-forward networks' Dense layers too.
        verbose: `model.fit` verbosity.
    """

    epochs: int
    steps_per_epoch: int | None = None
    batch_tokens: int = 4096
    seed: int = 0
    strategy: object = "auto"
    shapes: str = "dynamic"
    dtype_policy: str = "auto"
    time_limit: float | None = None
    dev_sentences: int = 200
    early_stopping: int | None = None
    average_last: int = 0
    keep_checkpoints: int = 5
    ema_decay: float | None = None
    lora_rank: int | None = None
    lora_ffn: bool = False
    verbose: int = 2

    def __post_init__(self):
        _checks.check_positive_int("epochs", self.epochs)
        _checks.check_optional_positive_int("steps_per_epoch", self.steps_per_epoch)
        _checks.check_positive_int("batch_tokens", self.batch_tokens)
        _checks.check_non_negative_int("dev_sentences", self.dev_sentences)
        _checks.check_non_negative_int("average_last", self.average_last)
        _checks.check_positive_int("keep_checkpoints", self.keep_checkpoints)
        _checks.check_choice("dtype_policy", self.dtype_policy, POLICIES)
        _checks.check_choice("shapes", self.shapes, SHAPES)
        if self.early_stopping is not None:
            _checks.check_positive_int("early_stopping", self.early_stopping)
            if not self.dev_sentences:
                raise ValueError("`early_stopping` needs dev BLEU: set `dev_sentences` > 0.")
        if self.time_limit is not None:
            _checks.check_positive_float("time_limit", self.time_limit)
        if self.ema_decay is not None:
            _checks.check_fraction("ema_decay", self.ema_decay)
        _checks.check_optional_positive_int("lora_rank", self.lora_rank)
        _checks.check_bool("lora_ffn", self.lora_ffn)
        if self.lora_ffn and self.lora_rank is None:
            raise ValueError("`lora_ffn` needs `lora_rank`, got lora_ffn=True, lora_rank=None.")


def _dev_scores(translator, pairs):
    from tfblocks.translation import evaluation  # sacrebleu: only where BLEU is computed

    metrics, _ = evaluation.evaluate(translator, pairs)
    return {"dev_bleu": metrics["bleu"], "dev_chrf": metrics["chrf"]}


def train_run(
    folder, splits, tokenizer, hp, options, init_weights=None, callbacks=(), log=print,
    target_tokenizer=None,
):  # fmt: skip
    """Trains (or continues) the run in `folder`; returns `(model, report)`.

    Args:
        folder: a `RunFolder`.
        splits: `{"train", "dev", ...}` lists of `(source, target)` pairs.
        tokenizer: the shared `SubwordTokenizer` (the source side's with
            `target_tokenizer`).
        hp: the `HParams`.
        options: `TrainingOptions`.
        init_weights: optional .npz of weights to start from (fine-tuning) when the
            folder has no finished epoch yet.
        callbacks: further Keras callbacks for every epoch's `fit`.
        log: where progress lines go.
        target_tokenizer: the target side's tokenizer (separate vocabularies); None:
            `tokenizer` is shared.

    Returns:
        The float32 model holding the final weights (best dev BLEU, or their average, or
        the last epoch's), and a report dict: `epochs`, `train_seconds` (totals across
        reruns), `history`, `best_epoch`, `final_weights`, `stopped`, `dtype_policy`
        (the one training used), `trainable_parameters` and, with averaging,
        `dev_bleu_averaged` / `averaged_epochs`.
    """
    keras.utils.set_random_seed(options.seed)
    strategy = options.strategy
    strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
    sharded = isinstance(strategy, SHARDED_INPUT)
    if sharded:
        patch_keras()  # Keras' `fit` on replicas' batches of different shapes
    xla = options.shapes != "dynamic"  # fixed shapes: one XLA program per shape
    policy = resolve_dtype_policy(options.dtype_policy, xla)
    progress = folder.progress()
    _check_steps_per_epoch(folder, progress, options.steps_per_epoch)
    with strategy.scope():
        model = build_transformer(hp, dtype=policy)
        if init_weights is not None and not progress["epochs"]:
            load_weights(model, init_weights)  # before the adapters: the plain layout
        if options.lora_rank:
            adapted = enable_lora(model, options.lora_rank, options.lora_ffn)
        compile_transformer(model, hp, jit_compile=xla, ema_decay=options.ema_decay)
    # Translation (dev BLEU, the final model, its exports) computes in float32 on a plain
    # model: under a mixed policy, a moving average or adapters it runs on a float32 twin
    # without adapters that gets the run's weights (`sync`) before use.
    plain = policy == "float32" and options.ema_decay is None and not options.lora_rank
    serving = model if plain else float32_twin(hp, model)
    if options.dtype_policy == "auto" and policy != "float32":
        log(f"training under {policy} (dtype_policy='auto': this CPU has bfloat16 "
            "instructions and the step runs without XLA); translating in float32")  # fmt: skip
    if progress["epochs"]:
        folder.restore(model)  # weights and optimizer state (built)
        log(f"continuing {folder.path} after epoch {progress['epochs']}")
    elif init_weights is not None:
        log(f"starting from the weights of {init_weights}")
    trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    if options.lora_rank:
        log(f"LoRA rank {options.lora_rank} on {len(adapted)} projections: {trainable:,} "
            f"trainable parameters of {serving.count_params():,}")  # fmt: skip

    def sync():
        """The run's weights now, given to the serving twin: `{path: array}` in the plain
        model's layout, the trained ones or their moving average, adapters merged."""
        averaged = averaged_weights(model) if options.ema_decay is not None else None
        weights = merged_weights(model, averaged)
        if serving is not model:
            assign_weights(serving, weights)
        return weights

    target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer

    steps_per_epoch = options.steps_per_epoch

    def train_input(seed, start_step=0):
        """An epoch's dataset; with `steps_per_epoch`, the endless stream from `start_step`."""
        args = (splits["train"], tokenizer, target_tokenizer)
        kwargs = dict(batch_tokens=options.batch_tokens, max_length=hp.max_length, seed=seed,
                      shapes=options.shapes, repeat=steps_per_epoch is not None)  # fmt: skip
        if sharded:  # each worker reads its shard; the budget is the whole step's
            return distribute_dataset(strategy, *args, start_step=start_step, **kwargs)
        data = make_dataset(*args, **kwargs)
        return data.skip(start_step) if start_step else data

    dev = make_dataset(
        splits["dev"], tokenizer, target_tokenizer, batch_tokens=options.batch_tokens,
        max_length=hp.max_length, shuffle=False, shapes=options.shapes,
    )  # fmt: skip
    dev_pairs = splits["dev"][: options.dev_sentences]
    translator = Translator(serving, tokenizer, target_tokenizer, hp.max_length, search=Greedy())

    logdir = folder.join("logs")
    writer = tf.summary.create_file_writer(os.path.join(logdir, "validation"))
    run = {"spent": 0.0, "stopped": "epochs"}  # this invocation's training time, why it ended
    first = progress["epochs"]

    def end_epoch(epoch, logs, elapsed, guard, limit):
        """Records a finished (or time-cut) epoch; returns why training stops, or None."""
        if guard.failure is not None:
            raise _non_finite(guard.failure, progress["epochs"])  # nothing of it committed
        run["spent"] += elapsed
        progress["train_seconds"] += elapsed
        keep = max(options.keep_checkpoints, options.average_last)
        weights = sync()  # the serving model's now: dev BLEU and the .npz files
        if limit is not None and limit.stopped_early:
            # The cut epoch counts as time, not as an epoch: a rerun repeats it from the
            # saved state. Its weights still compete for the best dev BLEU.
            best = False
            if dev_pairs:
                bleu = _dev_scores(translator, dev_pairs)["dev_bleu"]
                log(f"dev BLEU of the cut epoch {epoch + 1}: {bleu}")
                best = _record_bleu(progress, bleu, epoch + 1)
            folder.commit(model, progress, best=best, keep=keep, weights=weights)
            return "time limit"
        logs = dict(logs)
        if dev_pairs:
            logs.update(_dev_scores(translator, dev_pairs))
            with writer.as_default():
                tf.summary.scalar("epoch_bleu", logs["dev_bleu"], step=epoch)
                tf.summary.scalar("epoch_chrf", logs["dev_chrf"], step=epoch)
            writer.flush()
            log(f"epoch {epoch + 1}: dev BLEU {logs['dev_bleu']} chrF {logs['dev_chrf']} "
                f"({len(dev_pairs)} sentences, greedy)")  # fmt: skip
        progress["epochs"] = epoch + 1
        progress["history"].append({"epoch": epoch + 1, **logs})
        best = bool(dev_pairs) and _record_bleu(progress, logs["dev_bleu"], epoch + 1)
        # One commit: a kill before it repeats the epoch, leaving no file of it behind.
        folder.commit(
            model, progress, epoch=epoch + 1, best=best, keep=keep, weights=weights,
            variables=bool(options.lora_rank),  # its .h5 keeps merged kernels, no adapters
        )  # fmt: skip
        if options.time_limit:
            to_go = options.epochs - epoch - 1
            log(_time_left(run["spent"], options.time_limit, epoch + 1 - first, to_go))
        improved = progress["improved_epoch"] or progress["best_epoch"]
        if (
            options.early_stopping
            and improved is not None
            and progress["epochs"] - improved >= options.early_stopping
        ):
            return "early stopping"
        return None

    def fit_callbacks():
        """The callbacks of a `fit`: TensorBoard, progress, the caller's, the NaN guard and
        the time limit (what is left of it), and the guard and limit themselves."""
        guard = FiniteLoss()
        left = options.time_limit and max(options.time_limit - run["spent"], 1e-3)
        limit = TimeLimit(left) if left else None
        listed = [
            keras.callbacks.TensorBoard(logdir, write_graph=False),
            EpochProgress(options.epochs),
            *callbacks,
            guard,
        ]
        return [*listed, *([limit] if limit else [])], guard, limit

    if options.steps_per_epoch is not None:
        # One `fit` for the epochs left, on one endless stream of passes that it keeps
        # iterating from epoch to epoch; each epoch is recorded at its end (`_EndEpoch`).
        # A continued run starts the stream at the step where its first epoch starts.
        if first < options.epochs:
            listed, guard, limit = fit_callbacks()
            ending = _EndEpoch(lambda e, logs, seconds: end_epoch(e, logs, seconds, guard, limit))
            data = train_input(options.seed * 100_003, first * options.steps_per_epoch)
            model.fit(
                data, validation_data=dev, initial_epoch=first, epochs=options.epochs,
                steps_per_epoch=options.steps_per_epoch, callbacks=[*listed, ending],
                shuffle=False, verbose=options.verbose,
            )  # fmt: skip
            run["stopped"] = ending.stopped or "epochs"
    else:
        for epoch in range(first, options.epochs):  # one `fit` and one dataset each
            listed, guard, limit = fit_callbacks()
            data = train_input(options.seed * 100_003 + epoch)
            start = time.perf_counter()
            with warnings.catch_warnings():
                # A streamed corpus has no known number of batches: its epoch ends when
                # the files do, which Keras reports as "Your input ran out of data".
                if isinstance(splits["train"], StreamedPairs):
                    warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
                history = model.fit(
                    data, validation_data=dev, initial_epoch=epoch, epochs=epoch + 1,
                    callbacks=listed, shuffle=False, verbose=options.verbose,
                )  # fmt: skip
            elapsed = time.perf_counter() - start
            logs = {k: float(v[-1]) for k, v in history.history.items()}
            stop = end_epoch(epoch, logs, elapsed, guard, limit)
            if stop is not None:
                run["stopped"] = stop
                break
    stopped = run["stopped"]
    log(_stop_line(stopped, progress, options))
    sync()
    report = _final_weights(folder, serving, translator, dev_pairs, progress, options)
    report.update(
        stopped=stopped, train_seconds=round(progress["train_seconds"], 1), dtype_policy=policy,
        trainable_parameters=trainable,
    )  # fmt: skip
    report["curves"] = _write_curves(folder, report, log)
    return serving, report


class _EndEpoch(keras.callbacks.Callback):
    """Calls `end(epoch, logs, seconds)` at the end of each epoch of a `fit` over several
    epochs (last of its callbacks: after validation and the others); a reason to stop
    that it returns stops `fit` and is kept in `stopped`."""

    def __init__(self, end):
        super().__init__()
        self.end = end
        self.stopped = None

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = {k: float(v) for k, v in (logs or {}).items()}
        self.stopped = self.end(epoch, logs, time.perf_counter() - self.start)
        if self.stopped is not None:
            self.model.stop_training = True


def _check_steps_per_epoch(folder, progress, steps_per_epoch):
    """Refuses to continue a run with another `steps_per_epoch` (its epochs would cut the
    stream elsewhere); records it in `progress` (committed with the next epoch)."""
    recorded = progress.get("steps_per_epoch")
    if progress["epochs"] and recorded != steps_per_epoch:
        raise ValueError(
            f"`steps_per_epoch` must stay what the run in {folder.path!r} was trained with "
            f"(steps_per_epoch={recorded!r}), got steps_per_epoch={steps_per_epoch!r}."
        )
    if steps_per_epoch is not None:
        progress["steps_per_epoch"] = steps_per_epoch


def _record_bleu(progress, bleu, epoch):
    """Records `epoch`'s dev BLEU in `progress`; returns whether its weights become the
    best. A tie makes the later epoch the best (it trained longer at equal BLEU); only a
    higher BLEU counts as an improvement for early stopping."""
    best = progress["best_bleu"]
    if best is None or bleu > best:
        progress["improved_epoch"] = epoch
    if best is None or bleu >= best:
        progress["best_bleu"], progress["best_epoch"] = bleu, epoch
        return True
    return False


def _non_finite(failure, recorded):
    """The error that stops a run whose loss stopped being a finite number."""
    epoch, step, loss = failure
    return FloatingPointError(
        f"training stopped: the loss became {loss} in epoch {epoch}, step {step}; nothing "
        f"of epoch {epoch} was saved, the run folder keeps epoch {recorded}. Lower the "
        "learning rate (--hparams-override learning_rate_constant=...) or check the data."
    )


def _time_left(spent, limit, epochs_done, epochs_to_go):
    """The line printed after each epoch under a time limit (times of this invocation)."""
    left = max(limit - spent, 0.0)
    fit = min(epochs_to_go, int(left // (spent / epochs_done))) if epochs_done else 0
    return (
        f"training time {spent / 60:.1f} of {limit / 60:.1f} min, {left / 60:.1f} min left: "
        f"about {fit} of the {epochs_to_go} remaining epochs fit"
    )


def _stop_line(stopped, progress, options):
    """One line: why training stopped."""
    done = progress["epochs"]
    if stopped == "time limit":
        return (
            f"training stopped: time limit of {options.time_limit / 60:.1f} min reached in "
            f"epoch {done + 1} ({done} of {options.epochs} epochs done); rerun the command "
            "to continue"
        )
    if stopped == "early stopping":
        return (
            f"training stopped: early stopping after epoch {done}, no better dev BLEU for "
            f"{options.early_stopping} epochs (best epoch {progress['best_epoch']})"
        )
    return f"training stopped: all {options.epochs} epochs done"


def _write_curves(folder, report, log):
    """Writes the run's `curves.png`; returns its path, or None without matplotlib."""
    try:
        import matplotlib  # noqa: F401  (the `examples` extra)
    except ImportError:
        log("curves.png not written: matplotlib is missing (pip install 'tfblocks[examples]')")
        return None
    return plot_curves(
        folder.join(CURVES_FILE),
        report["history"],
        best_epoch=report["best_epoch"],
        averaged_epochs=report.get("averaged_epochs"),
        title=f"{os.path.basename(os.path.normpath(folder.path))}: {report['final_weights']}",
    )


def float32_twin(hp, model):
    """A float32 `Transformer` of the same architecture without adapters, built, holding
    `model`'s weights (any LoRA adapters merged; variable paths equal, so run-folder
    weights load into either)."""
    twin = build_transformer(hp, name=model.name, dtype="float32")
    ids = tf.ones([1, 2], tf.int32)
    twin({"inputs": ids, "targets": ids})
    assign_weights(twin, merged_weights(model))
    return twin


def _final_weights(folder, model, translator, dev_pairs, progress, options):
    """Loads the weights the run ends with; returns the report's description of them."""
    report = {
        "epochs": progress["epochs"],
        "history": progress["history"],
        "best_epoch": progress["best_epoch"],
        "final_weights": "last",
    }
    if progress["best_epoch"] is not None and os.path.exists(folder.join("best.npz")):
        load_weights(model, folder.join("best.npz"))
        report["final_weights"] = f"best (epoch {progress['best_epoch']})"
    elif os.path.exists(folder.join("last.npz")):
        load_weights(model, folder.join("last.npz"))  # not a cut epoch's weights
        report["final_weights"] = f"last (epoch {progress['epochs']})"
    checkpoints = folder.checkpoints()[-options.average_last :] if options.average_last else []
    if len(checkpoints) >= 2:
        kept = [p for _, p in checkpoints]
        current = [v.numpy() for v in model.weights]
        average_weights(model, kept)
        epochs = [e for e, _ in checkpoints]
        report["averaged_epochs"] = epochs
        if dev_pairs:
            averaged = _dev_scores(translator, dev_pairs)["dev_bleu"]
            report["dev_bleu_averaged"] = averaged
            if averaged >= (progress["best_bleu"] or 0.0):
                report["final_weights"] = f"average of epochs {epochs[0]}–{epochs[-1]}"
            else:
                for variable, value in zip(model.weights, current, strict=True):
                    variable.assign(value)
        else:
            report["final_weights"] = f"average of epochs {epochs[0]}–{epochs[-1]}"
    return report


def write_metrics(output_dir, metrics):
    """Writes `metrics.json` into `output_dir` atomically; returns its path."""
    os.makedirs(output_dir, exist_ok=True)
    return write_json(os.path.join(output_dir, "metrics.json"), metrics)
