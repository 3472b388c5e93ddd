"""The translation job: corpus → tokenizer → `fit`, epoch by epoch, in a durable run folder.

A `TrainingJob` is the whole job of `tfblocks-train` (and of `examples/translate.py`,
which calls it), built from `TrainingOptions`. It runs the steps in order and leaves each
concern to a part of its own, in its own module:

- `job.data` (`job_data.JobData`): the model of `init_from`, the tokenizers (trained, or
  those of the run folder or of `init_from`), the HParams (with `init_from`: that run's
  architecture, the options' training settings), the held-out rows written into the
  folder, and the training and validation input.
- `job.fit` (`job_fit.JobFit`): the model, the epochs (each one committed to the folder
  as it ends; a rerun continues after the last), the NaN guard, the time limit, early
  stopping, and the final weights (the best epoch's, or an average).
- `job.evaluation` (`job_evaluation.JobEvaluation`): dev BLEU and chrF after each epoch,
  which choose the best epoch, and the test scores.
- `job.record` (`job_record.JobRecord`): the settings that bind the folder's reruns
  (`run.json`), the export (the preset and the SavedModel, reloaded once) and
  `metrics.json`; a rerun that ends with the final weights, test split and search it
  records skips the test translation and the export, which are already there.

What the job keeps is described in `tfblocks.translation.run_folder`. The phases after
training say what they do; the test translation shows the sentences done.

Several directions in one model (`tfblocks-train --pairs`) go through every part: the
train split is a `tfblocks.text.multilingual.MixedPairs` (the directions' tagged pairs
drawn by temperature sampling, an epoch as many draws as their pairs), the dev and test
splits their tagged pairs in turn. The tokenizer is trained balanced over the languages
with their tags as symbols; dev BLEU and chrF are each direction's and their mean, which
picks the best epoch; the test scores are each direction's (`pairs` in `metrics.json`)
and their means; the settings record the directions (`run_folder.run_pairs`).
"""

import tempfile

from tfblocks import _backend
from tfblocks._files import check_directory
from tfblocks.decoding import Greedy
from tfblocks.models.preset import KIND
from tfblocks.serving.savedmodel import Translator
from tfblocks.text.multilingual import MixedPairs
from tfblocks.text.streamed import StreamedPairs
from tfblocks.translation.job_data import JobData, check_max_length
from tfblocks.translation.job_evaluation import JobEvaluation
from tfblocks.translation.job_fit import JobFit
from tfblocks.translation.job_record import JobRecord, outputs_digest, write_metrics
from tfblocks.translation.progress import Timer, say
from tfblocks.translation.run_folder import RunFolder

# `check_max_length` and `write_metrics` are the job's too: the train command checks
# HParams as the job does, and a caller writes metrics where the job would.
__all__ = ["TrainingJob", "check_max_length", "write_metrics"]


class TrainingJob:
    """The translation job: tokenizers → model → epochs → final weights → test → export.

    `run(output)` is the whole job of `tfblocks-train` in the run folder `output`;
    `train(folder, tokenizer, hp)` is its training part alone, on given tokenizers and
    HParams. The job's concerns are its parts: `data` (`JobData`), `fit` (`JobFit`),
    `evaluation` (`JobEvaluation`) and `record` (`JobRecord`). While `train` runs, the
    job holds what they share: `folder`, `hp`, `tokenizer` and `target_tokenizer`, and
    what dev BLEU translates (`dev_pairs`) and with what (`translator`, on the fit's
    float32 model).

    Args:
        options: `TrainingOptions`.
        splits: `{"train", "dev", "test"}` lists of `(source, target)` pairs (the train
            split may be a `StreamedPairs`; `train` needs no test split).
        log: where progress lines go.
        callbacks: further Keras callbacks for every epoch's `fit`.
        timer: the `Timer` of the job's phases (data, train, evaluate, export, reload).

    Example:

    >>> from tfblocks.translation.options import TrainingOptions
    >>> job = TrainingJob(TrainingOptions(epochs=1), {"train": [], "dev": []})
    >>> job.options.epochs, job.stream
    (1, False)
    """

    def __init__(self, options, splits, *, log=say, callbacks=(), timer=None):
        _backend.require_tensorflow("TrainingJob")
        self.options = options
        self.splits = splits
        self.log = log
        self.callbacks = tuple(callbacks)
        self.timer = Timer() if timer is None else timer
        self.stream = isinstance(splits["train"], StreamedPairs)
        # Several directions (`MixedPairs`): dev and test are their tagged pairs, in turn.
        self.mixed = splits["train"] if isinstance(splits["train"], MixedPairs) else None
        self.language_tokens = None  # an M2M-100 / NLLB direction (`JobData.load_init`)
        if self.mixed is not None and (options.separate_vocab or options.init_from):
            raise ValueError(
                "several directions (a `MixedPairs`) train one shared vocabulary from scratch, "
                f"got separate_vocab={options.separate_vocab!r}, "
                f"init_from={options.init_from!r}."
            )
        # The parts refer to the job weakly, so that a job let go frees at once what it
        # holds: its models, and its run folder with the folder's lock.
        self.data = JobData(self)
        self.fit = JobFit(self)
        self.evaluation = JobEvaluation(self)
        self.record = JobRecord(self)

    def run(self, output=None):
        """Trains (or continues) the run in the folder `output` (None: a new temporary
        one), evaluates it on the test split, exports and reloads it; returns the metrics
        (also in its `metrics.json`). What can be refused is refused before the folder is
        created or touched: a bad `init_from`, an unreadable streamed corpus."""
        data, record = self.data, self.record
        with self.timer("data"):
            init = data.load_init()
            # An M2M-100 / NLLB run's direction: its tokens in the data and the translators.
            self.language_tokens = None if init is None else init.language_tokens
            sample = data.tokenizer_sample(init, output)
        with RunFolder(output or tempfile.mkdtemp(prefix="tfblocks-train-")) as folder:
            with self.timer("data"):
                saved = record.check_settings(folder)
                tokenizer, target_tokenizer = data.tokenizers(folder, init, sample, saved)
            hp = data.build_hparams(tokenizer, target_tokenizer, init)
            # The final model goes to model/ and export/1: a folder there that tfblocks did
            # not write is refused now, not after the training.
            check_directory(folder.join("model"), KIND, arg="model")
            check_directory(folder.join("export", "1"), arg="export")
            heldout = data.write_heldout(folder)
            init_weights = None
            if init is not None:
                init_weights = folder.save_weights(init.model, "init.npz")
            with self.timer("train"):
                model, report = self.train(folder, tokenizer, hp, init_weights, target_tokenizer)
            search = self.options.search
            digest = outputs_digest(model, hp, search, self.splits["test"])
            recorded = record.recorded_outputs(folder, digest)
            if recorded is None:
                translator = Translator(
                    model, tokenizer, target_tokenizer, hp.max_length, search=search,
                    multilingual=self.mixed is not None, **self.language_options(),
                )  # fmt: skip
                metrics = self.evaluate(translator)
                path, samples, matches = record.export(folder, model, translator)
                exported = {"samples": samples, "reload_matches": matches}
            else:
                metrics, path, exported = record.reuse(folder, recorded)
            exported.update(final_digest=digest, heldout=heldout)
            return record.write(folder, model, report, metrics, path, exported)

    def train(self, folder, tokenizer, hp, init_weights=None, target_tokenizer=None):
        """Trains (or continues) the run in `folder`; returns `(model, report)`.

        Args:
            folder: a `RunFolder`.
            tokenizer: the shared `SubwordTokenizer` (the source side's with
                `target_tokenizer`).
            hp: the `HParams`.
            init_weights: optional .npz of weights to start from (fine-tuning) when the
                folder has no finished epoch yet.
            target_tokenizer: the target side's tokenizer (separate vocabularies); None:
                `tokenizer` is shared.

        Returns:
            The float32 model holding the final weights (best dev BLEU, or their average,
            or the last epoch's), and a report dict: `epochs`, `train_seconds` (totals
            across reruns), `history`, `best_epoch`, `final_weights`, `stopped`,
            `dtype_policy` (the one training used), `trainable_parameters`, `curves` and,
            with averaging, `dev_bleu_averaged` / `averaged_epochs`.
        """
        self.folder, self.hp, self.tokenizer = folder, hp, tokenizer
        self.target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
        serving = self.fit.start(init_weights)
        self.dev_pairs = self.evaluation.dev_pairs()
        self.translator = Translator(
            serving, tokenizer, self.target_tokenizer, hp.max_length, search=Greedy(),
            **self.language_options(),
        )  # fmt: skip
        self.evaluation.open_log(folder)
        return self.fit.run()

    def language_options(self):
        """`Translator`'s `language_tokens` and `languages` of an M2M-100 / NLLB run's
        direction (`language_tokens`), or none."""
        tokens = self.language_tokens
        if tokens is None:
            return {}
        pair = (tokens["source"], tokens["target_id"])
        return {"language_tokens": pair, "languages": tokens["languages"]}

    # The steps a caller also takes on their own ------------------------------------------

    def evaluate(self, translator):
        """The test step: BLEU, chrF and exact match of `translator` on the test split
        (`JobEvaluation.test_scores`)."""
        return self.evaluation.test_scores(translator)

    def settings(self):
        """What the run folder records and its reruns must match (`JobRecord.settings`)."""
        return self.record.settings()

    def tokenizer_sample(self, init, output):
        """A streamed train split's tokenizer sample, or None (`JobData.tokenizer_sample`)."""
        return self.data.tokenizer_sample(init, output)

    def _dev_scores(self):
        """`dev_bleu` and `dev_chrf` of `translator` on `dev_pairs` (`JobEvaluation.dev_scores`)."""
        return self.evaluation.dev_scores()
