"""What a `TrainingJob` is asked to do: `TrainingOptions`, a frozen dataclass whose fields
the `tfblocks-train` flags fill (`tfblocks.cli.train.training_options`),
checked when it is made, and the recipe a run gets when it names none."""

import dataclasses

from tfblocks import _checks
from tfblocks._regimes import REGIMES, format_overrides
from tfblocks.text.shapes import SHAPES
from tfblocks.training.precision import POLICIES
from tfblocks.translation.evaluation import choose_bleu_tokenize

DEFAULT_HPARAMS_SET = "transformer_tiny"
# The command's HParams defaults, under the fields `--hparams-override` names: the
# small-data regime (`REGIMES`) and pairs of at most 32 tokens.
DEMO_OVERRIDES = format_overrides({**REGIMES["small_data"], "max_length": 32})


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """What a `TrainingJob` does: how it trains (what may change between reruns of one run
    folder: from `epochs` to `verbose`), and what it trains on and with (recorded in the
    run folder's settings, which bind its reruns: from `source_lang` on).

    Attributes:
        epochs: total epochs of the run (a rerun with more continues).
        steps_per_epoch: None (an epoch is a pass over the training pairs), or N: an
            epoch is N optimizer steps of an endless stream of passes (pass p shuffled
            from `seed` and p), epoch e taking the stream's steps [e·N, (e+1)·N). A
            continued run starts the stream at its first epoch's step (reading and
            batching the steps before it, without training); a run folder keeps the
            value it was trained with.
        batch_tokens: token budget of a training step, over all replicas under a
            strategy (each of R replicas gets `batch_tokens // R`).
        seed: seed of the initialisation and of every epoch's shuffle.
        strategy: a `get_strategy` kind or a `tf.distribute.Strategy`.
        shapes: the batches (`make_dataset(shapes=...)`): `"dynamic"` (length buckets,
            each batch padded to its longest pair), `"buckets"` (a few padded lengths),
            `"max_length"` (one shape) or `"packed"` (several pairs per row, one shape).
            The fixed-shape modes compile the training step with XLA (once per shape),
            except packed rows that `dtype_policy="auto"` trains in `mixed_bfloat16`.
        dtype_policy: `"auto"` (`mixed_bfloat16` for a step without XLA, dynamic or
            packed batches, on a CPU with bfloat16 instructions, else float32;
            `tfblocks.training.precision.training_execution`),
            `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`. Only training uses it:
            dev BLEU, the returned model and its exports compute in float32.
        time_limit: seconds of training in this invocation (None = no limit).
        dev_sentences: dev sentences translated for dev BLEU/chrF after each epoch (0 = off).
            The epoch with the highest dev BLEU gives `best.npz`; on a tie the later one.
        early_stopping: stop after this many epochs without a higher dev BLEU (None = off).
        average_last: average the last K epochs' weights at the end (0 = off).
        keep_checkpoints: epoch checkpoints kept (at least `average_last`).
        ema_decay: None, or keep a moving average of the weights with this decay
            (0 < d < 1), which then gives dev BLEU, the checkpoints and the final model;
            Keras' validation loss and accuracy stay those of the trained weights.
        lora_rank: None, or train only rank-r adapters on the attention projections
            (LoRA, `tfblocks.training.lora`), the rest of the model frozen; meant for
            fine-tuning (`init_weights`).
        lora_ffn: with `lora_rank`, adapt the feed-forward networks' Dense layers too.
        verbose: `model.fit` verbosity.
        source_lang: the source language (recorded in the run folder).
        target_lang: the target language.
        bleu_tokenize: sacrebleu's tokenizer of dev and test BLEU, one of
            `tfblocks.translation.evaluation.BLEU_TOKENIZERS`; None: `target_lang`'s
            (`bleu_tokenize_for`: `ja-mecab` for ja, `13a` for en). Recorded in the run
            folder's settings. Checked when the options are made: a tokenizer whose
            packages are missing (MeCab) is an ImportError naming them.
        corpus: where the train split comes from, for messages; the summary shows the
            exact-match rate for `"the phrasebook"` only (short, templated sentences).
        hparams: the t2t hparams set's name; None: `transformer_tiny`, or with `init_from` the
            init run's architecture (`build_hparams`; a name must then give that
            architecture, and its training settings apply).
        hparams_override: comma-separated `key=value` HParams overrides, each replacing
            that field of `DEMO_OVERRIDES` or adding to them (`max_length=64` keeps the
            small-data regime); None: `DEMO_OVERRIDES`. With `init_from` they apply
            to the init run's settings instead (None: none), and may change only the
            training settings (`tfblocks.models.hyperparameters.TRAINING_FIELDS`).
        vocab_size: the SentencePiece vocabulary size (each one's with `separate_vocab`).
        tokenizer_model: `"unigram"` (SentencePiece's, the one a LiteRT file can
            reproduce) or `"bpe"`.
        tokenizer_sample: the tokenizer trains on a random sample of at most this many
            pairs (seeded by `seed`).
        separate_vocab: one vocabulary per language and untied embeddings.
        accumulate_steps: batches per optimizer update (gradient accumulation).
        init_from: None, or a run folder (of `tfblocks-train` or `tfblocks-import`) whose
            model, with its architecture, and tokenizers the run starts from
            (fine-tuning) when it has no finished epoch yet.
        search: the search that translates the test split and the export, a
            `tfblocks.decoding` strategy (None: `Translator`'s default, t2t's beam search).

    Example:

    >>> TrainingOptions(epochs=2, ema_decay=0.999).ema_decay
    0.999
    >>> TrainingOptions(epochs=1, hparams_override="max_length=64").recipe()[1]
    'learning_rate_warmup_steps=200,learning_rate_constant=0.35,max_length=64'
    >>> TrainingOptions(epochs=1, init_from="runs/base").recipe()
    (None, '')
    >>> TrainingOptions(epochs=0)
    Traceback (most recent call last):
    ...
    ValueError: `epochs` must be a positive integer, got epochs=0.
    """

    epochs: int
    steps_per_epoch: int | None = None
    batch_tokens: int = 4096
    seed: int = 0
    strategy: object = "auto"
    shapes: str = "dynamic"
    dtype_policy: str = "auto"
    time_limit: float | None = None
    dev_sentences: int = 200
    early_stopping: int | None = None
    average_last: int = 0
    keep_checkpoints: int = 5
    ema_decay: float | None = None
    lora_rank: int | None = None
    lora_ffn: bool = False
    verbose: int = 2
    source_lang: str = "ja"
    target_lang: str = "en"
    bleu_tokenize: str | None = None
    corpus: str = "the phrasebook"
    hparams: str | None = None
    hparams_override: str | None = None
    vocab_size: int = 1000
    tokenizer_model: str = "unigram"
    tokenizer_sample: int = 1_000_000
    separate_vocab: bool = False
    accumulate_steps: int = 1
    init_from: str | None = None
    search: object = None

    def __post_init__(self):
        _checks.check_positive_int("epochs", self.epochs)
        _checks.check_optional_positive_int("steps_per_epoch", self.steps_per_epoch)
        _checks.check_positive_int("batch_tokens", self.batch_tokens)
        _checks.check_non_negative_int("dev_sentences", self.dev_sentences)
        choose_bleu_tokenize(self.target_lang, self.bleu_tokenize, "bleu_tokenize")
        _checks.check_non_negative_int("average_last", self.average_last)
        _checks.check_positive_int("keep_checkpoints", self.keep_checkpoints)
        _checks.check_choice("dtype_policy", self.dtype_policy, POLICIES)
        _checks.check_choice("shapes", self.shapes, SHAPES)
        if self.early_stopping is not None:
            _checks.check_positive_int("early_stopping", self.early_stopping)
            if not self.dev_sentences:
                raise ValueError("`early_stopping` needs dev BLEU: set `dev_sentences` > 0.")
        if self.time_limit is not None:
            _checks.check_positive_float("time_limit", self.time_limit)
        if self.ema_decay is not None:
            _checks.check_fraction("ema_decay", self.ema_decay)
        _checks.check_optional_positive_int("lora_rank", self.lora_rank)
        _checks.check_bool("lora_ffn", self.lora_ffn)
        if self.lora_ffn and self.lora_rank is None:
            raise ValueError("`lora_ffn` needs `lora_rank`, got lora_ffn=True, lora_rank=None.")
        _checks.check_positive_int("vocab_size", self.vocab_size)
        _checks.check_choice("tokenizer_model", self.tokenizer_model, ("bpe", "unigram"))
        _checks.check_positive_int("tokenizer_sample", self.tokenizer_sample)
        _checks.check_bool("separate_vocab", self.separate_vocab)
        _checks.check_positive_int("accumulate_steps", self.accumulate_steps)

    def recipe(self):
        """`(name, override_text)`: the hparams set's name and the overrides in effect:
        `hparams` or `DEFAULT_HPARAMS_SET`, and `DEMO_OVERRIDES` with the fields that
        `hparams_override` names replaced or added; with `init_from`, both as given
        (None and none: the init run's). A malformed override is a ValueError."""
        if self.init_from is not None:
            return self.hparams, self.hparams_override or ""
        from tfblocks.models.hyperparameters import parse_overrides  # TensorFlow: not for --help

        overrides = {**parse_overrides(DEMO_OVERRIDES), **parse_overrides(self.hparams_override)}
        return self.hparams or DEFAULT_HPARAMS_SET, format_overrides(overrides)

    def recipe_line(self):
        """The line that names `recipe()` for a person: the hparams set (or the `init_from`
        run's settings) and the overrides in effect.

        >>> TrainingOptions(epochs=1, init_from="runs/base").recipe_line()
        'hparams: those of --init-from runs/base; overrides: none'
        >>> TrainingOptions(epochs=1, hparams_override="max_length=64").recipe_line()[-14:]
        ',max_length=64'
        """
        preset, overrides = self.recipe()
        if self.init_from is not None:
            base = f"those of --init-from {self.init_from}"
            preset = base + (f" with the training settings of {preset}" if preset else "")
        return f"hparams: {preset}; overrides: {overrides or 'none'}"
