"""The evaluation part of a `TrainingJob`: dev scores after each epoch, the test scores.

- Validation: loss, token accuracy and the unsmoothed cross-entropy on the dev split
  (Keras, in the fit), plus dev BLEU and chrF (sacrebleu; BLEU tokenized for the target
  language or as `bleu_tokenize` says, `evaluation.choose_bleu_tokenize`) of greedy
  translations of up to `dev_sentences` dev sentences with the cached decoder, in the
  progress output and TensorBoard. Each epoch's history record also holds the seconds of
  its dev BLEU (`dev_seconds`, not training time).
- The best epoch is the one with the highest dev BLEU (`record_bleu`); when dev BLEU
  ties, the later epoch is the best (its weights had more training), while early
  stopping still counts from the last epoch that raised the BLEU.
- Several directions: dev BLEU and chrF are each direction's (`dev_bleu_de-en`, ...) and
  their mean (`dev_bleu`, which picks the best epoch and drives early stopping); the
  test scores are each direction's (`pairs` in `metrics.json`) and their means.
- The test split is translated in batches, with the sentences done shown as it goes,
  and the first translations shown after it.

sacrebleu (the `examples` extra) is imported only when BLEU is computed.
"""

import time
import weakref

import tensorflow as tf

from tfblocks.translation.progress import Counter

# The test split is translated in batches of tfblocks-evaluate's default `--batch-size`:
# evaluating the held-out files repeats the same batches, and progress shows after each.
TEST_BATCH = 64
# What `metrics.json` holds of the test evaluation (a rerun that skips it keeps them).
SCORES = ("bleu", "chrf", "exact_match", "sentences", "bleu_signature")


class JobEvaluation:
    """The evaluation part of `job`: dev BLEU and chrF of its `translator` on its
    `dev_pairs` after each epoch, and BLEU, chrF and exact match on the test split.

    Args:
        job: the `TrainingJob` it serves.

    Example:

    >>> from tfblocks.translation.job import TrainingJob
    >>> from tfblocks.translation.options import TrainingOptions
    >>> dev = [("eins", "one"), ("zwei", "two"), ("drei", "three")]
    >>> job = TrainingJob(TrainingOptions(epochs=1, dev_sentences=2), {"train": [], "dev": dev})
    >>> job.evaluation.dev_pairs()
    [('eins', 'one'), ('zwei', 'two')]
    """

    def __init__(self, job):
        self.job = weakref.proxy(job)  # weak: see `TrainingJob.__init__`
        self.options = job.options
        self.writer = None

    # Dev scores, after each epoch ---------------------------------------------------------

    def dev_pairs(self):
        """The dev pairs that dev BLEU translates: the first `dev_sentences` (of each
        direction, tagged, with several: `{name: pairs}`)."""
        count, mixed = self.options.dev_sentences, self.job.mixed
        if mixed is None:
            return self.job.splits["dev"][:count]
        return {pair.name: pair.tagged("dev")[:count] for pair in mixed.pairs} if count else {}

    def open_log(self, folder):
        """Opens the TensorBoard log of the dev scores, in `folder`'s `logs/validation`."""
        self.writer = tf.summary.create_file_writer(folder.join("logs", "validation"))

    def score_epoch(self, epoch, logs):
        """Adds the dev scores of the weights of `epoch` (0-based) and their seconds
        (`dev_seconds`) to `logs`; writes them to TensorBoard and shows them."""
        start = time.perf_counter()
        logs.update(self.dev_scores())
        logs["dev_seconds"] = time.perf_counter() - start
        with self.writer.as_default():  # epoch_bleu, epoch_chrf (each direction's too)
            for key in [k for k in logs if k.startswith(("dev_bleu", "dev_chrf"))]:
                tf.summary.scalar(f"epoch_{key[4:]}", logs[key], step=epoch)
        self.writer.flush()
        self.job.log(f"epoch {epoch + 1}: dev BLEU {logs['dev_bleu']} chrF {logs['dev_chrf']} "
                     f"({self.dev_count()}, greedy, {logs['dev_seconds']:.1f} s)"
                     f"{self._per_pair(logs, 'dev_')}")  # fmt: skip

    def dev_scores(self):
        """`dev_bleu` and `dev_chrf` of the job's `translator` on its `dev_pairs`; with
        several directions, each one's (`dev_bleu_de-en`, ...) and their means, which
        choose the best epoch."""
        from tfblocks.translation import evaluation  # sacrebleu: only where BLEU is computed

        options, job = self.options, self.job
        if job.mixed is None:
            metrics, _ = evaluation.evaluate(
                job.translator, job.dev_pairs,
                target_lang=options.target_lang, tokenize=options.bleu_tokenize,
            )  # fmt: skip
            return {"dev_bleu": metrics["bleu"], "dev_chrf": metrics["chrf"]}
        scores = {}
        for pair in job.mixed.pairs:
            metrics, _ = evaluation.evaluate(
                job.translator, job.dev_pairs[pair.name],
                target_lang=pair.target, tokenize=options.bleu_tokenize,
            )  # fmt: skip
            scores[f"dev_bleu_{pair.name}"] = metrics["bleu"]
            scores[f"dev_chrf_{pair.name}"] = metrics["chrf"]
        for name in ("dev_bleu", "dev_chrf"):
            values = [scores[f"{name}_{pair}"] for pair in job.mixed.names]
            scores[name] = round(sum(values) / len(values), 2)
        return scores

    def dev_count(self):
        """The dev sentences that dev BLEU translates, in words."""
        dev_pairs = self.job.dev_pairs
        if self.job.mixed is None:
            return f"{len(dev_pairs)} dev sentences"
        count = sum(map(len, dev_pairs.values()))
        return f"{count} dev sentences of {len(dev_pairs)} directions"

    def _per_pair(self, logs, prefix):
        """Each direction's BLEU of `logs` (keys `PREFIXbleu_de-en`), in words; "" for one pair."""
        if self.job.mixed is None:
            return ""
        return "; " + ", ".join(
            f"{name} {logs[f'{prefix}bleu_{name}']}" for name in self.job.mixed.names
        )

    # Test scores, after training ----------------------------------------------------------

    def test_scores(self, translator):
        """BLEU, chrF and exact match of `translator` on the test split, with the
        sentences done as it goes; shows the first three translations."""
        from tfblocks.translation import evaluation  # sacrebleu: only where BLEU is computed

        job = self.job
        test = job.splits["test"]
        job.log(f"translating the test split: {len(test)} sentences, {TEST_BATCH} at a time")
        if job.mixed is not None:
            return self._test_pairs(translator, evaluation)
        counter = Counter("test translation", "sentences", job.log)
        with job.timer("evaluate"):
            metrics, hypotheses = evaluation.evaluate(
                translator, test, TEST_BATCH, counter,
                self.options.target_lang, self.options.bleu_tokenize,
            )  # fmt: skip
        job.log("test translations (first 3):")
        for (source, reference), hypothesis in list(zip(test, hypotheses, strict=True))[:3]:
            job.log(f"  {source}\n    reference:   {reference}\n    translation: {hypothesis}")
        return metrics

    def _test_pairs(self, translator, evaluation):
        """`test_scores` for several directions: each one's test scores under `pairs`, and
        the means of their BLEU, chrF and exact match over all `sentences`."""
        job, scores = self.job, {}
        for pair in job.mixed.pairs:
            counter = Counter(f"test translation {pair.name}", "sentences", job.log)
            with job.timer("evaluate"):
                scores[pair.name], hypotheses = evaluation.evaluate(
                    translator, pair.tagged("test"), TEST_BATCH, counter,
                    pair.target, self.options.bleu_tokenize,
                )  # fmt: skip
            job.log(f"  {pair.name}: BLEU {scores[pair.name]['bleu']} chrF "
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

    def score_keys(self):
        """What `metrics.json` holds of the test scores (a rerun that skips them keeps them)."""
        return SCORES if self.job.mixed is None else (*SCORES, "pairs")


def record_bleu(progress, bleu, epoch):
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
