"""`Ensemble`: several trained models decoded as one, by the mean of their log-probabilities.

At every step each member runs its own decoder step over its own caches, and the
ensemble's logits are the mean over the members of `log_softmax(member logits)`. The
searches and `Decoder.score` then treat those as any model's logits (`allowed_logits`,
then a softmax), so the ensemble's distribution is the members' geometric mean,
renormalized, and a beam's score is the sum of those renormalized log-probabilities.
Masking PAD and BOS before or after the mean gives the same distribution: a member's
renormalization shifts its log-probabilities by a constant, which the final softmax
removes.

`Ensemble` presents the methods `tfblocks.Decoder` calls (`has_input`, `vocab_size`,
`encode`, `init_cache`, `decode`, `logits`) over its members, so `Decoder` (every
search, `num_hypotheses`, a forced `prefix`, `score`), `Translator`,
`Generator` and their SavedModel export take an ensemble where they take a model; the
export holds every member's weights. What flows between the methods is per member:
`encode` returns a list of encoder outputs, `init_cache` one entry per member
(`{"self": [its blocks' self-attention caches], "cross": [their cross-attention k/v]}`),
and `decode` a list of hidden states that only `logits` reads.
"""

import tensorflow as tf

_METHODS = ("encode", "init_cache", "decode", "logits")


class Ensemble(tf.Module):
    """Trained models that decode as one: the mean of their per-step log-probabilities.

    Args:
        models: a list of trained `tfblocks.Transformer`s of one target vocabulary
            (`vocab_size`), all encoder–decoders (`build_transformer`) or all
            decoder-only language models (`build_language_model`). Their sizes may
            differ; their tokenizer must be the same.
        name: the module's name.

    An ensemble of one model decodes as that model; of two copies of a model, too.

    Example:

    >>> import numpy as np
    >>> import keras
    >>> import tfblocks
    >>> from tfblocks.decoding import Decoder, Greedy
    >>> hp = tfblocks.hparams("transformer_tiny", vocab_size=30)
    >>> keras.utils.set_random_seed(1)
    >>> members = [tfblocks.build_transformer(hp) for _ in range(2)]
    >>> ensemble = tfblocks.Ensemble(members)
    >>> decoder = Decoder(ensemble, max_length=4, jit_compile=False, drop_finished=False)
    >>> ids, scores = decoder.decode(Greedy(), np.array([[5, 6, 7, 1]], "int32"))
    >>> tuple(ids.shape), ensemble.vocab_size, ensemble.has_input
    ((1, 4), 30, True)
    """

    def __init__(self, models, name="ensemble"):
        super().__init__(name=name)
        self.models = _check_members(models)
        self.vocab_size = self.models[0].vocab_size

    @property
    def has_input(self):
        """True for encoder–decoder members, False for decoder-only ones."""
        return bool(self.models[0].has_input)

    @property
    def variables(self):
        """Every member's weights, each once (a model given twice shares its weights)."""
        seen, out = set(), []
        for model in self.models:
            for variable in model.variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    out.append(variable)
        return out

    def encode(self, source_ids, training=None):
        """A list with each member's encoder output `[B, S, d_i]`."""
        return [model.encode(source_ids, training=training) for model in self.models]

    def init_cache(self, batch_size, max_length, encoder_output=None):
        """One cache entry per member: its blocks' caches grouped by kind, a dict of
        lists (`{"self": [...], "cross": [...]}`), from its own `encoder_output`."""
        outputs = self._per_member("encoder_output", encoder_output)
        return [
            _grouped(model.init_cache(batch_size, max_length, output))
            for model, output in zip(self.models, outputs, strict=True)
        ]

    def decode(
        self,
        decoder_ids,
        encoder_output=None,
        source_mask=None,
        cache=None,
        index=None,
        training=None,
    ):
        """Each member's `decode`: a list of hidden states, and with a `cache` (from
        `init_cache`) `(hidden states, new cache)`."""
        outputs = self._per_member("encoder_output", encoder_output)
        if cache is None:
            return [
                model.decode(decoder_ids, output, source_mask, training=training)
                for model, output in zip(self.models, outputs, strict=True)
            ]
        entries = self._per_member("cache", cache)
        hidden, new_cache = [], []
        for model, output, entry in zip(self.models, outputs, entries, strict=True):
            h, blocks = model.decode(
                decoder_ids, output, source_mask, cache=_ungrouped(entry), index=index,
                training=training,
            )  # fmt: skip
            hidden.append(h)
            new_cache.append(_grouped(blocks))
        return hidden, new_cache

    def logits(self, hidden):
        """Float32 `[..., vocab]`: the mean over the members of their log-softmax of
        their logits of `hidden` (the list `decode` returns)."""
        hidden = self._per_member("hidden", hidden)
        log_probs = [
            tf.nn.log_softmax(tf.cast(model.logits(h), tf.float32))  # [..., V]
            for model, h in zip(self.models, hidden, strict=True)
        ]
        return tf.add_n(log_probs) / len(log_probs)

    def _per_member(self, name, values):
        """`values` (a list with one item per member), or None for each member."""
        if values is None:
            return [None] * len(self.models)
        if not isinstance(values, list | tuple) or len(values) != len(self.models):
            got = f"{len(values)} items" if isinstance(values, list | tuple) else "a tensor"
            raise ValueError(
                f"`{name}` of an ensemble must be a list with one item per member "
                f"({len(self.models)}), got {got}."
            )
        return list(values)


def _grouped(blocks):
    """A model's per-block caches (`[{"self": a, "cross": b}, ...]`) as one dict of lists."""
    return {key: [block[key] for block in blocks] for key in blocks[0]}


def _ungrouped(entry):
    """The per-block caches of a member's `_grouped` entry."""
    keys = list(entry)
    return [dict(zip(keys, values, strict=True)) for values in zip(*entry.values(), strict=True)]


def _name(model):
    return f"{type(model).__name__} '{getattr(model, 'name', '?')}'"


def _check_members(models):
    """`models` as a list, refused (ValueError naming them) unless it holds at least one
    model with the decoding methods, all of one `vocab_size` and one kind."""
    if not isinstance(models, list | tuple):
        raise ValueError(
            f"`models` must be a list of trained models, got {_name(models)}; pass "
            "Ensemble([model_a, model_b])."
        )
    if not models:
        raise ValueError("`models` must hold at least one model, got an empty list.")
    for i, model in enumerate(models):
        missing = [m for m in ("has_input", "vocab_size", *_METHODS) if not hasattr(model, m)]
        if missing:
            raise ValueError(
                f"`models[{i}]` must be a tfblocks.Transformer (from build_transformer or "
                f"build_language_model), got {_name(models[i])} without {missing}."
            )
    sizes = [model.vocab_size for model in models]
    if len(set(sizes)) > 1:
        listed = ", ".join(f"{_name(m)} vocab_size={s}" for m, s in zip(models, sizes, strict=True))
        raise ValueError(
            "The models of an ensemble must share one target vocabulary (vocab_size), "
            f"got {listed}."
        )
    kinds = [bool(model.has_input) for model in models]
    if len(set(kinds)) > 1:
        listed = ", ".join(
            f"{_name(m)} {'encoder–decoder' if k else 'decoder-only'}"
            for m, k in zip(models, kinds, strict=True)
        )
        raise ValueError(
            "The models of an ensemble must be all encoder–decoders or all decoder-only "
            f"language models, got {listed}."
        )
    return list(models)
