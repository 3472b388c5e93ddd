"""The run folder: what a training run keeps, so it can be continued, fine-tuned and served.

Layout of `--output DIR` (everything in it is written by tfblocks; nothing else there is
touched):

    DIR/run.json                 what the folder was made with: corpus fingerprint, source
                                 and target languages (`run_languages`; tfblocks-translate
                                 and -evaluate follow them), tokenizer (vocab size, model
                                 type), HParams, seed; of several directions, their
                                 `pairs` (`run_pairs`: what --target-lang chooses from)
    DIR/tokenizer.model          the shared SentencePiece model (the source side's with
                                 --separate-vocab)
    DIR/target_tokenizer.model   with --separate-vocab: the target side's
    DIR/state/training.weights.h5   model + optimizer after the last finished epoch
    DIR/state/variables.npz      under LoRA: the model's variables as they are (the .h5
                                 holds merged kernels and no adapters)
    DIR/state/seeds.npz          with dropout: the state of the model's seed generators
                                 (each dropout layer's seed and count of masks drawn)
    DIR/state/progress.json      finished epochs, total training seconds, per-epoch history,
                                 best dev BLEU (correct across reruns)
    DIR/checkpoints/epoch-NNNN.npz  weights of the last `keep` epochs (for averaging)
    DIR/best.npz, DIR/last.npz   weights of the best dev-BLEU epoch and of the last one
                                 (the run's weights: with a moving average, the average;
                                 with LoRA, merged into the kernels)
    DIR/model/                   the final model in the KerasHub preset layout
                                 (`tfblocks.load_preset`): config, weights, tokenizer, HParams
    DIR/metrics.json             test BLEU / chrF / exact match, totals, history, and the
                                 digest of the final weights, test split and search that
                                 they and the exports come from (a rerun that ends with
                                 the same skips the test translation and the export)
    DIR/heldout/{dev,test}.{SOURCE,TARGET}   the dev and test rows, one sentence a line
                                 (several directions: heldout/SOURCE-TARGET/, untagged)
                                 (what tfblocks-evaluate needs to repeat the test score)
    DIR/curves.png               train and dev loss, dev BLEU and chrF per epoch (rewritten
                                 at the end of every run of the folder)
    DIR/logs/                    TensorBoard (train, validation, dev BLEU and chrF)
    DIR/export/1/                the SavedModel (TF Serving's numbered version folder)
    DIR/xla-cache/KEY/           the XLA programs tfblocks-translate, -evaluate and -serve
                                 compiled on this folder, loaded by the next one
                                 (`tfblocks.translation.xla_cache`; KEY: TensorFlow
                                 version, CPU features, XLA_FLAGS)
    DIR/run.lock                 held (`fcntl.flock`) by the run using the folder; holds
                                 its process id

Every file is written to a temporary name beside it and renamed into place, so a
killed run leaves the previous version, never a half-written file.

An epoch is recorded whole or not at all (`RunFolder.commit`): its files (checkpoint,
`last.npz`, `best.npz`, the training state) are first written into `state/commit-NNNNNN/`,
then `state/progress.json`, which names that commit, is renamed into place (the commit),
and only then are the files moved to their places. Reopening the folder finishes the
moves of the recorded commit and deletes the files of any later, unrecorded one and
checkpoints past the recorded epoch, so a killed run never leaves weights that its
progress does not account for.

One run holds a folder at a time: `RunFolder` takes an exclusive lock on `run.lock` for
its lifetime (`close()`, `with`, or the process's end release it; a dead process's lock
never blocks), and a second run is refused with the holder's process id. (Windows has no
`fcntl`: there the folder is not locked.)
"""

import contextlib
import json
import os
import re

import numpy as np

from tfblocks._checks import short_repr
from tfblocks._files import clean_stale_files, read_json, replace_file, write_json
from tfblocks.training.weights import load_weights

try:
    import fcntl
except ImportError:  # Windows: no advisory locks of this kind
    fcntl = None

RUN_FILE = "run.json"
TOKENIZER_FILE = "tokenizer.model"
TARGET_TOKENIZER_FILE = "target_tokenizer.model"
HELDOUT_DIR = "heldout"  # the dev and test rows as line-aligned files
CTRANSLATE2_DIR = "ctranslate2"  # a CTranslate2 export (tfblocks-import --ctranslate2)
LOCK_FILE = "run.lock"
PROGRESS_FILE = os.path.join("state", "progress.json")
STATE_FILE = os.path.join("state", "training.weights.h5")
VARIABLES_FILE = os.path.join("state", "variables.npz")
SEEDS_FILE = os.path.join("state", "seeds.npz")
_CHECKPOINT = re.compile(r"^epoch-(\d{4,})\.npz$")
_COMMIT = re.compile(r"^commit-(\d{6,})$")
# What a commit folder may hold, by exact name -> where the file goes after the commit.
_STAGED = {
    "last.npz": "last.npz",
    "best.npz": "best.npz",
    "training.weights.h5": STATE_FILE,
    "variables.npz": VARIABLES_FILE,
    "seeds.npz": SEEDS_FILE,
}


class RunFolder:
    """Paths and files of one run folder (see the module docstring), locked while open.

    Args:
        path: the folder; created if missing. An existing folder must be empty or a
            run folder (it has `run.json`), so a user's directory is never filled
            with a run's files by mistake.

    Raises:
        ValueError: `path` is a file, a directory that is not a run folder, or a run
            folder that another run holds (the message names its process id).

    Example:

    >>> import tempfile
    >>> with RunFolder(tempfile.mkdtemp()) as run:
    ...     run.progress()["epochs"], run.checkpoints()
    (0, [])
    """

    def __init__(self, path):
        self._lock = None
        self.path = check_output(path)
        os.makedirs(self.path, exist_ok=True)
        self._lock = _lock(self.join(LOCK_FILE), path)
        try:
            os.makedirs(self.join("state"), exist_ok=True)
            os.makedirs(self.join("checkpoints"), exist_ok=True)
            folders = [self.path, self.join("state"), self.join("checkpoints")]
            if os.path.isdir(self.join(HELDOUT_DIR)):
                folders.append(self.join(HELDOUT_DIR))
            for folder in folders:
                clean_stale_files(folder)  # a killed run's half-written files
            if not os.path.exists(self.join(RUN_FILE)):
                write_json(self.join(RUN_FILE), {"format": 1, "settings": None})
            self._recover()
        except BaseException:
            self.close()
            raise

    def join(self, *parts):
        return os.path.join(self.path, *parts)

    def close(self):
        """Releases the folder's lock (also done by `with`, garbage collection and exit)."""
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor releases the flock
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self, _close=os.close):  # bound now: at interpreter exit `os` may be gone
        if getattr(self, "_lock", None) is not None:
            _close(self._lock)
            self._lock = None

    # Settings --------------------------------------------------------------------------------

    def settings(self):
        """The settings saved in `run.json`, or None before `check_settings` saved any."""
        return _read_json(self.join(RUN_FILE), {"settings": (dict, type(None))}).get("settings")

    def trained(self):
        """Whether the folder holds training results (a recorded commit): from then on its
        settings bind every rerun."""
        progress = self.progress()
        return bool(progress.get("commit") or progress["epochs"])

    def check_settings(self, settings, must_match):
        """Saves `settings`, or checks them against the saved ones for `must_match` keys.

        Settings bind only once the folder holds training results (`trained()`): until
        then (a start that failed before its first epoch was recorded) a new command's
        settings replace the saved ones, so a corrected command is never locked out.

        A key not in `must_match` (what the run decodes with, not what it learnt) takes
        the new value.

        Returns:
            The settings the folder was trained with, or None when they are new (then
            nothing in the folder, such as a tokenizer, was made with them yet).

        Raises:
            ValueError: naming each key whose saved and new values differ.
        """
        saved = self.settings()
        if saved is None or not self.trained():
            write_json(self.join(RUN_FILE), {"format": 1, "settings": settings})
            return None
        differ = [k for k in must_match if saved.get(k) != settings.get(k)]
        if differ:
            details = "; ".join(
                f"{k}: the folder has {short_repr(saved.get(k), 120)}, this run asks for "
                f"{short_repr(settings.get(k), 120)}"
                for k in differ
            )
            raise ValueError(
                f"`output` {self.path!r} was made with other settings ({details}). Continue "
                "with the same settings, or use a new --output (to start from this run's "
                "weights on new data: --init-from)."
            )
        if any(saved.get(k) != v for k, v in settings.items() if k not in must_match):
            saved = {**saved, **{k: v for k, v in settings.items() if k not in must_match}}
            write_json(self.join(RUN_FILE), {"format": 1, "settings": saved})
        return saved

    # Progress and weights -------------------------------------------------------------------

    def progress(self):
        """The recorded progress: `{"epochs", "train_seconds", "history", "best_epoch",
        "best_bleu", "improved_epoch", "commit"}` (`commit` counts the commits)."""
        progress = {
            "epochs": 0,
            "train_seconds": 0.0,
            "history": [],
            "best_epoch": None,
            "best_bleu": None,
            "improved_epoch": None,
            "commit": 0,
        }
        path = self.join(PROGRESS_FILE)
        if os.path.exists(path):
            progress.update(_read_json(path, _PROGRESS_TYPES))
        return progress

    @property
    def state_weights(self):
        """Model and optimizer variables after the last recorded epoch."""
        return self.join(STATE_FILE)

    def restore(self, model):
        """Loads the training state of the last recorded epoch into `model` (compiled,
        built): model and optimizer variables, then `state/variables.npz` if the commit
        wrote one, and the seed generators' state (`state/seeds.npz`), so the dropout
        masks go on where the recorded epoch left them. A folder without `seeds.npz`
        (written before tfblocks kept it) continues with the model's fresh seeds.

        Raises:
            ValueError: `seeds.npz` holds another number of seed generators than `model`.
        """
        model.load_weights(self.state_weights)
        if os.path.exists(self.join(VARIABLES_FILE)):
            load_weights(model, self.join(VARIABLES_FILE))
        if os.path.exists(self.join(SEEDS_FILE)):
            states = _seed_states(model)
            with np.load(self.join(SEEDS_FILE)) as stored:
                if len(stored.files) != len(states):
                    raise ValueError(
                        f"`output` {self.path!r} holds the state of {len(stored.files)} seed "
                        f"generators in {SEEDS_FILE}, got a model with {len(states)} "
                        "(another architecture or dropout?)."
                    )
                for i, variable in enumerate(states):
                    variable.assign(stored[f"arr_{i}"])  # np.savez's names, in order

    def commit(
        self, model, progress, *, epoch=None, best=False, keep=5, weights=None, variables=False
    ):
        """Records `progress` and `model`'s weights as one step: all of it or nothing.

        Args:
            model: the model being trained.
            progress: the new progress (updated in place with the commit's number).
            epoch: the epoch `model` just finished: its checkpoint, `last.npz` and the
                training state (model, optimizer and, with dropout, the seed generators)
                are saved. None for a step that finished no epoch (an epoch cut by the
                time limit).
            best: the weights become `best.npz`.
            keep: epoch checkpoints kept after the commit (the newest; only files
                named `epoch-NNNN.npz`, which tfblocks wrote, are deleted).
            weights: `{path: array}` for the .npz files (checkpoint, `last.npz`,
                `best.npz`); default `model`'s own. The training state is `model`'s.
            variables: with `epoch`, also keep `model`'s variables exactly as they are
                (`state/variables.npz`, loaded by `restore` after the `.h5`), for a model
                whose `.weights.h5` does not: LoRA layers save merged kernels, no adapters.

        The files go to a new `state/commit-NNNNNN/` first; writing `progress.json`
        (renamed into place) is the commit; then the files are moved into place.
        """
        number = progress.get("commit", 0) + 1
        staging = self.join("state", f"commit-{number:06d}")
        _discard(staging)  # an earlier attempt of this number that was never recorded
        os.makedirs(staging)
        if weights is None:
            weights = {v.path: np.asarray(v) for v in model.weights}
        if epoch is not None:
            np.savez(os.path.join(staging, f"epoch-{epoch:04d}.npz"), **weights)
            np.savez(os.path.join(staging, "last.npz"), **weights)
            model.save_weights(os.path.join(staging, "training.weights.h5"))
            states = _seed_states(model)
            if states:  # none without dropout
                np.savez(os.path.join(staging, "seeds.npz"), *(np.asarray(v) for v in states))
            if variables:
                current = {v.path: np.asarray(v) for v in model.weights}
                np.savez(os.path.join(staging, "variables.npz"), **current)
        if best:
            np.savez(os.path.join(staging, "best.npz"), **weights)
        progress["commit"] = number
        write_json(self.join(PROGRESS_FILE), progress)  # the commit
        self._move_into_place(staging)
        for _, path in self.checkpoints()[:-keep]:
            os.remove(path)

    def save_weights(self, model, name):
        """The model's weights (no optimizer) as `name` (an .npz under the folder)."""
        weights = {v.path: np.asarray(v) for v in model.weights}
        return replace_file(self.join(name), lambda tmp: np.savez(tmp, **weights), ".npz")

    def checkpoints(self):
        """Epoch checkpoints `[(epoch, path)]`, oldest first."""
        found = []
        for name in os.listdir(self.join("checkpoints")):
            match = _CHECKPOINT.match(name)
            if match and _regular(self.join("checkpoints", name)):
                found.append((int(match.group(1)), self.join("checkpoints", name)))
        return sorted(found)

    def _move_into_place(self, staging):
        for name in sorted(os.listdir(staging)):
            target = _STAGED.get(name)
            if target is None and _CHECKPOINT.match(name):
                target = os.path.join("checkpoints", name)
            if target is not None and _regular(os.path.join(staging, name)):
                os.replace(os.path.join(staging, name), self.join(target))
        _remove_empty(staging)

    def _recover(self):
        """Completes the recorded commit and removes what no commit recorded."""
        progress = self.progress()
        state = self.join("state")
        for name in sorted(os.listdir(state)):
            match = _COMMIT.match(name)
            folder = os.path.join(state, name)
            if not match or os.path.islink(folder) or not os.path.isdir(folder):
                continue
            if int(match.group(1)) == progress["commit"]:
                self._move_into_place(folder)  # killed between the commit and the moves
            else:
                _discard(folder)  # never recorded (or left over): not the run's state
        for epoch, path in self.checkpoints():
            if epoch > progress["epochs"]:
                os.remove(path)  # written by an epoch whose commit never happened


def check_output(path):
    """The absolute path of a run folder at `path`, or a ValueError if it cannot be one
    (a file, or a directory that holds anything but a run). Nothing is created."""
    absolute = os.path.abspath(os.fspath(path))
    if os.path.isfile(absolute):
        raise ValueError(f"`output` must be a directory, got the file output={path!r}.")
    if os.path.isdir(absolute):
        entries = set(os.listdir(absolute)) - {LOCK_FILE}  # a run that just started
        if entries and RUN_FILE not in entries:
            raise ValueError(
                f"`output` is an existing directory that is not a tfblocks run folder (no "
                f"{RUN_FILE}), got output={path!r}; choose an empty or new folder."
            )
    return absolute


def run_languages(path):
    """`(source, target)`: the languages recorded by the run whose folder is `path`, or
    whose `model/` or `export/N` is `path`; None when unknown (no run folder there, or
    one that recorded no languages, as a run of several directions). Reads only
    `run.json`."""
    for settings in _run_settings(path):
        languages = (settings.get("source_lang"), settings.get("target_lang"))
        if all(isinstance(language, str) for language in languages):
            return languages
    return None


def run_beam_size(path):
    """The beam size that the run whose folder is `path` (or whose `model/`, `export/N`
    or `ctranslate2/` is `path`) decodes with when none is given: its `run.json`'s
    `beam_size` (an imported model's `num_beams`, what its export/1 decodes with), else
    `searches.DEFAULT_BEAM_SIZE` (4). Reads only `run.json`."""
    from tfblocks.translation.searches import DEFAULT_BEAM_SIZE

    for settings in _run_settings(path):
        beam_size = settings.get("beam_size")
        if isinstance(beam_size, int) and not isinstance(beam_size, bool) and beam_size >= 1:
            return beam_size
    return DEFAULT_BEAM_SIZE


def run_pairs(path):
    """The directions (`["de-en", ...]`) recorded by the run of several directions whose
    folder (or `model/`, `export/N`) is `path`; None for any other. Reads only `run.json`."""
    for settings in _run_settings(path):
        pairs = settings.get("pairs")
        if isinstance(pairs, list) and pairs and all(isinstance(p, str) for p in pairs):
            return pairs
    return None


def run_language_tokens(path):
    """`(source_code, target_id)` of an imported M2M-100 / NLLB run (its `run.json`'s
    `language_tokens`: `Translator(language_tokens=...)`), or None for any other run.
    Reads only `run.json`."""
    for settings in _run_settings(path):
        tokens = settings.get("language_tokens")
        if isinstance(tokens, dict) and {"source", "target_id"} <= set(tokens):
            return str(tokens["source"]), int(tokens["target_id"])
    return None


def run_language_codes(path):
    """`(codes, kind)` of an imported M2M-100 / NLLB run: every language code of the model
    and its token's id (`run.json`'s `language_tokens.languages`) and its import format;
    `(None, None)` for a run that records none. Reads only `run.json`."""
    for settings in _run_settings(path):
        tokens = settings.get("language_tokens")
        codes = tokens.get("languages") if isinstance(tokens, dict) else None
        if isinstance(codes, dict) and codes:
            return codes, settings.get("import_format", "imported")
    return None, None


def _run_settings(path):
    """Yields the `run.json` settings of the run folder `path`, or of the folder whose
    `model/`, `export/N` or `ctranslate2/` it is, that can be read."""
    path = os.path.abspath(os.fspath(path))
    folders = [path]
    parent = os.path.dirname(path)
    if os.path.basename(path) in ("model", CTRANSLATE2_DIR):
        folders.append(parent)
    if os.path.basename(parent) == "export":
        folders.append(os.path.dirname(parent))
    for folder in folders:
        try:
            with open(os.path.join(folder, RUN_FILE), encoding="utf-8") as f:
                settings = json.load(f).get("settings") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(settings, dict):  # else not what tfblocks wrote: nothing known
            yield settings


def _lock(lock_path, path):
    """Takes the exclusive lock of a run folder; returns its file descriptor (None without
    `fcntl`). Raises ValueError naming the holder's process id when another run has it."""
    if fcntl is None:
        return None
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(lock_path, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(
            f"`output` is in use by another tfblocks run (process id {holder}), got "
            f"output={os.fspath(path)!r}; wait for that run to end or choose another folder."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    return fd


def _seed_states(model):
    """The state variables of `model`'s random seed generators (a dropout layer's seed and
    the count of masks it drew; not in `model.weights` nor its `.weights.h5`), in the
    model's order: Keras' `model.variables` are its weights and these. They are stored by
    position, not path: generators are named in the order a process makes them, so two
    builds of one model in a process give them different paths."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


# The types of `state/progress.json`'s fields (bool is not a number here).
_NUMBER = (int, float)
_PROGRESS_TYPES = {
    "epochs": int,
    "train_seconds": _NUMBER,
    "history": list,
    "best_epoch": (int, type(None)),
    "best_bleu": (*_NUMBER, type(None)),
    "improved_epoch": (int, type(None)),
    "commit": int,
}


def _read_json(path, types):
    """The JSON object in the run folder's file `path`, its fields of `types` (`{name:
    type or tuple}`) checked; a ValueError naming the file otherwise (not JSON, cut
    short, not an object, a field of another type)."""
    fix = "restore it, or give a new --output"
    values = read_json(path, "the JSON tfblocks wrote", fix=fix)
    for name, kinds in types.items():
        value = values.get(name)
        if name in values and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise ValueError(f"{path}: {name} has the wrong type, got {name}={value!r:.80}; {fix}.")
    return values


def _regular(path):
    return os.path.isfile(path) and not os.path.islink(path)


def _discard(staging):
    """Deletes a commit folder's files (only the names a commit writes) and the folder."""
    if not os.path.isdir(staging) or os.path.islink(staging):
        return
    for name in os.listdir(staging):
        full = os.path.join(staging, name)
        if (name in _STAGED or _CHECKPOINT.match(name)) and _regular(full):
            os.remove(full)
    _remove_empty(staging)


def _remove_empty(folder):
    with contextlib.suppress(OSError):  # something tfblocks did not put there: left alone
        os.rmdir(folder)
