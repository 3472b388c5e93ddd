"""What a person sees while a translator trains: the time left under a time limit, why
training stopped, the error of a loss that stopped being finite, the progress of the
phases after training, and the closing summary of `tfblocks-train` (the epoch lines are
Keras' and `tfblocks.training.callbacks`')."""

import sys
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
    A `phase` of None logs the count alone (`64/150 sentences (3 s)`).

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
            line = f"{done}/{total} {self.unit} ({now - self.start:.0f} s)"
            self.log(f"  {self.phase}: {line}" if self.phase else line)


def count_progress(unit, stream=None, every=10.0):
    """`progress(done, total)` for a command's count of `unit` done (`64/200 lines`), on
    `stream` (None: standard error): on a terminal one line that each call rewrites (`\\r`),
    ended with a newline at the last (`done == total`); otherwise (a file, a pipe, a log)
    lines that each end with a newline (`Counter`'s, without a phase: `64/200 lines (3 s)`):
    the first call's, then at most every `every` seconds, and the last.

    Example:

    >>> import io
    >>> log = io.StringIO()
    >>> progress = count_progress("lines", log, every=3600)
    >>> for done in (64, 128, 200):
    ...     progress(done, 200)
    >>> [line.split(" (")[0] for line in log.getvalue().splitlines()]
    ['64/200 lines', '200/200 lines']
    """
    stream = sys.stderr if stream is None else stream
    try:
        terminal = stream.isatty()
    except (AttributeError, OSError, ValueError):  # replaced or closed: not a terminal
        terminal = False
    if terminal:

        def rewrite(done, total):
            end = "" if done < total else "\n"
            print(f"\r{done}/{total} {unit}", end=end, file=stream, flush=True)

        return rewrite
    return Counter(None, unit, lambda line: print(line, file=stream, flush=True), every)


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


def warmup_warning(updates, warmup_steps, epochs, per_epoch):
    """The line that warns, at a run's start, that its `updates` (all `epochs`, of about
    `per_epoch` updates each) end before the learning-rate warm-up of `warmup_steps`
    updates does, so that the rate never reaches its peak; None when they do not.

    Example:

    >>> print(warmup_warning(60, 200, 5, 12).split(", before")[0])
    warning: this run ends after about 60 updates (5 epochs of 12)
    >>> warmup_warning(600, 200, 5, 120) is None
    True
    """
    if not warmup_steps or updates >= warmup_steps:
        return None
    per_epoch = f"{per_epoch:,.1f}".removesuffix(".0")  # 12; 12.5 with accumulation
    return (
        f"warning: this run ends after about {updates} updates ({epochs} epochs of "
        f"{per_epoch}), before its learning-rate warm-up of {warmup_steps} updates does: "
        "its learning rate never reaches its peak (more --epochs, a smaller --batch-tokens "
        "or a shorter warm-up, --hparams-override learning_rate_warmup_steps=N)"
    )


def _epochs_line(report):
    """The summary's line of the epochs: how many, their updates, the training time, why
    it stopped and the best dev-BLEU epoch, with the rule of a tie."""
    updates = report.get("updates")
    epochs = f"{report['epochs']} epochs" + ("" if updates is None else f" ({updates} updates)")
    best = report["best_epoch"]
    if best is None:
        best = "none (no dev BLEU)"
    else:  # the later of two epochs of equal dev BLEU is the best (`record_bleu`)
        bleu = {h["epoch"]: h.get("dev_bleu") for h in report.get("history") or ()}
        tied = sum(1 for b in bleu.values() if b is not None and b == bleu.get(best))
        rule = "a tie goes to the later epoch"
        if tied > 1:
            rule = f"the latest of {tied} epochs tied at dev BLEU {bleu[best]}: {rule}"
        best = f"{best} ({rule})"
    return (
        f"  {epochs}, {report['train_seconds']} s of training in all "
        f"({STOPPED[report['stopped']]}); best dev-BLEU epoch: {best}"
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
    lines = [
        "summary",
        f"  {scores}  ({metrics['sentences']} sentences; {metrics['bleu_signature']})",
        *(
            f"    {name}: test BLEU {pair['bleu']}  chrF {pair['chrf']}  ({pair['sentences']} "
            "sentences)"
            for name, pair in (metrics.get("pairs") or {}).items()
        ),
        _epochs_line(report),
        *_warmup_summary(report),
        f"  final weights: {report['final_weights']}",
        f"  model:   {folder.join('model')}",
        f"  export:  {export_path}",
        f"  curves:  {report['curves'] or 'not written (no matplotlib)'}",
        f"  metrics: {metrics_path}",
    ]
    for split, paths in (heldout or {}).items():
        lines.append(f"  {split}:{' ' * max(1, 8 - len(split))}{paths[0]}  {paths[1]}")
    return "\n".join(lines)


def _warmup_summary(report):
    """The summary's warning line when the run's updates ended before its learning-rate
    warm-up did (`report`'s `updates` and `warmup_steps`), or none."""
    updates, warmup = report.get("updates"), report.get("warmup_steps")
    if updates is None or not warmup or updates >= warmup:
        return []
    return [
        f"  warning: training ended after {updates} updates, before the learning-rate "
        f"warm-up of {warmup} did: the learning rate never reached its peak"
    ]
