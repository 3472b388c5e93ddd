"""The translation job: corpus → tokenizer → `fit`, epoch by epoch, in a durable run folder.

A `TrainingJob` is the whole job of `tfblocks-train` (and of `examples/translate.py`,
which calls it), built from `TrainingOptions`; its steps are its methods, in this order:
`tokenizers` (trained, or those of the run folder or of `init_from`), `build_hparams`
(with `init_from`: that run's architecture, the options' training settings),
`build_model`, then `train`, whose epochs read `train_input` and end in `end_epoch`,
`final_weights`, `evaluate` (the test split) and `export` (the preset and the SavedModel,
reloaded once). What the job keeps is described in `tfblocks.translation.run_folder`;
here is what it does with it:

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
  a `--max-train-minutes` stop, or a finished run given a larger `--epochs`. A rerun
  that ends with the final weights, test split and search that `metrics.json` records
  (`final_digest`) skips the test translation and the export, which are already there.
- A time limit counts only completed epochs: the epoch it cuts is training time, not an
  epoch (not in the history, never the best epoch; the rerun repeats it), and no epoch
  starts once the time is used up.
- Validation: loss, token accuracy and the unsmoothed cross-entropy on the dev split
  (Keras), plus dev BLEU and chrF (sacrebleu; BLEU tokenized for the target language or
  as `bleu_tokenize` says, `evaluation.choose_bleu_tokenize`) of greedy translations of up
  to `dev_sentences` dev sentences with the cached decoder, in the progress output and
  TensorBoard. Each epoch's history record also holds its training seconds (`seconds`)
  and those of its dev BLEU (`dev_seconds`, not training time). `early_stopping` stops
  after that many epochs without a higher dev BLEU; the best epoch's weights are kept and
  become the final model. When dev BLEU ties, the later epoch is the best (its weights
  had more training); early stopping still counts from the last epoch that raised the BLEU.
- `average_last=K` averages the last K epochs' weights (t2t `avg_checkpoints`) and keeps
  the average when its dev BLEU is at least the best single epoch's.
- `ema_decay` keeps a moving average of the weights during training; the run's weights
  (dev BLEU, `best.npz`, `last.npz`, the checkpoints, the final model) are then the
  averages, while the training state keeps the trained weights and the average, so a
  continued run continues both. `lora_rank` fine-tunes low-rank adapters only
  (`tfblocks.training.lora`); the run's weights are then the merged kernels, in the
  layout of the model without adapters.
- Several directions in one model (`tfblocks-train --pairs`): the train split is a
  `tfblocks.text.multilingual.MixedPairs` (the directions' tagged pairs drawn by
  temperature sampling, an epoch as many draws as their pairs), the dev and test splits
  their tagged pairs in turn. The tokenizer is trained balanced over the languages with
  their tags as symbols; dev BLEU and chrF are each direction's (`dev_bleu_de-en`, ...)
  and their mean (`dev_bleu`, which picks the best epoch and drives early stopping); the
  test scores are each direction's (`pairs` in `metrics.json`) and their means; the
  settings record the directions (`run_folder.run_pairs`).
- The dev and test rows are written into the folder (`heldout/`), so `tfblocks-evaluate`
  can repeat the test evaluation (a TSV's held-out rows exist nowhere else). The phases
  after training say what they do; the test translation shows the sentences done.

sacrebleu (the `examples` extra) is imported only when BLEU is computed.
"""

import dataclasses
import hashlib
import json
import os
import tempfile
import time
import warnings
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tfblocks import _checks, text
from tfblocks._files import check_directory, replace_file, write_json, write_text
from tfblocks.decoding import Greedy
from tfblocks.models import hparams, load_preset, load_target_tokenizer, save_preset
from tfblocks.models.builders import build_transformer
from tfblocks.models.hparams import TRAINING_FIELDS, parse_overrides
from tfblocks.models.preset import KIND
from tfblocks.serving.savedmodel import Translator
from tfblocks.text import distribute_dataset, make_dataset
from tfblocks.text.corpus import StreamedPairs, sample_pairs
from tfblocks.text.dataset import length_summary
from tfblocks.text.multilingual import MixedPairs, train_multilingual_tokenizer
from tfblocks.text.packing import packing_summary
from tfblocks.text.phrasebook import RUNNING_EXAMPLE
from tfblocks.training import compile_transformer, get_strategy
from tfblocks.training.callbacks import EpochProgress, FiniteLoss, TimeLimit
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
from tfblocks.translation.options import DEFAULT_PRESET
from tfblocks.translation.progress import (
    Counter,
    Timer,
    non_finite,
    say,
    stop_line,
    summary,
    time_left,
)
from tfblocks.translation.run_folder import (
    HELDOUT_DIR,
    TARGET_TOKENIZER_FILE,
    TOKENIZER_FILE,
    RunFolder,
)

# Strategies under which each worker reads its own shard of the training pairs and each
# replica takes whole batches from it (`distribute_dataset`); under the others (the
# default strategy, one device) the training input is `make_dataset`'s, as it is.
SHARDED_INPUT = (
    tf.distribute.MirroredStrategy,
    tf.distribute.MultiWorkerMirroredStrategy,
    tf.distribute.TPUStrategy,
)
# The test split is translated in batches of tfblocks-evaluate's default `--batch-size`:
# evaluating the held-out files repeats the same batches, and progress shows after each.
TEST_BATCH = 64
# What `metrics.json` holds of the test evaluation and the export (kept by a rerun that
# skips them).
_SCORES = ("bleu", "chrf", "exact_match", "sentences", "bleu_signature")
_EXPORTED = ("samples", "reload_matches")
_AFTER_TRAINING = ("evaluate", "export", "reload")


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


class Init(NamedTuple):
    """What `init_from` gives: the model, its tokenizers (target: None if shared) and its
    `HParams` (None when its preset holds none)."""

    model: object
    tokenizer: object
    target_tokenizer: object
    hparams: object


class TrainingJob:
    """The translation job: tokenizers → model → epochs → final weights → test → export.

    `run(output)` is the whole job of `tfblocks-train` in the run folder `output`;
    `train(folder, tokenizer, hp)` is its training part alone, on given tokenizers and
    HParams. The steps are the other public methods, in the order `run` calls them.
    While `train` runs, the job holds what its steps share: `folder`, `hp`, `tokenizer`
    and `target_tokenizer`, `strategy`, `model` (the one that trains), `serving` (the
    float32 model that translates: `model` itself, or a twin that gets the run's weights,
    `sync_weights`), `dev_pairs` and `translator` (dev BLEU), and `progress`.

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
        _checks.require_tensorflow("TrainingJob")
        self.options = options
        self.splits = splits
        self.log = log
        self.callbacks = tuple(callbacks)
        self.timer = Timer() if timer is None else timer
        self.stream = isinstance(splits["train"], StreamedPairs)
        # Several directions (`MixedPairs`): dev and test are their tagged pairs, in turn.
        self.mixed = splits["train"] if isinstance(splits["train"], MixedPairs) else None
        if self.mixed is not None and (options.separate_vocab or options.init_from):
            raise ValueError(
                "several directions (a `MixedPairs`) train one shared vocabulary from scratch, "
                f"got separate_vocab={options.separate_vocab!r}, "
                f"init_from={options.init_from!r}."
            )

    # The whole job -------------------------------------------------------------------------

    def run(self, output=None):
        """Trains (or continues) the run in the folder `output` (None: a new temporary
        one), evaluates it on the test split, exports and reloads it; returns the metrics
        (also in its `metrics.json`). What can be refused is refused before the folder is
        created or touched: a bad `init_from`, an unreadable streamed corpus."""
        with self.timer("data"):
            init = self.load_init()
            sample = self.tokenizer_sample(init, output)
        with RunFolder(output or tempfile.mkdtemp(prefix="tfblocks-train-")) as folder:
            with self.timer("data"):
                tokenizer, target_tokenizer = self.tokenizers(folder, init, sample)
            hp = self.build_hparams(tokenizer, target_tokenizer, init)
            # The final model goes to model/ and export/1: a folder there that tfblocks did
            # not write is refused now, not after the training.
            check_directory(folder.join("model"), KIND, arg="model")
            check_directory(folder.join("export", "1"), arg="export")
            heldout = self.write_heldout(folder)
            init_weights = None
            if init is not None:
                init_weights = folder.save_weights(init.model, "init.npz")
            with self.timer("train"):
                model, report = self.train(folder, tokenizer, hp, init_weights, target_tokenizer)
            search = self.options.search
            digest = outputs_digest(model, hp, search, self.splits["test"])
            recorded = self.recorded_outputs(folder, digest)
            if recorded is None:
                translator = Translator(
                    model, tokenizer, target_tokenizer, hp.max_length, search=search,
                    multilingual=self.mixed is not None,
                )  # fmt: skip
                metrics = self.evaluate(translator)
                path, samples, matches = self.export(folder, model, translator)
                exported = {"samples": samples, "reload_matches": matches}
            else:
                self.log(
                    "test translation and export skipped: metrics.json, model/ and export/1 "
                    "are those of these final weights, test split and search"
                )
                metrics = {key: recorded[key] for key in self._scores()}
                path = folder.join("export", "1")
                exported = {key: recorded[key] for key in _EXPORTED}
                for phase in _AFTER_TRAINING:  # the seconds they took when they ran
                    if isinstance(recorded.get("seconds"), dict) and phase in recorded["seconds"]:
                        self.timer.seconds.setdefault(phase, recorded["seconds"][phase])
            exported.update(final_digest=digest, heldout=heldout)
            return self._record(folder, model, report, metrics, path, exported)

    def load_init(self):
        """The `Init` of `init_from` (None without), checked: its model's vocabulary is
        its tokenizers', and the options change nothing of its architecture
        (`build_hparams`)."""
        if not self.options.init_from:
            return None
        preset = os.path.join(self.options.init_from, "model")
        try:
            model, tokenizer, hp = load_preset(preset)
            target_tokenizer = load_target_tokenizer(preset)
        except (ValueError, OSError) as error:  # named by the flag, not by `path`
            raise ValueError(
                f"--init-from={self.options.init_from!r} holds no model to start from: {error}"
            ) from error
        init = Init(model, tokenizer, target_tokenizer, hp)
        sizes = [t.vocabulary_size for t in init[1:3] if t is not None]
        if init.model.get_config()["vocab_size"] != max(sizes):
            raise ValueError(
                "the --init-from model's vocabulary does not match its tokenizer, got "
                f"--init-from={self.options.init_from!r}."
            )
        self.build_hparams(tokenizer, init.target_tokenizer or tokenizer, init)  # refused now
        return init

    def tokenizer_sample(self, init, output):
        """A streamed train split's tokenizer sample (two fast passes over its files,
        before the run folder is touched: an unreadable or misaligned file is refused
        now), or None when no tokenizer is trained (`init`, or the folder `output` has
        one)."""
        if not self.stream or init is not None:
            return None
        if output and os.path.exists(os.path.join(output, TOKENIZER_FILE)):
            return None  # continuing: training starts without reading the corpus first
        options = self.options
        sample = sample_pairs(self.splits["train"], options.tokenizer_sample, options.seed)
        if not sample:
            raise ValueError(f"the train split of {options.corpus} has no sentence pairs.")
        return sample

    def write_heldout(self, folder):
        """Writes the dev and test rows into `folder`'s `heldout/`, one sentence a line,
        named by split and language (`test.de`, `test.en`, ...), so that `tfblocks-evaluate`
        can repeat the test evaluation (a TSV's held-out rows are written nowhere else);
        returns `{split: (source file, target file)}`."""
        if self.mixed is not None:  # each direction's, untagged, in `heldout/de-en/`
            return {
                f"{pair.name} {split}": paths
                for pair in self.mixed.pairs
                for split, paths in _write_heldout(
                    folder.join(HELDOUT_DIR, pair.name), (pair.source, pair.target), pair.splits
                ).items()
            }
        languages = (self.options.source_lang, self.options.target_lang)
        return _write_heldout(folder.join(HELDOUT_DIR), languages, self.splits)

    def recorded_outputs(self, folder, digest):
        """`metrics.json`'s record when it holds the test scores and export of `digest`
        (`outputs_digest`: the same final weights, HParams, search and test split) and
        `model/` and `export/1` are there (`run` checked that they are as tfblocks wrote
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
        if any(key not in recorded for key in (*self._scores(), *_EXPORTED)):
            return None
        return recorded

    def settings(self):
        """What the run folder records and its reruns must match (`RunFolder.check_settings`):
        with several directions, `pairs` and `pair_temperature` instead of the languages
        (tfblocks-translate reads the targets there, `run_folder.run_pairs`)."""
        options = self.options
        preset, overrides = options.recipe()
        settings = {
            "corpus": corpus_fingerprint(self.splits["train"]),
            "source_lang": options.source_lang,
            "target_lang": options.target_lang,
            "vocab_size": options.vocab_size,
            "tokenizer_model": options.tokenizer_model,
            "tokenizer_sample": options.tokenizer_sample,
            "hparams": preset,
            "hparams_override": parse_overrides(overrides),
            "init_from": os.path.abspath(options.init_from) if options.init_from else None,
            "seed": options.seed,
            "accumulate_steps": options.accumulate_steps,
            "ema": options.ema_decay,
            "lora_rank": options.lora_rank,
            "lora_ffn": options.lora_ffn,
            "separate_vocab": options.separate_vocab,
            "stream": self.stream,
            "steps_per_epoch": options.steps_per_epoch,
            "bleu_tokenize": options.bleu_tokenize,
        }
        if self.mixed is not None:
            settings.update(source_lang=None, target_lang=None, pairs=self.mixed.names,
                            pair_temperature=self.mixed.temperature)  # fmt: skip
        return settings

    def tokenizers(self, folder, init, sample=None):
        """The tokenizers step: `(source, target)` tokenizers (the same one when shared):
        `init`'s, the folder's own when it has them, or trained on the train split (its
        `sample`, streamed); saved in the folder. Checks and records the settings first."""
        options = self.options
        settings = self.settings()
        # None: a new folder, or one whose start failed before an epoch was recorded.
        saved = folder.check_settings(settings, must_match=list(settings))
        # The source (or shared) tokenizer, and with separate vocabularies the target's.
        paths = [folder.join(TOKENIZER_FILE), folder.join(TARGET_TOKENIZER_FILE)]
        if not options.separate_vocab and (init is None or init.target_tokenizer is None):
            paths.pop()
        if init is not None:
            tokenizers = [init.tokenizer, init.target_tokenizer]
        elif saved is not None and all(os.path.exists(p) for p in paths):
            tokenizers = [text.SubwordTokenizer.load(p) for p in paths]
        elif self.mixed is not None:  # balanced over languages, the tags as symbols
            tokenizers = [train_multilingual_tokenizer(
                self.mixed, options.vocab_size, options.tokenizer_model,
                sample=options.tokenizer_sample, seed=options.seed,
            )] * 2  # fmt: skip
        else:
            tokenizers = text.train_tokenizers(
                self.splits["train"] if sample is None else sample,
                vocab_size=options.vocab_size, model_type=options.tokenizer_model,
                shared=not options.separate_vocab, sample=options.tokenizer_sample,
                seed=options.seed,
            )  # fmt: skip
        tokenizer, target_tokenizer = tokenizers[0], tokenizers[-1] or tokenizers[0]
        for path, made in zip(paths, (tokenizer, target_tokenizer), strict=False):
            if saved is None or not os.path.exists(path):
                replace_file(path, made.save)
        sizes = {
            k: "streamed" if k == "train" and self.stream else len(v)
            for k, v in self.splits.items()
        }
        if target_tokenizer is tokenizer:
            vocabulary = f"shared vocabulary {tokenizer.vocabulary_size}"
        else:
            vocabulary = (
                f"vocabularies {tokenizer.vocabulary_size} ({options.source_lang}) and "
                f"{target_tokenizer.vocabulary_size} ({options.target_lang})"
            )
        self.log(f"pairs {sizes}; {vocabulary} ({options.tokenizer_model})")
        if self.mixed is not None:
            self.log(f"directions mixed by temperature sampling: {self.mixed.summary()}")
        return tokenizer, target_tokenizer

    def build_hparams(self, tokenizer, target_tokenizer, init=None):
        """The HParams of the run: the preset with the overrides, the tokenizers'
        vocabulary, the accumulation, untied embeddings for separate vocabularies.

        Fine-tuning (`init`, when its preset holds HParams): the init run's HParams, so
        its architecture whole (an imported model's options, its vocabularies and
        tying), with the training settings (`TRAINING_FIELDS`) of the overrides (and of
        the preset, when `hparams` names one) and the accumulation. An override or a
        preset that would change the architecture is refused, naming the flag and value.
        """
        options = self.options
        preset, override_text = options.recipe()
        overrides = parse_overrides(override_text)
        if init is not None and init.hparams is not None:
            hp = _fine_tuning_hparams(init.hparams, preset, overrides, options.accumulate_steps)
            check_max_length(hp, options.batch_tokens)
            return hp
        untied = (
            {} if target_tokenizer is tokenizer else {"shared_embedding_and_softmax_weights": False}
        )
        return hparams(
            preset or DEFAULT_PRESET,
            vocab_size=max(tokenizer.vocabulary_size, target_tokenizer.vocabulary_size),
            accumulate_steps=options.accumulate_steps, **{**overrides, **untied},
        )  # fmt: skip

    # Training ------------------------------------------------------------------------------

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
        options = self.options
        self.folder, self.hp, self.tokenizer = folder, hp, tokenizer
        self.target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
        keras.utils.set_random_seed(options.seed)
        self.progress = folder.progress()
        _check_steps_per_epoch(folder, self.progress, options.steps_per_epoch)
        self.build_model(init_weights)
        if options.shapes == "packed" and not (self.stream or self.sharded) and self.mixed is None:
            self.log(self._packing_line())
        self.dev = make_dataset(
            self.splits["dev"], tokenizer, self.target_tokenizer,
            batch_tokens=options.batch_tokens, max_length=hp.max_length, shuffle=False,
            shapes=options.shapes,
        )  # fmt: skip
        self.dev_pairs = self._dev_pairs()
        self.translator = Translator(
            self.serving, tokenizer, self.target_tokenizer, hp.max_length, search=Greedy()
        )
        self.writer = tf.summary.create_file_writer(folder.join("logs", "validation"))
        self.spent = 0.0  # this invocation's training time
        self.cut = False  # whether the time limit cut an epoch short
        self.first = self.progress["epochs"]
        stream = options.steps_per_epoch is not None
        stopped = self._fit_stream() if stream else self._fit_epochs()
        self.log(stop_line(stopped, self.progress, options, cut=self.cut))
        self.sync_weights()
        report = self.final_weights()
        report.update(
            stopped=stopped, train_seconds=round(self.progress["train_seconds"], 1),
            dtype_policy=self.policy, trainable_parameters=self.trainable,
        )  # fmt: skip
        report["curves"] = self._write_curves(report)
        return self.serving, report

    def build_model(self, init_weights=None):
        """The model step: builds and compiles `model` under the strategy and dtype policy
        (with `init_weights` when the folder has no finished epoch; then LoRA adapters),
        restores the folder's training state, and makes `serving`.

        Translation (dev BLEU, the final model, its exports) computes in float32 on a
        plain model: under a mixed policy, a moving average or adapters it runs on a
        float32 twin without adapters that gets the run's weights (`sync_weights`)."""
        options, hp, progress = self.options, self.hp, self.progress
        strategy = options.strategy
        self.strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
        self.sharded = isinstance(self.strategy, SHARDED_INPUT)
        if self.sharded:
            patch_keras()  # Keras' `fit` on replicas' batches of different shapes
        self.policy, xla = training_execution(options.shapes, options.dtype_policy)
        with self.strategy.scope():
            model = build_transformer(hp, dtype=self.policy)
            if init_weights is not None and not progress["epochs"]:
                load_weights(model, init_weights)  # before the adapters: the plain layout
            if options.lora_rank:
                adapted = enable_lora(model, options.lora_rank, options.lora_ffn)
            compile_transformer(model, hp, jit_compile=xla, ema_decay=options.ema_decay)
        self.model = model
        plain = self.policy == "float32" and options.ema_decay is None and not options.lora_rank
        self.serving = model if plain else float32_twin(hp, model)
        if options.dtype_policy == "auto" and self.policy != "float32":
            self.log(f"training under {self.policy} without XLA (dtype_policy='auto': this "
                     f"CPU has bfloat16 instructions, shapes={options.shapes!r}); translating "
                     "in float32")  # fmt: skip
        if progress["epochs"]:
            self.folder.restore(model)  # weights, optimizer (built) and dropout seeds
            self.log(f"continuing {self.folder.path} after epoch {progress['epochs']}")
        elif init_weights is not None:
            self.log(f"starting from the weights of {init_weights}")
        self.trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        if options.lora_rank:
            self.log(f"LoRA rank {options.lora_rank} on {len(adapted)} projections: "
                     f"{self.trainable:,} trainable parameters of "
                     f"{self.serving.count_params():,}")  # fmt: skip
        return model

    def _packing_line(self):
        """What packing makes of the train split, in words: its rows, batches and padding."""
        max_length = self.hp.max_length
        lengths = length_summary(
            self.splits["train"], self.tokenizer, self.target_tokenizer, max_length
        )
        keep = np.array(lengths["keep"])
        packed = packing_summary(
            np.array(lengths["source_lengths"])[keep], np.array(lengths["target_lengths"])[keep],
            max_length, self.options.batch_tokens,
        )  # fmt: skip
        return (f"packed rows: {packed['rows']:,} rows of {max_length} positions, "
                f"{packed['batches']:,} batches an epoch; padding: "
                f"{packed['target_padding']:.1%} of the target positions, "
                f"{packed['source_padding']:.1%} of the source positions")  # fmt: skip

    def sync_weights(self):
        """The run's weights now, given to `serving`: `{path: array}` in the plain model's
        layout, the trained ones or their moving average, adapters merged."""
        weights = run_weights(self.model, ema=self.options.ema_decay is not None)
        if self.serving is not self.model:
            assign_weights(self.serving, weights)
        return weights

    def train_input(self, seed, start_step=0):
        """An epoch's dataset; with `steps_per_epoch`, the endless stream from `start_step`."""
        options = self.options
        args = (self.splits["train"], self.tokenizer, self.target_tokenizer)
        kwargs = dict(batch_tokens=options.batch_tokens, max_length=self.hp.max_length,
                      seed=seed, shapes=options.shapes,
                      repeat=options.steps_per_epoch is not None)  # fmt: skip
        if self.sharded:  # each worker reads its shard; the budget is the whole step's
            return distribute_dataset(self.strategy, *args, start_step=start_step, **kwargs)
        data = make_dataset(*args, **kwargs)
        return data.skip(start_step) if start_step else data

    def end_epoch(self, epoch, logs, elapsed, guard, limit):
        """Records a finished (or time-cut) epoch; returns why training stops, or None."""
        options, progress, folder = self.options, self.progress, self.folder
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
        logs = dict(logs, seconds=elapsed)
        if self.dev_pairs:
            start = time.perf_counter()
            logs.update(self._dev_scores())
            logs["dev_seconds"] = time.perf_counter() - start
            with self.writer.as_default():  # epoch_bleu, epoch_chrf (each direction's too)
                for key in [k for k in logs if k.startswith(("dev_bleu", "dev_chrf"))]:
                    tf.summary.scalar(f"epoch_{key[4:]}", logs[key], step=epoch)
            self.writer.flush()
            self.log(f"epoch {epoch + 1}: dev BLEU {logs['dev_bleu']} chrF {logs['dev_chrf']} "
                     f"({self._dev_count()}, greedy, {logs['dev_seconds']:.1f} s)"
                     f"{self._per_pair(logs, 'dev_')}")  # fmt: skip
        progress["epochs"] = epoch + 1
        progress["history"].append({"epoch": epoch + 1, **logs})
        best = bool(self.dev_pairs) and _record_bleu(progress, logs["dev_bleu"], epoch + 1)
        # One commit: a kill before it repeats the epoch, leaving no file of it behind.
        folder.commit(
            self.model, progress, epoch=epoch + 1, best=best, keep=keep, weights=weights,
            variables=bool(options.lora_rank),  # its .h5 keeps merged kernels, no adapters
        )  # fmt: skip
        if options.time_limit:
            to_go = options.epochs - epoch - 1
            self.log(time_left(self.spent, options.time_limit, elapsed, to_go))
        improved = progress["improved_epoch"] or progress["best_epoch"]
        if (
            options.early_stopping
            and improved is not None
            and progress["epochs"] - improved >= options.early_stopping
        ):
            return "early stopping"
        return None

    def final_weights(self):
        """Loads the weights the run ends with into `serving` (the best dev-BLEU epoch's,
        or the last one's; their average over the last `average_last` epochs when its dev
        BLEU is not lower); returns the report's description of them."""
        folder, model, progress = self.folder, self.serving, self.progress
        average_last = self.options.average_last
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
        if not self.dev_pairs:
            report["final_weights"] = averaged
            return report
        self.log(f"dev BLEU of the {averaged}: translating {self._dev_count()}")
        report["dev_bleu_averaged"] = self._dev_scores()["dev_bleu"]
        if report["dev_bleu_averaged"] >= (progress["best_bleu"] or 0.0):
            report["final_weights"] = averaged
        else:
            for variable, value in zip(model.weights, current, strict=True):
                variable.assign(value)
        return report

    def _fit_callbacks(self):
        """The callbacks of a `fit`: TensorBoard, progress, the job's, the NaN guard and
        the time limit (what is left of it), and the guard and limit themselves."""
        options = self.options
        guard = FiniteLoss()
        left = options.time_limit and max(options.time_limit - self.spent, 1e-3)
        limit = TimeLimit(left) if left else None
        listed = [
            keras.callbacks.TensorBoard(self.folder.join("logs"), write_graph=False),
            EpochProgress(options.epochs),
            *self.callbacks,
            guard,
        ]
        return [*listed, *([limit] if limit else [])], guard, limit

    def _fit_stream(self):
        """With `steps_per_epoch`: one `fit` for the epochs left, on one endless stream of
        passes that it keeps iterating from epoch to epoch; each epoch is recorded at its
        end (`_EndEpoch`). A continued run starts the stream at the step where its first
        epoch starts. Returns why training stopped."""
        options, first = self.options, self.first
        if first >= options.epochs:
            return "epochs"
        listed, guard, limit = self._fit_callbacks()
        ending = _EndEpoch(lambda e, logs, seconds: self.end_epoch(e, logs, seconds, guard, limit))
        data = self.train_input(options.seed * 100_003, first * options.steps_per_epoch)
        self.model.fit(
            data, validation_data=self.dev, initial_epoch=first, epochs=options.epochs,
            steps_per_epoch=options.steps_per_epoch, callbacks=[*listed, ending],
            shuffle=False, verbose=options.verbose,
        )  # fmt: skip
        return ending.stopped or "epochs"

    def _fit_epochs(self):
        """One `fit` and one dataset for each epoch left; returns why training stopped."""
        options = self.options
        for epoch in range(self.first, options.epochs):
            if options.time_limit and self.spent >= options.time_limit:
                return "time limit"  # used up: an epoch started now would only be cut
            listed, guard, limit = self._fit_callbacks()
            data = self.train_input(options.seed * 100_003 + epoch)
            start = time.perf_counter()
            with warnings.catch_warnings():
                # A streamed corpus has no known number of batches: its epoch ends when
                # the files do, which Keras reports as "Your input ran out of data".
                if self.stream or self.mixed is not None:
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

    def _dev_pairs(self):
        """The dev pairs that dev BLEU translates: the first `dev_sentences` (of each
        direction, tagged, with several: `{name: pairs}`)."""
        count = self.options.dev_sentences
        if self.mixed is None:
            return self.splits["dev"][:count]
        return {pair.name: pair.tagged("dev")[:count] for pair in self.mixed.pairs} if count else {}

    def _dev_scores(self):
        """`dev_bleu` and `dev_chrf`; with several directions, each one's
        (`dev_bleu_de-en`, ...) and their means, which choose the best epoch."""
        from tfblocks.translation import evaluation  # sacrebleu: only where BLEU is computed

        options = self.options
        if self.mixed is None:
            metrics, _ = evaluation.evaluate(
                self.translator, self.dev_pairs,
                target_lang=options.target_lang, tokenize=options.bleu_tokenize,
            )  # fmt: skip
            return {"dev_bleu": metrics["bleu"], "dev_chrf": metrics["chrf"]}
        scores = {}
        for pair in self.mixed.pairs:
            metrics, _ = evaluation.evaluate(
                self.translator, self.dev_pairs[pair.name],
                target_lang=pair.target, tokenize=options.bleu_tokenize,
            )  # fmt: skip
            scores[f"dev_bleu_{pair.name}"] = metrics["bleu"]
            scores[f"dev_chrf_{pair.name}"] = metrics["chrf"]
        for name in ("dev_bleu", "dev_chrf"):
            values = [scores[f"{name}_{pair}"] for pair in self.mixed.names]
            scores[name] = round(sum(values) / len(values), 2)
        return scores

    def _write_curves(self, report):
        """Writes the run's `curves.png`; returns its path, or None without matplotlib."""
        try:
            import matplotlib  # noqa: F401  (the `examples` extra)
        except ImportError:
            self.log(
                "curves.png not written: matplotlib is missing (pip install 'tfblocks[examples]')"
            )
            return None
        folder = self.folder
        return plot_curves(
            folder.join(CURVES_FILE),
            report["history"],
            best_epoch=report["best_epoch"],
            averaged_epochs=report.get("averaged_epochs"),
            title=f"{os.path.basename(os.path.normpath(folder.path))}: {report['final_weights']}",
        )

    # After training ------------------------------------------------------------------------

    def evaluate(self, translator):
        """BLEU, chrF and exact match of `translator` on the test split, with the
        sentences done as it goes; shows the first three translations."""
        from tfblocks.translation import evaluation  # sacrebleu: only where BLEU is computed

        test = self.splits["test"]
        self.log(f"translating the test split: {len(test)} sentences, {TEST_BATCH} at a time")
        if self.mixed is not None:
            return self._evaluate_pairs(translator, evaluation)
        counter = Counter("test translation", "sentences", self.log)
        with self.timer("evaluate"):
            metrics, hypotheses = evaluation.evaluate(
                translator, test, TEST_BATCH, counter,
                self.options.target_lang, self.options.bleu_tokenize,
            )  # fmt: skip
        self.log("test translations (first 3):")
        for (source, reference), hypothesis in list(zip(test, hypotheses, strict=True))[:3]:
            self.log(f"  {source}\n    reference:   {reference}\n    translation: {hypothesis}")
        return metrics

    def _evaluate_pairs(self, translator, evaluation):
        """`evaluate` for several directions: each one's test scores under `pairs`, and
        the means of their BLEU, chrF and exact match over all `sentences`."""
        scores = {}
        for pair in self.mixed.pairs:
            counter = Counter(f"test translation {pair.name}", "sentences", self.log)
            with self.timer("evaluate"):
                scores[pair.name], hypotheses = evaluation.evaluate(
                    translator, pair.tagged("test"), TEST_BATCH, counter,
                    pair.target, self.options.bleu_tokenize,
                )  # fmt: skip
            self.log(f"  {pair.name}: BLEU {scores[pair.name]['bleu']} chrF "
                     f"{scores[pair.name]['chrf']}; first: {pair.splits['test'][0][0]} -> "
                     f"{hypotheses[0]}")  # fmt: skip
        metrics = {key: round(sum(s[key] for s in scores.values()) / len(scores), digits)
                   for key, digits in (("bleu", 2), ("chrf", 2), ("exact_match", 4))}  # fmt: skip
        metrics.update(
            sentences=sum(s["sentences"] for s in scores.values()),
            bleu_signature="; ".join(dict.fromkeys(s["bleu_signature"] for s in scores.values())),
            pairs=scores,
        )
        return metrics

    def _dev_count(self):
        """The dev sentences that dev BLEU translates, in words."""
        if self.mixed is None:
            return f"{len(self.dev_pairs)} dev sentences"
        count = sum(map(len, self.dev_pairs.values()))
        return f"{count} dev sentences of {len(self.dev_pairs)} directions"

    def _per_pair(self, logs, prefix):
        """Each direction's BLEU of `logs` (keys `PREFIXbleu_de-en`), in words; "" for one pair."""
        if self.mixed is None:
            return ""
        return "; " + ", ".join(
            f"{name} {logs[f'{prefix}bleu_{name}']}" for name in self.mixed.names
        )

    def _scores(self):
        """What `metrics.json` holds of the test evaluation (a rerun keeps them)."""
        return _SCORES if self.mixed is None else (*_SCORES, "pairs")

    def export(self, folder, model, translator):
        """Writes the model (`model/`, a KerasHub preset) and the SavedModel (`export/1`),
        reloads the SavedModel and translates a few test sentences (with the running
        example for a Japanese source) both ways; returns the SavedModel's path, the
        reloaded model's `{sentence: translation}` and whether both translated alike."""
        samples = [source for source, _ in self.splits["test"][:2]]
        if self.mixed is None and self.options.source_lang == "ja":  # the running example
            samples.insert(0, RUNNING_EXAMPLE[0])
        self.log(f"exporting the model to {folder.join('model')} and the SavedModel to "
                 f"{folder.join('export', '1')}")  # fmt: skip
        start = time.perf_counter()
        with self.timer("export"):
            save_preset(model, self.tokenizer, folder.join("model"), self.hp,
                        self.target_tokenizer)  # fmt: skip
            path = translator.export(folder.join("export", "1"))
        self.log(f"  exported in {time.perf_counter() - start:.0f} s; reloading the "
                 "SavedModel to compare its translations")  # fmt: skip
        with self.timer("reload"):
            reloaded = tf.saved_model.load(path).signatures["serving_default"]
            again = reloaded(text=tf.constant(samples))["translation"].numpy()
        in_memory = translator(samples).numpy()
        self.log("translations (in memory | reloaded SavedModel):")
        for sample, a, b in zip(samples, in_memory, again, strict=True):
            self.log(f"  {sample} -> {a.decode()} | {b.decode()}")
        translations = {t: b.decode() for t, b in zip(samples, again, strict=True)}
        return path, translations, bool((in_memory == again).all())

    def _record(self, folder, model, report, metrics, export_path, exported):
        """Adds the run and the export's translations (`exported`) to the test metrics,
        writes `metrics.json` and shows the summary; returns the metrics."""
        options = self.options
        seconds = {k: round(v, 1) for k, v in self.timer.seconds.items()}
        seconds["train"] = report["train_seconds"]  # all reruns of this folder together
        preset, overrides = options.recipe()
        metrics.update(
            preset=preset,
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
        self.log(summary(metrics, report, folder, export_path, metrics_path, exact_match,
                         heldout=metrics.get("heldout")))  # fmt: skip
        return metrics


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


def _write_heldout(directory, languages, splits):
    """Writes the dev and test rows of `splits` into `directory`, one sentence a line,
    named by split and language; returns `{split: (source file, target file)}`."""
    os.makedirs(directory, exist_ok=True)
    written = {}
    for split in ("dev", "test"):
        paths = tuple(os.path.join(directory, f"{split}.{lang}") for lang in languages)
        for side, path in enumerate(paths):
            write_text(path, "".join(pair[side] + "\n" for pair in splits[split]))
        written[split] = paths
    return written


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


def _fine_tuning_hparams(init_hp, preset, overrides, accumulate_steps):
    """`init_hp` (an `--init-from` run's HParams) with the training settings of `preset`
    (None: none) and `overrides`; a ValueError naming the flag and the value when they
    would change its architecture (any field but `TRAINING_FIELDS`, and `max_length`
    with a position table, `pos="emb"`)."""
    training = set(TRAINING_FIELDS) - ({"max_length"} if init_hp.pos == "emb" else set())
    wanted = hparams(preset, **overrides) if preset else None
    # Set by the tokenizers, not by a preset: compared only when an override sets them.
    vocabulary = {"vocab_size", "source_vocab_size", "shared_embedding_and_softmax_weights"}
    for field in dataclasses.fields(init_hp):
        name, have = field.name, getattr(init_hp, field.name)
        if name in overrides:
            value, flag = overrides[name], "--hparams-override"
        elif preset and name not in vocabulary:
            value, flag = getattr(wanted, name), f"--hparams={preset!r}"
        else:
            continue
        if name not in training and value != have:
            table = " (not with its position table)" if init_hp.pos == "emb" else ""
            raise ValueError(
                f"`--init-from` keeps its model's architecture, {name}={have!r}, got {flag} "
                f"with {name}={value!r}; a fine-tuning run may change only training settings "
                f"(dropout, label smoothing, learning rate, optimizer, max_length{table})."
            )
    changes = {name: getattr(wanted, name) for name in training} if preset else {}
    changes.update({name: value for name, value in overrides.items() if name in training})
    return dataclasses.replace(init_hp, **{**changes, "accumulate_steps": accumulate_steps})


def check_max_length(hp, batch_tokens):
    """Refuses a `max_length` below 2 (one subword and EOS) and a batch budget that cannot
    hold a pair of `max_length` tokens."""
    if hp.max_length < 2:
        raise ValueError(
            f"`--hparams-override` max_length must be at least 2, got max_length={hp.max_length}."
        )
    if batch_tokens < hp.max_length:
        raise ValueError(
            f"`--batch-tokens` must be at least max_length={hp.max_length}, got "
            f"--batch-tokens={batch_tokens}."
        )


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


def write_metrics(output_dir, metrics):
    """Writes `metrics.json` into `output_dir` atomically; returns its path."""
    os.makedirs(output_dir, exist_ok=True)
    return write_json(os.path.join(output_dir, "metrics.json"), metrics)
