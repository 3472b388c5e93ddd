"""Subprocess body for test_multi_worker: one worker of a two-worker `model.fit`.

Usage: `python -m tests.training.multi_worker_script OUT.npz` from the repository root,
with `TF_CONFIG` set. First `model.fit` under `MultiWorkerMirroredStrategy` without the
keras#20585 work-around (`TFBLOCKS_NO_KERAS_PATCH=1`), which fails; then, with it, from
the same initial weights it trains three times on the same global batches of 16 (padding
uneven across the workers' halves, so a wrongly scaled gradient shows):

1. `MultiWorkerMirroredStrategy`, `compile_transformer(jit_compile=True)`: per-replica
   XLA (`tfblocks.training.xla_step`);
2. the same strategy with `jit_compile=False` (Keras' own step);
3. this process alone, no strategy, on the whole global batch (the chief only: the run
   uses no collective, and the test compares the workers' run-1 weights bit for bit).

Then it reads one epoch of text pairs through `tfblocks.text.distribute_dataset`, the
translation job's input under a strategy, in which each worker reads its own shard of
the pairs, and trains one epoch of the translation job itself on them (`TrainingJob`, a
run folder per worker, as `tfblocks-train` has it).

Saves the weights of run 1 (OUT.npz) and of the job (OUT_job.npz) and prints one JSON
line: histories, `jit_compile` flags, the largest weight differences between the runs,
the sources this worker's input pipeline gave, the job's epochs and loss, and the error
of the run without the work-around.
"""

import json
import os
import sys


def main(out):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tensorflow as tf

    from tests.fixtures import synthetic_dataset, tiny_hparams, tiny_model
    from tfblocks.training import multi_worker, xla_step
    from tfblocks.training.distribute import cluster_task, get_strategy

    os.environ["TFBLOCKS_NO_KERAS_PATCH"] = "1"  # the work-around after run 0 (below)
    strategy = get_strategy("multi_worker")
    hp = tiny_hparams(24)
    dataset = synthetic_dataset(32, 9, 24, batch_size=16)  # uneven padding
    initial = tiny_model(hp, seed=0).get_weights()

    def train(jit_compile, distributed):
        with strategy.scope() if distributed else tf.distribute.get_strategy().scope():
            model = tiny_model(hp, weights=initial, jit_compile=jit_compile, learning_rate=3e-3)
        history = model.fit(dataset, epochs=2, verbose=0, shuffle=False).history
        return model, history

    try:  # run 0: without the keras#20585 work-around Keras' `fit` fails
        train(jit_compile=True, distributed=True)
        unpatched_error = None
    except Exception as error:  # reported: the test names the error it wants
        unpatched_error = f"{type(error).__name__}: {error}"[:3000]
    del os.environ["TFBLOCKS_NO_KERAS_PATCH"]
    multi_worker.patch_keras()
    xla, xla_history = train(jit_compile=True, distributed=True)
    step = getattr(xla, xla_step.ATTRIBUTE, None)
    plain, plain_history = train(jit_compile=False, distributed=True)
    chief = cluster_task()[0]  # run 3 uses no collective: the chief alone runs it
    single, single_history = train(jit_compile=False, distributed=False) if chief else (None, None)

    def max_diff(a, b):
        return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))

    sources = shard_sources(strategy)
    job_weights, job_report = job_epoch(strategy, out.replace(".npz", "_run"))
    stream_weights, stream_report = job_stream(strategy, out.replace(".npz", "_stream"))
    vs_single = max_diff(xla.get_weights(), single.get_weights()) if chief else None
    np.savez(out, *xla.get_weights())
    np.savez(out.replace(".npz", "_job.npz"), *job_weights)
    np.savez(out.replace(".npz", "_stream.npz"), *stream_weights)
    print(
        json.dumps(
            {
                "replicas": strategy.num_replicas_in_sync,
                "jit_compile": [bool(xla.jit_compile), bool(plain.jit_compile)],
                "xla_traces": step.train_gradients.experimental_get_tracing_count() if step else 0,
                "history": xla_history,
                "plain_history": plain_history,
                "single_history": single_history,
                "xla_vs_plain": max_diff(xla.get_weights(), plain.get_weights()),
                "chief": chief,
                "xla_vs_single": vs_single,
                "moved": max_diff(xla.get_weights(), initial),
                "sources": sources,
                "job_epochs": job_report["epochs"],
                "job_loss": job_report["history"][-1]["loss"],
                "stream_epochs": stream_report["epochs"],
                "stream_losses": [h["loss"] for h in stream_report["history"]],
                "unpatched_error": unpatched_error,
            }
        )
    )


class DigitTokenizer:
    """Pairs of space-separated ids ("5 9 7") → ragged ids with EOS: no model to train."""

    def tokenize(self, texts):
        import tensorflow as tf

        from tfblocks.ids import EOS_ID

        ids = tf.strings.to_number(tf.strings.split(texts), tf.int32)  # [N, (len)]
        return tf.concat([ids, EOS_ID * tf.ones_like(ids[:, :1])], axis=1)  # [N, (len + 1)]


def text_pairs(n, vocab_size):
    """`n` distinct (source, reversed source) pairs of 2 to 8 ids, as text."""
    import numpy as np

    from tests.fixtures import FIRST_ID

    rng = np.random.default_rng(1)
    sources = {}
    while len(sources) < n:
        ids = rng.integers(FIRST_ID, vocab_size, rng.integers(2, 9))
        sources[" ".join(map(str, ids))] = " ".join(map(str, ids[::-1]))
    return list(sources.items())


def shard_sources(strategy):
    """The sources this worker's pipeline gives in one epoch of `distribute_dataset` over
    `text_pairs(41, 24)` (the shards differ in length)."""
    from tfblocks.text import distribute_dataset

    tokenizer = DigitTokenizer()
    data = distribute_dataset(
        strategy, text_pairs(41, 24), tokenizer, tokenizer, batch_tokens=64, max_length=10,
        seed=0,
    )  # fmt: skip
    sources = []
    for features, _ in data:
        for ids in strategy.experimental_local_results(features["inputs"]):
            for row in ids.numpy():
                sources.append(" ".join(str(i) for i in row if i > 1))  # no PAD, no EOS
    return [s for s in sources if s]  # no empty rows


def job_epoch(strategy, path):
    """One epoch of `tfblocks.translation.job.TrainingJob.train` on `text_pairs` in the run
    folder `path` (each worker its own, as `tfblocks-train` does); returns the weights and
    report."""
    from tests.fixtures import tiny_hparams
    from tfblocks.text import train_tokenizers
    from tfblocks.translation import job
    from tfblocks.translation import options as options_module
    from tfblocks.translation.run_folder import RunFolder

    pairs = text_pairs(41, 24)
    tokenizer = train_tokenizers(pairs, vocab_size=40, model_type="bpe")[0]
    hp = tiny_hparams(tokenizer.vocabulary_size, max_length=24)
    options = options_module.TrainingOptions(
        epochs=1, batch_tokens=128, strategy=strategy, dtype_policy="float32",
        dev_sentences=0, verbose=0,
    )  # fmt: skip
    with RunFolder(path) as folder:
        splits = {"train": pairs, "dev": pairs[:4]}
        training = job.TrainingJob(options, splits, log=lambda _: None)
        model, report = training.train(folder, tokenizer, hp)
    return model.get_weights(), report


def job_stream(strategy, path):
    """Two epochs of 3 steps (`steps_per_epoch`) of the job on `text_pairs` streamed from
    two files a side of 30 and 11 pairs: each worker reads only its own file, repeated,
    and both take the same steps; returns the weights and report."""
    import pathlib

    from tests.fixtures import tiny_hparams
    from tfblocks.text import StreamedPairs, train_tokenizers
    from tfblocks.translation import job
    from tfblocks.translation import options as options_module
    from tfblocks.translation.run_folder import RunFolder

    pairs = text_pairs(41, 24)
    corpus = pathlib.Path(f"{path}_corpus")
    corpus.mkdir()
    files = ([], [])
    for i, part in enumerate((pairs[:30], pairs[30:])):
        for side, names in enumerate(files):
            name = corpus / f"train.{'xy'[side]}-{i:05d}-of-00002"
            name.write_text("".join(pair[side] + "\n" for pair in part), encoding="utf-8")
            names.append(str(name))
    tokenizer = train_tokenizers(pairs, vocab_size=40, model_type="bpe")[0]
    hp = tiny_hparams(tokenizer.vocabulary_size, max_length=24)
    options = options_module.TrainingOptions(
        epochs=2, steps_per_epoch=3, batch_tokens=128, strategy=strategy,
        dtype_policy="float32", dev_sentences=0, verbose=0,
    )  # fmt: skip
    with RunFolder(path) as folder:
        splits = {"train": StreamedPairs(*map(tuple, files)), "dev": pairs[:4]}
        training = job.TrainingJob(options, splits, log=lambda _: None)
        model, report = training.train(folder, tokenizer, hp)
    return model.get_weights(), report


if __name__ == "__main__":
    main(sys.argv[1])
