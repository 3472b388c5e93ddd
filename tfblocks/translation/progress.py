"""What a person sees while a translator trains: the time left under a time limit, why
training stopped, the error of a loss that stopped being finite, the progress of the
phases after training, and the closing summary of `tfblocks-train` (the epoch lines are
Keras' and `tfblocks.training.callbacks`')."""

import time

STOPPED = {
    "epochs": "all epochs done",
    "time limit": "stopped by the time limit; rerun the command to continue",
    "early stopping": "stopped early: no better dev BLEU",
}


class Timer:
    """Wall time of named phases: `with timer("train"): ...`, then `timer.seconds`.

    Example:

    >>> timer = Timer()
    >>> with timer("data"):
    ...     pass
    >>> list(timer.seconds)
    ['data']
    """

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


def say(line):
    """Prints `line` at once (the job's default `log`): standard output piped to a file or
    `tee` is block-buffered, and a phase that prints nothing for a minute looks hung."""
    print(line, flush=True)


class Counter:
    """`counter(done, total)` logs how many of a phase's `total` items are done: at the
    first call, then at most every `every` seconds, and at the last (`done == total`).

    Example:

    >>> lines = []
    >>> counter = Counter("test translation", "sentences", lines.append, every=3600)
    >>> for done in (64, 128, 150):
    ...     counter(done, 150)
    >>> [line.split(" (")[0] for line in lines]
    ['  test translation: 64/150 sentences', '  test translation: 150/150 sentences']
    """

    def __init__(self, phase, unit, log, every=10.0):
        self.phase, self.unit, self.log, self.every = phase, unit, log, every
        self.start = time.perf_counter()
        self.shown = None  # when the last line was logged

    def __call__(self, done, total):
        now = time.perf_counter()
        if self.shown is None or now - self.shown >= self.every or done >= total:
            self.shown = now
            self.log(f"  {self.phase}: {done}/{total} {self.unit} ({now - self.start:.0f} s)")


def non_finite(failure, recorded):
    """The error that stops a run whose loss stopped being a finite number."""
    epoch, step, loss = failure
    return FloatingPointError(
        f"training stopped: the loss became {loss} in epoch {epoch}, step {step}; nothing "
        f"of epoch {epoch} was saved, the run folder keeps epoch {recorded}. Lower the "
        "learning rate (--hparams-override learning_rate_constant=...) or check the data."
    )


def time_left(spent, limit, epoch_seconds, epochs_to_go):
    """The line printed after each epoch under a time limit (times of this invocation):
    the training time used and left and, while epochs remain, how many of them fit at
    `epoch_seconds` each, the measured time of the epoch just finished (not the mean of
    this invocation's: its first epoch also built and compiled the step).

    Example:

    >>> time_left(600, 3600, 290, 20).split(": ")[1]
    'about 10 of the 20 remaining epochs fit (290 s an epoch)'
    >>> time_left(3000, 3600, 290, 0)
    'training time 50.0 of 60.0 min, 10.0 min left'
    """
    left = max(limit - spent, 0.0)
    line = f"training time {spent / 60:.1f} of {limit / 60:.1f} min, {left / 60:.1f} min left"
    if not epochs_to_go:  # the last epoch is done: nothing to estimate
        return line
    fit = min(epochs_to_go, int(left // epoch_seconds)) if epoch_seconds > 0 else epochs_to_go
    return (
        f"{line}: about {fit} of the {epochs_to_go} remaining epochs fit "
        f"({epoch_seconds:.0f} s an epoch)"
    )


def stop_line(stopped, progress, options, cut=True):
    """One line: why training stopped (`cut`: the time limit cut an epoch short, which
    the rerun repeats; False: it ran out between two epochs)."""
    done = progress["epochs"]
    if stopped == "time limit":
        where = f"in epoch {done + 1}" if cut else f"after epoch {done}"
        return (
            f"training stopped: time limit of {options.time_limit / 60:.1f} min reached "
            f"{where} ({done} of {options.epochs} epochs done); rerun the command to continue"
        )
    if stopped == "early stopping":
        return (
            f"training stopped: early stopping after epoch {done}, no better dev BLEU for "
            f"{options.early_stopping} epochs (best epoch {progress['best_epoch']})"
        )
    return f"training stopped: all {options.epochs} epochs done"


def summary(metrics, report, folder, export_path, metrics_path, exact_match=True, heldout=None):
    """The closing summary of `tfblocks-train`: scores, epochs, time and where things are.

    `exact_match` shows the exact-match rate (meaningful on the phrasebook's short,
    templated sentences, near 0 on real corpora); with several directions, the means and
    each one's (`pairs`). `heldout`: `{split: (source file, target file)}` of the dev and
    test rows written into the run folder (None: no line).
    """
    scores = f"test BLEU {metrics['bleu']}  chrF {metrics['chrf']}"
    if exact_match:
        scores += f"  exact match {metrics['exact_match']:.4f}"
    best = report["best_epoch"]
    lines = [
        "summary",
        f"  {scores}  ({metrics['sentences']} sentences; {metrics['bleu_signature']})",
        *(
            f"    {name}: test BLEU {pair['bleu']}  chrF {pair['chrf']}  ({pair['sentences']} "
            "sentences)"
            for name, pair in (metrics.get("pairs") or {}).items()
        ),
        f"  {report['epochs']} epochs, {report['train_seconds']} s of training in all "
        f"({STOPPED[report['stopped']]}); best dev-BLEU epoch: "
        f"{'none (no dev BLEU)' if best is None else best}",
        f"  final weights: {report['final_weights']}",
        f"  model:   {folder.join('model')}",
        f"  export:  {export_path}",
        f"  curves:  {report['curves'] or 'not written (no matplotlib)'}",
        f"  metrics: {metrics_path}",
    ]
    for split, paths in (heldout or {}).items():
        lines.append(f"  {split}:{' ' * max(1, 8 - len(split))}{paths[0]}  {paths[1]}")
    return "\n".join(lines)
