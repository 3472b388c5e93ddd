"""What a person sees while a translator trains: the time left under a time limit, why
training stopped, the error of a loss that stopped being finite, and the closing summary
of `tfblocks-train` (the epoch lines are Keras' and `tfblocks.training.callbacks`')."""

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


def non_finite(failure, recorded):
    """The error that stops a run whose loss stopped being a finite number."""
    epoch, step, loss = failure
    return FloatingPointError(
        f"training stopped: the loss became {loss} in epoch {epoch}, step {step}; nothing "
        f"of epoch {epoch} was saved, the run folder keeps epoch {recorded}. Lower the "
        "learning rate (--hparams-override learning_rate_constant=...) or check the data."
    )


def time_left(spent, limit, epochs_done, epochs_to_go):
    """The line printed after each epoch under a time limit (times of this invocation)."""
    left = max(limit - spent, 0.0)
    fit = min(epochs_to_go, int(left // (spent / epochs_done))) if epochs_done else 0
    return (
        f"training time {spent / 60:.1f} of {limit / 60:.1f} min, {left / 60:.1f} min left: "
        f"about {fit} of the {epochs_to_go} remaining epochs fit"
    )


def stop_line(stopped, progress, options):
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
