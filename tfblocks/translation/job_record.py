"""The record part of a `TrainingJob`: what the run folder records of the job.

- The settings (`run.json`): what the folder was made with, which its reruns must match
  (`RunFolder.check_settings`): the corpus fingerprint, the languages (with several
  directions `pairs` and `pair_temperature` instead, `run_folder.run_pairs`), the
  tokenizer, the hparams set and its overrides, `init_from`, the seed and the other settings that
  change what an epoch trains.
- The export: the final model as a KerasHub preset (`model/`) and as a SavedModel
  (`export/1`), which is reloaded once to check that it translates a few test sentences
  (with the running example for a Japanese source) as the model in memory does.
- The metrics (`metrics.json`): the test scores, the export's translations and the run
  (epochs, history, best epoch, final weights, seconds across reruns), with
  `final_digest`, a digest of the final weights, HParams, search and test split that the
  scores and the exports come from. A rerun that ends with the same digest skips the
  test translation and the export, which are already there, and keeps their record.
"""

import hashlib
import json
import os
import time
import weakref

import numpy as np
import tensorflow as tf

from tfblocks._files import write_json
from tfblocks.models import save_preset
from tfblocks.models.hyperparameters import parse_overrides
from tfblocks.text.multilingual import MixedPairs
from tfblocks.text.phrasebook import RUNNING_EXAMPLE
from tfblocks.text.streamed import StreamedPairs
from tfblocks.translation.progress import summary
from tfblocks.translation.searches import search_beam_size

# What `metrics.json` holds of the export, and the phases after training whose seconds
# it keeps (a rerun that skips them keeps these).
EXPORTED = ("samples", "reload_matches")
_AFTER_TRAINING = ("evaluate", "export", "reload")


class JobRecord:
    """The record part of `job`: its settings, export and metrics in the run folder.

    Args:
        job: the `TrainingJob` it serves.

    Example:

    >>> from tfblocks.translation.job import TrainingJob
    >>> from tfblocks.translation.options import TrainingOptions
    >>> job = TrainingJob(TrainingOptions(epochs=1, seed=7), {"train": [("a", "b")]})
    >>> settings = job.record.settings()
    >>> settings["seed"], settings["corpus"] == corpus_fingerprint([("a", "b")])
    (7, True)
    """

    def __init__(self, job):
        self.job = weakref.proxy(job)  # weak: see `TrainingJob.__init__`
        self.options = job.options

    def settings(self):
        """What the run folder records and its reruns must match (`RunFolder.check_settings`):
        with several directions, `pairs` and `pair_temperature` instead of the languages
        (tfblocks-translate reads the targets there, `run_folder.run_pairs`)."""
        options, job = self.options, self.job
        hparams_set, overrides = options.recipe()
        settings = {
            "corpus": corpus_fingerprint(job.splits["train"]),
            "source_lang": options.source_lang,
            "target_lang": options.target_lang,
            "vocab_size": options.vocab_size,
            "tokenizer_model": options.tokenizer_model,
            "tokenizer_sample": options.tokenizer_sample,
            "hparams": hparams_set,
            "hparams_override": parse_overrides(overrides),
            "init_from": os.path.abspath(options.init_from) if options.init_from else None,
            "seed": options.seed,
            "accumulate_steps": options.accumulate_steps,
            "ema": options.ema_decay,
            "lora_rank": options.lora_rank,
            "lora_ffn": options.lora_ffn,
            "separate_vocab": options.separate_vocab,
            "stream": job.stream,
            "steps_per_epoch": options.steps_per_epoch,
            "bleu_tokenize": options.bleu_tokenize,
            # What the test translation and export/1 decode with, and so every command
            # that is given no --beam-size (`run_folder.run_beam_size`); not binding.
            "beam_size": search_beam_size(options.search),
        }
        if job.mixed is not None:
            settings.update(source_lang=None, target_lang=None, pairs=job.mixed.names,
                            pair_temperature=job.mixed.temperature)  # fmt: skip
        if job.language_tokens is not None:  # an M2M-100 / NLLB direction
            settings["language_tokens"] = job.language_tokens
        return settings

    def check_settings(self, folder):
        """Records the settings in `folder`, or checks them against those it was trained
        with; returns those (None: the folder is new, nothing in it was made yet)."""
        settings = self.settings()
        return folder.check_settings(settings, must_match=[k for k in settings if k != "beam_size"])

    # After training -----------------------------------------------------------------------

    def recorded_outputs(self, folder, digest):
        """`metrics.json`'s record when it holds the test scores and export of `digest`
        (`outputs_digest`: the same final weights, HParams, search and test split) and
        `model/` and `export/1` are there (the job checked that they are as tfblocks wrote
        them); None otherwise: they are made again."""
        paths = [folder.join(n) for n in ("metrics.json", "model/config.json",
                                          "export/1/saved_model.pb")]  # fmt: skip
        if not all(os.path.isfile(p) for p in paths):
            return None
        try:
            with open(paths[0], encoding="utf-8") as f:
                recorded = json.load(f)
        except (OSError, ValueError):  # not what tfblocks wrote: made again, then replaced
            return None
        if not isinstance(recorded, dict) or recorded.get("final_digest") != digest:
            return None
        if any(key not in recorded for key in (*self.job.evaluation.score_keys(), *EXPORTED)):
            return None
        return recorded

    def reuse(self, folder, recorded):
        """What a rerun keeps of the `recorded` outputs (`recorded_outputs`): the test
        metrics, the SavedModel's path and the export's record; the seconds of the phases
        after training are those they took when they ran."""
        job = self.job
        job.log(
            "test translation and export skipped: metrics.json, model/ and export/1 "
            "are those of these final weights, test split and search"
        )
        metrics = {key: recorded[key] for key in job.evaluation.score_keys()}
        exported = {key: recorded[key] for key in EXPORTED}
        for phase in _AFTER_TRAINING:
            if isinstance(recorded.get("seconds"), dict) and phase in recorded["seconds"]:
                job.timer.seconds.setdefault(phase, recorded["seconds"][phase])
        return metrics, folder.join("export", "1"), exported

    def export(self, folder, model, translator):
        """Writes the model (`model/`, a KerasHub preset) and the SavedModel (`export/1`),
        reloads the SavedModel and translates a few test sentences (with the running
        example for a Japanese source) both ways; returns the SavedModel's path, the
        reloaded model's `{sentence: translation}` and whether both translated alike."""
        job = self.job
        samples = [source for source, _ in job.splits["test"][:2]]
        if job.mixed is None and self.options.source_lang == "ja":  # the running example
            samples.insert(0, RUNNING_EXAMPLE[0])
        job.log(f"exporting the model to {folder.join('model')} and the SavedModel to "
                f"{folder.join('export', '1')}")  # fmt: skip
        start = time.perf_counter()
        with job.timer("export"):
            save_preset(model, job.tokenizer, folder.join("model"), job.hp,
                        job.target_tokenizer)  # fmt: skip
            path = translator.export(folder.join("export", "1"))
        job.log(f"  exported in {time.perf_counter() - start:.0f} s; reloading the "
                "SavedModel to compare its translations")  # fmt: skip
        with job.timer("reload"):
            reloaded = tf.saved_model.load(path).signatures["serving_default"]
            again = reloaded(text=tf.constant(samples))["translation"].numpy()
        in_memory = translator(samples).numpy()
        job.log("translations (in memory | reloaded SavedModel):")
        for sample, a, b in zip(samples, in_memory, again, strict=True):
            job.log(f"  {sample} -> {a.decode()} | {b.decode()}")
        translations = {t: b.decode() for t, b in zip(samples, again, strict=True)}
        return path, translations, bool((in_memory == again).all())

    def write(self, folder, model, report, metrics, export_path, exported):
        """Adds the run and the export's record (`exported`) to the test metrics,
        writes `metrics.json` and shows the summary; returns the metrics."""
        options, job = self.options, self.job
        seconds = {k: round(v, 1) for k, v in job.timer.seconds.items()}
        seconds["train"] = report["train_seconds"]  # all reruns of this folder together
        hparams_set, overrides = options.recipe()
        metrics.update(
            preset=hparams_set,
            hparams_override=overrides,
            epochs=report["epochs"],
            history=report["history"],
            best_epoch=report["best_epoch"],
            final_weights=report["final_weights"],
            dtype_policy=report["dtype_policy"],
            stopped=report["stopped"],
            final_loss=report["history"][-1]["loss"] if report["history"] else None,
            parameters=model.count_params(),
            trainable_parameters=report["trainable_parameters"],
            **exported,
            seconds=seconds,
        )
        for key in ("dev_bleu_averaged", "averaged_epochs"):
            if key in report:
                metrics[key] = report[key]
        metrics_path = write_metrics(folder.path, metrics)
        exact_match = options.corpus == "the phrasebook"
        job.log(summary(metrics, report, folder, export_path, metrics_path, exact_match,
                        heldout=metrics.get("heldout")))  # fmt: skip
        return metrics


def outputs_digest(model, hp, search, test):
    """A short SHA-256 of what the test scores and the exports are made of: `model`'s
    weights (values, in order), the HParams, the search and the `test` pairs."""
    digest = hashlib.sha256(repr((hp, search)).encode("utf-8"))
    for variable in model.weights:
        digest.update(np.ascontiguousarray(np.asarray(variable)).tobytes())
    for source, target in test:
        digest.update(source.encode("utf-8") + b"\t" + target.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def corpus_fingerprint(pairs):
    """A short SHA-256 of the pairs, to tell whether a run folder saw the same corpus (a
    `StreamedPairs`: its own, from its files' sizes, first and last MiB; a `MixedPairs`:
    its own, of its directions, temperature and pairs)."""
    if isinstance(pairs, StreamedPairs | MixedPairs):
        return pairs.fingerprint()
    digest = hashlib.sha256()
    for source, target in pairs:
        digest.update(source.encode("utf-8") + b"\t" + target.encode("utf-8") + b"\n")
    return digest.hexdigest()[:16]


def write_metrics(output_dir, metrics):
    """Writes `metrics.json` into `output_dir` atomically; returns its path."""
    os.makedirs(output_dir, exist_ok=True)
    return write_json(os.path.join(output_dir, "metrics.json"), metrics)
