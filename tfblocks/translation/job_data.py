"""The data part of a `TrainingJob`: what it trains on and with, before and during the fit.

- The model to start from: `init_from` names a run folder whose `model/` preset gives the
  weights, tokenizers and HParams (`JobData.load_init`), refused before the run folder is
  touched when its vocabulary is not its tokenizers' or the options would change its
  architecture.
- The tokenizers: those of `init_from`, the run folder's own when it has them, or trained
  on the train split (a streamed corpus: on a sample read before the folder is touched;
  several directions: balanced over the languages, their tags as symbols).
- The HParams: the hparams set with the overrides and the tokenizers' vocabulary; with
  `init_from`, that run's architecture and the options' training settings.
- The held-out rows: the dev and test rows are written into the folder (`heldout/`), so
  `tfblocks-evaluate` can repeat the test evaluation (a TSV's held-out rows exist nowhere
  else).
- The input: the train split as `make_dataset` batches it (under a strategy that shards
  it, each worker's share), shuffled with the seed and the epoch; the dev split's batches
  for Keras' validation.
"""

import dataclasses
import os
import weakref
from typing import NamedTuple

import numpy as np

from tfblocks import text
from tfblocks._files import replace_file, write_text
from tfblocks.models import hparams, load_preset, load_target_tokenizer
from tfblocks.models.hyperparameters import TRAINING_FIELDS, parse_overrides
from tfblocks.text import distribute_dataset, make_dataset
from tfblocks.text.dataset import length_summary
from tfblocks.text.multilingual import train_multilingual_tokenizer
from tfblocks.text.packing import packing_summary
from tfblocks.text.streamed import sample_pairs
from tfblocks.translation.options import DEFAULT_HPARAMS_SET
from tfblocks.translation.run_folder import HELDOUT_DIR, TARGET_TOKENIZER_FILE, TOKENIZER_FILE


class Init(NamedTuple):
    """What `init_from` gives: the model, its tokenizers (target: None if shared), its
    `HParams` (None when its preset holds none) and, for an M2M-100 / NLLB run, the
    language tokens of the direction trained (`language_tokens`: `run.json`'s record with
    the options' languages as the source and target; None for any other run)."""

    model: object
    tokenizer: object
    target_tokenizer: object
    hparams: object
    language_tokens: dict = None


class JobData:
    """The data part of `job`: the model to start from, tokenizers, HParams, held-out
    rows and the datasets of the fit.

    It reads the job's options and splits and, once `job.train` has them, its `folder`,
    `hp` and tokenizers.

    Args:
        job: the `TrainingJob` it serves.

    Example:

    >>> from tfblocks.translation.job import TrainingJob
    >>> from tfblocks.translation.options import TrainingOptions
    >>> job = TrainingJob(TrainingOptions(epochs=1), {"train": [("a", "b")], "dev": []})
    >>> job.data.load_init(), job.data.tokenizer_sample(None, None)  # nothing to load or sample
    (None, None)
    """

    def __init__(self, job):
        self.job = weakref.proxy(job)  # weak: see `TrainingJob.__init__`
        self.options = job.options
        self.splits = job.splits

    def load_init(self):
        """The `Init` of `init_from` (None without), checked: its model's vocabulary is
        its tokenizers', and the options change nothing of its architecture
        (`build_hparams`)."""
        if not self.options.init_from:
            return None
        tokens = self._language_tokens()  # refused now when they cannot be written
        preset = os.path.join(self.options.init_from, "model")
        try:
            model, tokenizer, hp = load_preset(preset)
            target_tokenizer = load_target_tokenizer(preset)
        except (ValueError, OSError) as error:  # named by the flag, not by `path`
            raise ValueError(
                f"--init-from={self.options.init_from!r} holds no model to start from: {error}"
            ) from error
        init = Init(model, tokenizer, target_tokenizer, hp, tokens)
        sizes = [t.vocabulary_size for t in init[1:3] if t is not None]
        if init.model.get_config()["vocab_size"] != max(sizes):
            raise ValueError(
                "the --init-from model's vocabulary does not match its tokenizer, got "
                f"--init-from={self.options.init_from!r}."
            )
        self.build_hparams(tokenizer, init.target_tokenizer or tokenizer, init)  # refused now
        return init

    def _language_tokens(self):
        """The language tokens of `init_from` when it is an M2M-100 / NLLB run (None
        otherwise): its record, with `--source-lang` / `--target-lang` read as codes of
        the model (`targets.language_code`: `jpn` for `jpn_Jpan`, `de` for `__de__`);
        refused (ValueError naming the flag and the closest codes) when they are not."""
        from tfblocks.translation.run_folder import run_language_codes
        from tfblocks.translation.targets import language_code

        init_from = self.options.init_from
        codes, kind = run_language_codes(init_from)
        if codes is None:
            from tfblocks.translation.run_folder import run_language_tokens

            if run_language_tokens(init_from) is not None:
                raise ValueError(
                    f"--init-from={init_from!r} is an M2M-100 / NLLB run imported before "
                    "tfblocks recorded its language codes: import it again to fine-tune it."
                )
            return None
        if self.job.mixed is not None or self.job.stream:
            raise ValueError(
                f"--init-from={init_from!r} is an M2M-100 / NLLB run: fine-tune it on one "
                "direction of a corpus read whole (not --pairs, not --stream)."
            )
        source = language_code(codes, kind, self.options.source_lang, "--source-lang")
        target = language_code(codes, kind, self.options.target_lang, "--target-lang")
        return {"source": source, "target": target, "target_id": int(codes[target]),
                "languages": codes}  # fmt: skip

    def language_tokenizers(self):
        """`(source, target)` tokenizers of the fit's datasets: the job's, with the
        language tokens of an M2M-100 / NLLB direction written in (`LanguageTokenized`)."""
        job = self.job
        tokens = job.language_tokens
        if tokens is None:
            return job.tokenizer, job.target_tokenizer
        from tfblocks.serving.languages import LanguageTokenized

        return (LanguageTokenized(job.tokenizer, code=tokens["source"]),
                LanguageTokenized(job.target_tokenizer, first_id=tokens["target_id"]))  # fmt: skip

    def tokenizer_sample(self, init, output):
        """A streamed train split's tokenizer sample (two fast passes over its files,
        before the run folder is touched: an unreadable or misaligned file is refused
        now), or None when no tokenizer is trained (`init`, or the folder `output` has
        one)."""
        if not self.job.stream or init is not None:
            return None
        if output and os.path.exists(os.path.join(output, TOKENIZER_FILE)):
            return None  # continuing: training starts without reading the corpus first
        options = self.options
        sample = sample_pairs(self.splits["train"], options.tokenizer_sample, options.seed)
        if not sample:
            raise ValueError(f"the train split of {options.corpus} has no sentence pairs.")
        return sample

    def tokenizers(self, folder, init, sample=None, saved=None):
        """The tokenizers step: `(source, target)` tokenizers (the same one when shared):
        `init`'s, the folder's own when it has them, or trained on the train split (its
        `sample`, streamed); saved in the folder.

        Args:
            folder: the `RunFolder`.
            init: the `Init` of `init_from`, or None.
            sample: the tokenizer sample of a streamed train split (`tokenizer_sample`).
            saved: the folder's recorded settings (`RunFolder.check_settings`); None for a
                new folder, or one whose start failed before an epoch was recorded: its
                tokenizers are made again.
        """
        options, mixed = self.options, self.job.mixed
        # The source (or shared) tokenizer, and with separate vocabularies the target's.
        paths = [folder.join(TOKENIZER_FILE), folder.join(TARGET_TOKENIZER_FILE)]
        if not options.separate_vocab and (init is None or init.target_tokenizer is None):
            paths.pop()
        if init is not None:
            tokenizers = [init.tokenizer, init.target_tokenizer]
        elif saved is not None and all(os.path.exists(p) for p in paths):
            tokenizers = [text.SubwordTokenizer.load(p) for p in paths]
        elif mixed is not None:  # balanced over languages, the tags as symbols
            tokenizers = [train_multilingual_tokenizer(
                mixed, options.vocab_size, options.tokenizer_model,
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
        self._show(tokenizer, target_tokenizer)
        return tokenizer, target_tokenizer

    def _show(self, tokenizer, target_tokenizer):
        """Shows the splits' sizes and the vocabularies (and how directions mix)."""
        options, log = self.options, self.job.log
        sizes = {
            k: "streamed" if k == "train" and self.job.stream else len(v)
            for k, v in self.splits.items()
        }
        if target_tokenizer is tokenizer:
            vocabulary = f"shared vocabulary {tokenizer.vocabulary_size}"
        else:
            vocabulary = (
                f"vocabularies {tokenizer.vocabulary_size} ({options.source_lang}) and "
                f"{target_tokenizer.vocabulary_size} ({options.target_lang})"
            )
        log(f"pairs {sizes}; {vocabulary} ({options.tokenizer_model})")
        if self.job.mixed is not None:
            log(f"directions mixed by temperature sampling: {self.job.mixed.summary()}")

    def build_hparams(self, tokenizer, target_tokenizer, init=None):
        """The HParams of the run: the hparams set with the overrides, the tokenizers'
        vocabulary, the accumulation, untied embeddings for separate vocabularies.

        Fine-tuning (`init`, when its preset holds HParams): the init run's HParams, so
        its architecture whole (an imported model's options, its vocabularies and
        tying), with the training settings (`TRAINING_FIELDS`) of the overrides (and of
        the hparams set, when `hparams` names one) and the accumulation. An override or
        an hparams set that would change the architecture is refused, naming the flag
        and value.
        """
        options = self.options
        name, override_text = options.recipe()
        overrides = parse_overrides(override_text)
        if init is not None and init.hparams is not None:
            hp = _fine_tuning_hparams(init.hparams, name, overrides, options.accumulate_steps)
            check_max_length(hp, options.batch_tokens)
            return hp
        untied = (
            {} if target_tokenizer is tokenizer else {"shared_embedding_and_softmax_weights": False}
        )
        return hparams(
            name or DEFAULT_HPARAMS_SET,
            vocab_size=max(tokenizer.vocabulary_size, target_tokenizer.vocabulary_size),
            accumulate_steps=options.accumulate_steps, **{**overrides, **untied},
        )  # fmt: skip

    def write_heldout(self, folder):
        """Writes the dev and test rows into `folder`'s `heldout/`, one sentence a line,
        named by split and language (`test.de`, `test.en`, ...), so that `tfblocks-evaluate`
        can repeat the test evaluation (a TSV's held-out rows are written nowhere else);
        returns `{split: (source file, target file)}`."""
        if self.job.mixed is not None:  # each direction's, untagged, in `heldout/de-en/`
            return {
                f"{pair.name} {split}": paths
                for pair in self.job.mixed.pairs
                for split, paths in _write_heldout(
                    folder.join(HELDOUT_DIR, pair.name), (pair.source, pair.target), pair.splits
                ).items()
            }
        languages = (self.options.source_lang, self.options.target_lang)
        return _write_heldout(folder.join(HELDOUT_DIR), languages, self.splits)

    # The datasets of the fit ------------------------------------------------------------

    def train_input(self, seed, start_step=0, strategy=None):
        """An epoch's dataset; with `steps_per_epoch`, the endless stream from `start_step`.
        Under a `strategy` that shards the input, each worker reads its shard and the
        budget is the whole step's."""
        options, job = self.options, self.job
        args = (self.splits["train"], *self.language_tokenizers())
        kwargs = dict(batch_tokens=options.batch_tokens, max_length=job.hp.max_length,
                      seed=seed, shapes=options.shapes,
                      repeat=options.steps_per_epoch is not None)  # fmt: skip
        if strategy is not None:
            return distribute_dataset(strategy, *args, start_step=start_step, **kwargs)
        data = make_dataset(*args, **kwargs)
        return data.skip(start_step) if start_step else data

    def dev_input(self):
        """The dev split's batches, in order, for Keras' validation loss and accuracy."""
        options, job = self.options, self.job
        return make_dataset(
            self.splits["dev"], *self.language_tokenizers(),
            batch_tokens=options.batch_tokens, max_length=job.hp.max_length, shuffle=False,
            shapes=options.shapes,
        )  # fmt: skip

    def packing_line(self):
        """What packing makes of the train split, in words: its rows, batches and padding."""
        job = self.job
        max_length = job.hp.max_length
        lengths = length_summary(self.splits["train"], *self.language_tokenizers(), max_length)
        keep = np.array(lengths["keep"])
        packed = packing_summary(
            np.array(lengths["source_lengths"])[keep], np.array(lengths["target_lengths"])[keep],
            max_length, self.options.batch_tokens,
        )  # fmt: skip
        return (f"packed rows: {packed['rows']:,} rows of {max_length} positions, "
                f"{packed['batches']:,} batches an epoch; padding: "
                f"{packed['target_padding']:.1%} of the target positions, "
                f"{packed['source_padding']:.1%} of the source positions")  # fmt: skip


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


def _fine_tuning_hparams(init_hp, hparams_set, overrides, accumulate_steps):
    """`init_hp` (an `--init-from` run's HParams) with the training settings of the
    hparams set named `hparams_set` (None: none) and `overrides`; a ValueError naming the
    flag and the value when they would change its architecture (any field but
    `TRAINING_FIELDS`, and `max_length` with a position table, `pos="emb"`)."""
    training = set(TRAINING_FIELDS) - ({"max_length"} if init_hp.pos == "emb" else set())
    wanted = hparams(hparams_set, **overrides) if hparams_set else None
    # Set by the tokenizers, not by an hparams set: compared only when an override sets them.
    vocabulary = {"vocab_size", "source_vocab_size", "shared_embedding_and_softmax_weights"}
    for field in dataclasses.fields(init_hp):
        name, have = field.name, getattr(init_hp, field.name)
        if name in overrides:
            value, flag = overrides[name], "--hparams-override"
        elif hparams_set and name not in vocabulary:
            value, flag = getattr(wanted, name), f"--hparams={hparams_set!r}"
        else:
            continue
        if name not in training and value != have:
            table = " (not with its position table)" if init_hp.pos == "emb" else ""
            raise ValueError(
                f"`--init-from` keeps its model's architecture, {name}={have!r}, got {flag} "
                f"with {name}={value!r}; a fine-tuning run may change only training settings "
                f"(dropout, label smoothing, learning rate, optimizer, max_length{table})."
            )
    changes = {name: getattr(wanted, name) for name in training} if hparams_set else {}
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
