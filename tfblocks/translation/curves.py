"""`curves.png` of a run folder: training and dev loss, dev BLEU and chrF per epoch (and
each direction's dev BLEU for a run of several).

Drawn with matplotlib's object API (no pyplot, so no global backend or figure state),
from the run's per-epoch history; rewritten whole (a temporary file renamed into place)
every time the run ends, so a continued run's picture covers all its epochs.
"""

from tfblocks._files import replace_file

CURVES_FILE = "curves.png"


def plot_curves(path, history, best_epoch=None, averaged_epochs=None, title=None):
    """Writes the learning curves of `history` to the PNG file `path`; returns `path`.

    Args:
        path: the PNG to write (replaced whole).
        history: the run's per-epoch records, dicts with `epoch` and any of `loss`,
            `val_loss`, `dev_bleu`, `dev_chrf` and `dev_bleu_PAIR` (a direction's,
            `dev_bleu_de-en`: drawn thin, `dev_bleu` then being their mean).
        best_epoch: the epoch of the best dev BLEU, marked on both panels (None: none).
        averaged_epochs: the epochs whose weights were averaged, shaded (None: none).
        title: the figure's title.

    Example:

    >>> import os, tempfile
    >>> history = [{"epoch": 1, "loss": 5.0, "val_loss": 4.0, "dev_bleu": 3.0, "dev_chrf": 20.0},
    ...            {"epoch": 2, "loss": 3.0, "val_loss": 3.5, "dev_bleu": 9.0, "dev_chrf": 31.0}]
    >>> path = plot_curves(os.path.join(tempfile.mkdtemp(), "curves.png"), history, best_epoch=2)
    >>> with open(path, "rb") as png:
    ...     png.read(8) == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    """
    from matplotlib.figure import Figure  # the `examples` extra, as sacrebleu

    figure = Figure(figsize=(10, 4), layout="constrained")
    loss_axes, score_axes = figure.subplots(1, 2)
    epochs = [record["epoch"] for record in history]
    pairs = list(dict.fromkeys(k for r in history for k in r if k.startswith("dev_bleu_")))
    mean = " (mean)" if pairs else ""
    for axes, series in (
        (loss_axes, (("loss", "train loss"), ("val_loss", "dev loss"))),
        (score_axes, (("dev_bleu", f"dev BLEU{mean}"), ("dev_chrf", f"dev chrF{mean}"),
                      *((key, f"dev BLEU {key[9:]}") for key in pairs))),
    ):  # fmt: skip
        for key, label in series:
            points = [(r["epoch"], r[key]) for r in history if r.get(key) is not None]
            thin = {"linewidth": 0.8, "linestyle": ":"} if key in pairs else {}
            if points:
                axes.plot(*zip(*points, strict=True), marker="o", markersize=3, label=label,
                          **thin)  # fmt: skip
        if best_epoch is not None:
            best = f"best (epoch {best_epoch})"
            axes.axvline(best_epoch, color="gray", linestyle="--", label=best)
        if averaged_epochs:
            first, last = min(averaged_epochs), max(averaged_epochs)
            axes.axvspan(first - 0.5, last + 0.5, color="gray", alpha=0.15, label="averaged")
        axes.set_xlabel("epoch")
        if epochs:
            axes.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
        if axes.get_legend_handles_labels()[0]:
            axes.legend()
    loss_axes.set_ylabel("loss (label-smoothed cross-entropy)")
    score_axes.set_ylabel("score (greedy translations of the dev sentences)")
    if title:
        figure.suptitle(title)
    return replace_file(path, lambda tmp: figure.savefig(tmp, format="png", dpi=100), ".png")
