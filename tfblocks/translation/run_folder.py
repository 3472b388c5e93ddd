"""The run folder: what a training run keeps, so it can be continued, fine-tuned and served.

Layout of `--output DIR` (everything in it is written by tfblocks; nothing else there is
touched):

    DIR/run.json                 what the folder was made with: corpus fingerprint,
                                 tokenizer (vocab size, model type), HParams, seed
    DIR/tokenizer.model          the shared SentencePiece model
    DIR/state/training.weights.h5   model + optimizer after the last finished epoch
    DIR/state/progress.json      finished epochs, total training seconds, per-epoch history,
                                 best dev BLEU (correct across reruns)
    DIR/checkpoints/epoch-NNNN.npz  weights of the last `keep` epochs (for averaging)
    DIR/best.npz, DIR/last.npz   weights of the best dev-BLEU epoch and of the last one
    DIR/model/                   the final model in the KerasHub preset layout
                                 (`tfblocks.load_preset`): config, weights, tokenizer, HParams
    DIR/metrics.json             test BLEU / chrF / exact match, totals, history
    DIR/curves.png               train and dev loss, dev BLEU and chrF per epoch (rewritten
                                 at the end of every run of the folder)
    DIR/logs/                    TensorBoard (train, validation, dev BLEU and chrF)
    DIR/export/1/                the SavedModel (TF Serving's numbered version folder)

Every file is written to a temporary name beside it and renamed into place, so a
killed run leaves the previous version, never a half-written file.
"""

import json
import os
import re

import numpy as np

from tfblocks._files import clean_stale_files, replace_file, write_json

RUN_FILE = "run.json"
TOKENIZER_FILE = "tokenizer.model"
_CHECKPOINT = re.compile(r"^epoch-(\d{4,})\.npz$")


class RunFolder:
    """Paths and files of one run folder (see the module docstring).

    Args:
        path: the folder; created if missing. An existing folder must be empty or a
            run folder (it has `run.json`), so a user's directory is never filled
            with a run's files by mistake.

    Example:

    >>> import tempfile
    >>> run = RunFolder(tempfile.mkdtemp())
    >>> run.progress()["epochs"], run.checkpoints()
    (0, [])
    """

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        if os.path.isfile(self.path):
            raise ValueError(f"`output` must be a directory, got the file output={path!r}.")
        if os.path.isdir(self.path):
            entries = set(os.listdir(self.path))
            if entries and RUN_FILE not in entries:
                raise ValueError(
                    f"`output` is an existing directory that is not a tfblocks run folder (no "
                    f"{RUN_FILE}), got output={path!r}; choose an empty or new folder."
                )
        os.makedirs(self.join("state"), exist_ok=True)
        os.makedirs(self.join("checkpoints"), exist_ok=True)
        for folder in (self.path, self.join("state"), self.join("checkpoints")):
            clean_stale_files(folder)  # a killed run's half-written weights
        if not os.path.exists(self.join(RUN_FILE)):
            write_json(self.join(RUN_FILE), {"format": 1, "settings": None})

    def join(self, *parts):
        return os.path.join(self.path, *parts)

    # Settings --------------------------------------------------------------------------------

    def settings(self):
        """The settings saved in `run.json`, or None before `check_settings` saved any."""
        with open(self.join(RUN_FILE), encoding="utf-8") as f:
            return json.load(f).get("settings")

    def check_settings(self, settings, must_match):
        """Saves `settings`, or checks them against the saved ones for `must_match` keys.

        Raises:
            ValueError: naming each key whose saved and new values differ.
        """
        saved = self.settings()
        if saved is None:
            write_json(self.join(RUN_FILE), {"format": 1, "settings": settings})
            return settings
        differ = [k for k in must_match if saved.get(k) != settings.get(k)]
        if differ:
            details = "; ".join(
                f"{k}: the folder has {saved.get(k)!r}, this run asks for {settings.get(k)!r}"
                for k in differ
            )
            raise ValueError(
                f"`output` {self.path!r} was made with other settings ({details}). Continue "
                "with the same settings, or use a new --output (to start from this run's "
                "weights on new data: --init-from)."
            )
        return saved

    # Progress and weights -------------------------------------------------------------------

    def progress(self):
        """`{"epochs", "train_seconds", "history", "best_epoch", "best_bleu"}` so far."""
        path = self.join("state", "progress.json")
        if not os.path.exists(path):
            return {
                "epochs": 0,
                "train_seconds": 0.0,
                "history": [],
                "best_epoch": None,
                "best_bleu": None,
            }
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def save_progress(self, progress):
        write_json(self.join("state", "progress.json"), progress)

    @property
    def state_weights(self):
        return self.join("state", "training.weights.h5")

    def save_state(self, model):
        """Model and optimizer variables, for continuing exactly where the run stopped."""
        replace_file(self.state_weights, model.save_weights, suffix=".weights.h5")

    def save_weights(self, model, name):
        """The model's weights (no optimizer) as `name` (an .npz under the folder)."""
        weights = {v.path: np.asarray(v) for v in model.weights}
        return replace_file(self.join(name), lambda tmp: np.savez(tmp, **weights), ".npz")

    def checkpoints(self):
        """Epoch checkpoints `[(epoch, path)]`, oldest first."""
        found = []
        for name in os.listdir(self.join("checkpoints")):
            match = _CHECKPOINT.match(name)
            if match:
                found.append((int(match.group(1)), self.join("checkpoints", name)))
        return sorted(found)

    def save_checkpoint(self, model, epoch, keep):
        """Saves epoch `epoch`'s weights and deletes this folder's checkpoints older than
        the last `keep` (only files named `epoch-NNNN.npz`, which tfblocks wrote)."""
        self.save_weights(model, os.path.join("checkpoints", f"epoch-{epoch:04d}.npz"))
        for _, path in self.checkpoints()[:-keep]:
            os.remove(path)


def load_weights(model, path):
    """Sets `model`'s weights from an .npz written by `RunFolder.save_weights`."""
    with np.load(path) as stored:
        missing = [v.path for v in model.weights if v.path not in stored]
        if missing:
            raise ValueError(f"{path!r} has no weights for {missing[:3]} (another architecture?).")
        for variable in model.weights:
            variable.assign(stored[variable.path])


def average_weights(model, paths):
    """Sets `model`'s weights to the mean of the checkpoints `paths` (t2t `avg_checkpoints`)."""
    if not paths:
        raise ValueError("`paths` must name at least one checkpoint, got none.")
    stores = [np.load(p) for p in paths]
    try:
        for variable in model.weights:
            last = stores[-1][variable.path]
            if not np.issubdtype(last.dtype, np.floating):  # e.g. a seed state: the last one
                variable.assign(last)
                continue
            values = [s[variable.path].astype(np.float64) for s in stores]
            variable.assign(np.mean(values, axis=0).astype(last.dtype))
    finally:
        for s in stores:
            s.close()
