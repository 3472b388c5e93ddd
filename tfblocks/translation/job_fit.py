"""The fit part of a `TrainingJob`: the model that trains, its epochs, the final weights.

- Each epoch is one `model.fit` call on a dataset shuffled with the seed and the epoch
  number, so epoch e sees the same batches whether the run went straight through or was
  stopped and continued. With `steps_per_epoch=N` an epoch is N steps of one endless
  stream of passes over the corpus (pass p shuffled from the seed and p), epoch e its
  steps [e·N, (e+1)·N): one `fit` goes through the epochs left on that stream, and a
  continued run starts it at step e·N by skipping the steps before (the input pipeline
  reads, tokenizes and batches them again, without training: time proportional to the
  data already trained on, spent once per continuation).
- After each finished epoch the model, optimizer and dropout seed state, the epoch's
  weights and the progress (epochs, total training time, history) are saved as one
  commit (`RunFolder.commit`): a kill at any moment leaves the folder at the last
  recorded epoch, with no file of a later one. A continued run draws the dropout masks
  that a straight run would.
- A loss that is not finite (NaN or infinite) stops the run with a `FloatingPointError`
  naming the epoch and step; nothing of that epoch is saved.
- Rerunning the same command continues after the last finished epoch: after a crash,
  a `--max-train-minutes` stop, or a finished run given a larger `--epochs`.
- A time limit counts only completed epochs: the epoch it cuts is training time, not an
  epoch (not in the history, never the best epoch; the rerun repeats it), and no epoch
  starts once the time is used up. Each epoch's history record holds its training
  seconds (`seconds`), the run's optimizer updates at its end (`updates`) and the
  learning rate of the next one (`learning_rate`), which its line also shows.
- A run whose updates end before the learning-rate warm-up does (the rate never reaches
  its peak) says so in one line (`progress.warmup_warning`): at its start when the
  updates of an epoch are known (`steps_per_epoch`), after its first epoch otherwise;
  the report keeps `updates` and `warmup_steps` for the summary.
- `early_stopping` stops after that many epochs without a higher dev BLEU; the best
  epoch's weights are kept and become the final model (`job_evaluation.record_bleu`
  says which epoch is the best).
- `average_last=K` averages the last K epochs' weights (t2t `avg_checkpoints`) and keeps
  the average when its dev BLEU is at least the best single epoch's.
- `ema_decay` keeps a moving average of the weights during training; the run's weights
  (dev BLEU, `best.npz`, `last.npz`, the checkpoints, the final model) are then the
  averages, while the training state keeps the trained weights and the average, so a
  continued run continues both. `lora_rank` fine-tunes low-rank adapters only
  (`tfblocks.training.lora`); the run's weights are then the merged kernels, in the
  layout of the model without adapters.
- The run's `curves.png` draws its history, rewritten at the end of every run of the
  folder.
"""

import os
import time
import warnings
import weakref

import keras
import numpy as np
import tensorflow as tf

from tfblocks.models.builders import build_transformer
from tfblocks.training import compile_transformer, get_strategy
from tfblocks.training.callbacks import (
    EpochProgress,
    ExactSteps,
    FiniteLoss,
    TimeLimit,
    updates_and_rate,
)
from tfblocks.training.lora import enable_lora
from tfblocks.training.multi_worker import patch_keras
from tfblocks.training.precision import training_execution
from tfblocks.training.weights import (
    assign_weights,
    average_weights,
    float32_twin,
    load_weights,
    run_weights,
)
from tfblocks.translation.curves import CURVES_FILE, plot_curves
from tfblocks.translation.job_evaluation import record_bleu
from tfblocks.translation.progress import non_finite, stop_line, time_left, warmup_warning

# Strategies under which each worker reads its own shard of the training pairs and each
# replica takes whole batches from it (`distribute_dataset`); under the others (the
# default strategy, one device) the training input is `make_dataset`'s, as it is.
SHARDED_INPUT = (
    tf.distribute.MirroredStrategy,
    tf.distribute.MultiWorkerMirroredStrategy,
    tf.distribute.TPUStrategy,
)


class JobFit:
    """The fit part of `job`: it builds the model (continued from the job's folder, or
    from `init_weights`), trains the epochs left, records each one, and ends with the
    run's final weights.

    It holds the training's state: `strategy`, `model` (the one that trains), `serving`
    (the float32 model that translates: `model` itself, or a twin that gets the run's
    weights, `sync_weights`), `progress`, and the training time of this invocation
    (`spent`) and whether the time limit cut an epoch (`cut`).

    Args:
        job: the `TrainingJob` it serves.

    Example:

    >>> from tfblocks.translation.job import TrainingJob
    >>> from tfblocks.translation.options import TrainingOptions
    >>> job = TrainingJob(TrainingOptions(epochs=1), {"train": [], "dev": []})
    >>> job.fit.spent, job.fit.cut  # nothing trained yet in this invocation
    (0.0, False)
    """

    def __init__(self, job):
        self.job = weakref.proxy(job)  # weak: see `TrainingJob.__init__`
        self.options = job.options
        self.spent = 0.0  # this invocation's training time
        self.cut = False  # whether the time limit cut an epoch short

    def start(self, init_weights=None):
        """Seeds, reads the job folder's progress, builds the model (`build_model`) and
        the validation input; returns `serving`."""
        options, job = self.options, self.job
        keras.utils.set_random_seed(options.seed)
        self.progress = job.folder.progress()
        _check_steps_per_epoch(job.folder, self.progress, options.steps_per_epoch)
        self.build_model(init_weights)
        if options.shapes == "packed" and not (job.stream or self.sharded) and job.mixed is None:
            job.log(job.data.packing_line())
        self.dev = job.data.dev_input()
        return self.serving

    def build_model(self, init_weights=None):
        """The model step: builds and compiles `model` under the strategy and dtype policy
        (with `init_weights` when the folder has no finished epoch; then LoRA adapters),
        restores the folder's training state, and makes `serving`.

        Translation (dev BLEU, the final model, its exports) computes in float32 on a
        plain model: under a mixed policy, a moving average or adapters it runs on a
        float32 twin without adapters that gets the run's weights (`sync_weights`)."""
        options, job, progress = self.options, self.job, self.progress
        strategy = options.strategy
        self.strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
        self.sharded = isinstance(self.strategy, SHARDED_INPUT)
        if self.sharded:
            patch_keras()  # Keras' `fit` on replicas' batches of different shapes
        self.policy, xla = training_execution(options.shapes, options.dtype_policy)
        with self.strategy.scope():
            model = build_transformer(job.hp, dtype=self.policy)
            if init_weights is not None and not progress["epochs"]:
                load_weights(model, init_weights)  # before the adapters: the plain layout
            if options.lora_rank:
                adapted = enable_lora(model, options.lora_rank, options.lora_ffn)
            compile_transformer(model, job.hp, jit_compile=xla, ema_decay=options.ema_decay)
        self.model = model
        plain = self.policy == "float32" and options.ema_decay is None and not options.lora_rank
        self.serving = model if plain else float32_twin(job.hp, model)
        if options.dtype_policy == "auto" and self.policy != "float32":
            job.log(f"training under {self.policy} without XLA (dtype_policy='auto': this "
                    f"CPU has bfloat16 instructions, shapes={options.shapes!r}); translating "
                    "in float32")  # fmt: skip
        if progress["epochs"]:
            job.folder.restore(model)  # weights, optimizer (built) and dropout seeds
            job.log(f"continuing {job.folder.path} after epoch {progress['epochs']}")
        elif init_weights is not None:
            job.log(f"starting from the weights of {init_weights}")
        self.trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        if options.lora_rank:
            job.log(f"LoRA rank {options.lora_rank} on {len(adapted)} projections: "
                    f"{self.trainable:,} trainable parameters of "
                    f"{self.serving.count_params():,}")  # fmt: skip
        return model

    def run(self):
        """Trains the epochs left and ends with the final weights in `serving`; returns
        `(serving, report)` (`TrainingJob.train` describes the report)."""
        options, job, progress = self.options, self.job, self.progress
        self.spent, self.cut = 0.0, False
        stream = options.steps_per_epoch is not None
        self.first_updates = updates_and_rate(self.model.optimizer)[0]  # a continued run's
        self.warmup_checked = progress["epochs"] >= options.epochs  # nothing left to train
        if stream and not self.warmup_checked:  # the updates of its epochs are known now
            per_epoch = options.steps_per_epoch / options.accumulate_steps
            self._check_warmup(per_epoch, progress["epochs"])
        stopped = self._fit_stream() if stream else self._fit_epochs()
        job.log(stop_line(stopped, progress, options, cut=self.cut))
        self.sync_weights()
        report = self.final_weights()
        updates = [h["updates"] for h in progress["history"] if "updates" in h]
        report.update(
            stopped=stopped, train_seconds=round(progress["train_seconds"], 1),
            dtype_policy=self.policy, trainable_parameters=self.trainable,
            updates=updates[-1] if updates else None,
            warmup_steps=job.hp.learning_rate_warmup_steps,
        )  # fmt: skip
        report["curves"] = self._write_curves(report)
        return self.serving, report

    def sync_weights(self):
        """The run's weights now, given to `serving`: `{path: array}` in the plain model's
        layout, the trained ones or their moving average, adapters merged."""
        weights = run_weights(self.model, ema=self.options.ema_decay is not None)
        if self.serving is not self.model:
            assign_weights(self.serving, weights)
        return weights

    def _check_warmup(self, per_epoch, done):
        """Says in one line (`warmup_warning`) when the run's updates, `per_epoch` updates
        for each of the epochs after the `done` ones, end before the learning-rate warm-up
        does: known at the start with epochs of N steps, after this invocation's first
        epoch otherwise (its updates counted)."""
        self.warmup_checked = True
        planned = (self.first_updates or 0) + per_epoch * (self.options.epochs - done)
        line = warmup_warning(round(planned), self.job.hp.learning_rate_warmup_steps,
                              self.options.epochs, per_epoch)  # fmt: skip
        if line is not None:
            self.job.log(line)

    # The epochs ---------------------------------------------------------------------------

    def _train_input(self, seed, start_step=0):
        """The training input from the job's data, each worker's shard when sharded."""
        strategy = self.strategy if self.sharded else None
        return self.job.data.train_input(seed, start_step, strategy=strategy)

    def _fit_callbacks(self):
        """The callbacks of a `fit`: the exact step count, TensorBoard, progress, the job's,
        the NaN guard and the time limit (what is left of it), and the guard and limit
        themselves."""
        options = self.options
        guard = FiniteLoss()
        left = options.time_limit and max(options.time_limit - self.spent, 1e-3)
        limit = TimeLimit(left) if left else None
        listed = [
            ExactSteps(),  # first: the epoch's end sees the step count of its updates
            keras.callbacks.TensorBoard(self.job.folder.join("logs"), write_graph=False),
            EpochProgress(options.epochs),
            *self.job.callbacks,
            guard,
        ]
        return [*listed, *([limit] if limit else [])], guard, limit

    def _fit_stream(self):
        """With `steps_per_epoch`: one `fit` for the epochs left, on one endless stream of
        passes that it keeps iterating from epoch to epoch; each epoch is recorded at its
        end (`_EndEpoch`). A continued run starts the stream at the step where its first
        epoch starts. Returns why training stopped."""
        options, first = self.options, self.progress["epochs"]
        if first >= options.epochs:
            return "epochs"
        listed, guard, limit = self._fit_callbacks()
        ending = _EndEpoch(lambda e, logs, seconds: self.end_epoch(e, logs, seconds, guard, limit))
        data = self._train_input(options.seed * 100_003, first * options.steps_per_epoch)
        self.model.fit(
            data, validation_data=self.dev, initial_epoch=first, epochs=options.epochs,
            steps_per_epoch=options.steps_per_epoch, callbacks=[*listed, ending],
            shuffle=False, verbose=options.verbose,
        )  # fmt: skip
        return ending.stopped or "epochs"

    def _fit_epochs(self):
        """One `fit` and one dataset for each epoch left; returns why training stopped."""
        options, job = self.options, self.job
        for epoch in range(self.progress["epochs"], options.epochs):
            if options.time_limit and self.spent >= options.time_limit:
                return "time limit"  # used up: an epoch started now would only be cut
            listed, guard, limit = self._fit_callbacks()
            data = self._train_input(options.seed * 100_003 + epoch)
            start = time.perf_counter()
            with warnings.catch_warnings():
                # A streamed corpus has no known number of batches: its epoch ends when
                # the files do, which Keras reports as "Your input ran out of data".
                if job.stream or job.mixed is not None:
                    warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
                history = self.model.fit(
                    data, validation_data=self.dev, initial_epoch=epoch, epochs=epoch + 1,
                    callbacks=listed, shuffle=False, verbose=options.verbose,
                )  # fmt: skip
            elapsed = time.perf_counter() - start
            logs = {k: float(v[-1]) for k, v in history.history.items()}
            stop = self.end_epoch(epoch, logs, elapsed, guard, limit)
            if stop is not None:
                return stop
        return "epochs"

    def end_epoch(self, epoch, logs, elapsed, guard, limit):
        """Records a finished (or time-cut) epoch; returns why training stops, or None."""
        options, job, progress, folder = self.options, self.job, self.progress, self.job.folder
        if guard.failure is not None:
            raise non_finite(guard.failure, progress["epochs"])  # nothing of it committed
        self.spent += elapsed
        progress["train_seconds"] += elapsed
        keep = max(options.keep_checkpoints, options.average_last)
        if limit is not None and limit.stopped_early:
            # The cut epoch counts as time, not as an epoch: not in the history, never the
            # best epoch (nothing of its weights is kept); a rerun repeats it from the
            # saved state of the last completed epoch.
            self.cut = True
            folder.commit(self.model, progress, keep=keep, weights={})  # the time only
            return "time limit"
        weights = self.sync_weights()  # the serving model's now: dev BLEU and the .npz files
        updates, rate = updates_and_rate(self.model.optimizer)
        logs = dict(logs, seconds=elapsed, updates=updates, learning_rate=rate)
        if not self.warmup_checked:  # this invocation's first epoch: its updates counted
            self._check_warmup(updates - (self.first_updates or 0), epoch)
        if job.dev_pairs:
            job.evaluation.score_epoch(epoch, logs)
        progress["epochs"] = epoch + 1
        progress["history"].append({"epoch": epoch + 1, **logs})
        best = bool(job.dev_pairs) and record_bleu(progress, logs["dev_bleu"], epoch + 1)
        # One commit: a kill before it repeats the epoch, leaving no file of it behind.
        folder.commit(
            self.model, progress, epoch=epoch + 1, best=best, keep=keep, weights=weights,
            variables=bool(options.lora_rank),  # its .h5 keeps merged kernels, no adapters
        )  # fmt: skip
        if options.time_limit:
            to_go = options.epochs - epoch - 1
            job.log(time_left(self.spent, options.time_limit, elapsed, to_go))
        improved = progress["improved_epoch"] or progress["best_epoch"]
        if (
            options.early_stopping
            and improved is not None
            and progress["epochs"] - improved >= options.early_stopping
        ):
            return "early stopping"
        return None

    # The end ------------------------------------------------------------------------------

    def final_weights(self):
        """Loads the weights the run ends with into `serving` (the best dev-BLEU epoch's,
        or the last one's; their average over the last `average_last` epochs when its dev
        BLEU is not lower); returns the report's description of them."""
        job, model, progress = self.job, self.serving, self.progress
        folder, average_last = job.folder, self.options.average_last
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
        checkpoints = folder.checkpoints()[-average_last:] if average_last else []
        if len(checkpoints) < 2:
            return report
        current = [v.numpy() for v in model.weights]
        average_weights(model, [p for _, p in checkpoints])
        epochs = [e for e, _ in checkpoints]
        report["averaged_epochs"] = epochs
        averaged = f"average of epochs {epochs[0]}–{epochs[-1]}"
        if not job.dev_pairs:
            report["final_weights"] = averaged
            return report
        job.log(f"dev BLEU of the {averaged}: translating {job.evaluation.dev_count()}")
        report["dev_bleu_averaged"] = job.evaluation.dev_scores()["dev_bleu"]
        if report["dev_bleu_averaged"] >= (progress["best_bleu"] or 0.0):
            report["final_weights"] = averaged
        else:
            for variable, value in zip(model.weights, current, strict=True):
                variable.assign(value)
        return report

    def _write_curves(self, report):
        """Writes the run's `curves.png`; returns its path, or None without matplotlib."""
        try:
            import matplotlib  # noqa: F401  (the `examples` extra)
        except ImportError:
            self.job.log(
                "curves.png not written: matplotlib is missing (pip install 'tfblocks[examples]')"
            )
            return None
        folder = self.job.folder
        return plot_curves(
            folder.join(CURVES_FILE),
            report["history"],
            best_epoch=report["best_epoch"],
            averaged_epochs=report.get("averaged_epochs"),
            title=f"{os.path.basename(os.path.normpath(folder.path))}: {report['final_weights']}",
        )


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
