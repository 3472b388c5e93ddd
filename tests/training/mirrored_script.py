"""Subprocess body for test_distribute: mirrored (2 logical CPUs) vs single-device training.

The mirrored model is compiled with `jit_compile=True` (per-replica XLA), the single
one without XLA.

Usage: `python -m tests.training.mirrored_script` from the repository root. Prints one
JSON line: the largest weight difference, the loss histories, the smoothed loss
computed per replica vs on the whole batch, the same comparison of weights and their
moving averages with gradient accumulation, what `distribute_dataset` gives the two
replicas (and one `fit` epoch on it), and the weights after an epoch of packed rows on
both setups.
"""

import json
import os


def main():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np

    from tests.fixtures import synthetic_pairs, tiny_hparams, tiny_model
    from tfblocks.training import SmoothedCrossEntropy, averaged_weights, xla_step
    from tfblocks.training.distribute import get_strategy

    hp = tiny_hparams(24)
    x, tgt = synthetic_pairs(64, 9, 24)  # uneven padding per replica
    dataset = tf.data.Dataset.from_tensor_slices((x, tgt)).batch(16)

    # Keras' non-XLA step on one device vs per-replica XLA on two logical CPUs.
    single = tiny_model(hp, seed=0, jit_compile=False, learning_rate=1e-3)
    initial = single.get_weights()
    single_history = single.fit(dataset, epochs=3, verbose=0, shuffle=False).history

    strategy = get_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = tiny_model(hp, weights=initial, jit_compile=True, learning_rate=1e-3)
    mirrored_history = mirrored.fit(dataset, epochs=3, verbose=0, shuffle=False).history
    step = getattr(mirrored, xla_step.ATTRIBUTE)
    mirrored_eval = mirrored.evaluate(dataset, verbose=0, return_dict=True)
    single_eval = single.evaluate(dataset, verbose=0, return_dict=True)

    # Gradient accumulation (2 micro-batches of 8 rows, 4 per replica) and a moving
    # average of the weights: the same on both setups.
    accumulating = tiny_hparams(24, accumulate_steps=2)
    micro = tf.data.Dataset.from_tensor_slices((x, tgt)).batch(8)
    settings = {"weights": initial, "learning_rate": 1e-3, "ema_decay": 0.9}
    single_acc = tiny_model(accumulating, jit_compile=False, **settings)
    with strategy.scope():
        mirrored_acc = tiny_model(accumulating, jit_compile=True, **settings)
    for model in (single_acc, mirrored_acc):
        model.fit(micro, epochs=1, verbose=0, shuffle=False)
    averages = [averaged_weights(m) for m in (single_acc, mirrored_acc)]

    # The loss of one global batch, computed per replica and summed the Keras way.
    logits = single(x)
    loss = SmoothedCrossEntropy(0.1)

    @tf.function
    def replica_loss(y, y_pred):
        return strategy.run(loss, args=(y, y_pred))

    inputs = tf.data.Dataset.from_tensor_slices((tgt[:16], logits[:16])).batch(16)
    distributed = next(iter(strategy.experimental_distribute_dataset(inputs)))
    per_replica = replica_loss(*distributed)
    summed = float(strategy.reduce("SUM", per_replica, axis=None))
    tokens = [
        int((v.numpy() != 0).sum()) for v in strategy.experimental_local_results(distributed[0])
    ]

    diff = max(
        float(np.abs(a - b).max())
        for a, b in zip(single.get_weights(), mirrored.get_weights(), strict=True)
    )
    moved = max(
        float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), initial, strict=True)
    )
    print(
        json.dumps(
            {
                "sharded": sharded_input(strategy, initial),
                "packed": packed_rows(strategy, initial),
                "replicas": strategy.num_replicas_in_sync,
                "mirrored_jit_compile": bool(mirrored.jit_compile),
                "single_jit_compile": bool(single.jit_compile),
                "xla_traces": [
                    fn.experimental_get_tracing_count()
                    for fn in (step.train_gradients, step.test_metrics)
                ],
                "mirrored_eval": mirrored_eval,
                "single_eval": single_eval,
                "max_weight_diff": diff,
                "max_weight_change": moved,
                "single_loss": single_history["loss"],
                "mirrored_loss": mirrored_history["loss"],
                "single_accuracy": single_history["accuracy"],
                "mirrored_accuracy": mirrored_history["accuracy"],
                "replica_summed_loss": summed,
                "whole_batch_loss": float(loss(tgt[:16], logits[:16])),
                "tokens_per_replica": tokens,
                "accumulated_updates": [
                    int(m.optimizer.iterations) for m in (single_acc, mirrored_acc)
                ],
                "accumulated_weight_diff": max(
                    float(np.abs(a - b).max())
                    for a, b in zip(
                        single_acc.get_weights(), mirrored_acc.get_weights(), strict=True
                    )
                ),
                "accumulated_weight_change": max(
                    float(np.abs(a - b).max())
                    for a, b in zip(mirrored_acc.get_weights(), initial, strict=True)
                ),
                "accumulated_average_diff": max(
                    float(np.abs(averages[0][k] - averages[1][k]).max()) for k in averages[0]
                ),
            }
        )
    )


def sharded_input(strategy, initial):
    """Per shapes: the steps of one epoch of `distribute_dataset` over 39 pairs (13 batches
    of 3 rows when fixed), the sources the replicas got, whether every replica's batch kept
    to half the budget; and the loss of a `fit` epoch on the dynamic one."""
    from tests.fixtures import tiny_hparams, tiny_model
    from tests.training.multi_worker_script import DigitTokenizer, text_pairs
    from tfblocks.text import distribute_dataset

    tokenizer = DigitTokenizer()
    pairs = text_pairs(39, 24)
    result = {}
    for shapes in ("max_length", "dynamic"):
        data = distribute_dataset(strategy, pairs, tokenizer, tokenizer, batch_tokens=64,
                                  max_length=10, seed=0, shapes=shapes)  # fmt: skip
        steps, sources, within = 0, [], True
        for features, _ in data:
            steps += 1
            for ids in strategy.experimental_local_results(features["inputs"]):
                within &= ids.shape[0] * ids.shape[1] <= 32
                sources += [" ".join(str(i) for i in row if i > 1) for row in ids.numpy()]
        result[shapes] = {"steps": steps, "sources": sorted(filter(None, sources)),
                          "within_budget": bool(within)}  # fmt: skip
    with strategy.scope():
        model = tiny_model(tiny_hparams(24), weights=initial, jit_compile=False)
    # Dynamic: the replicas' batches differ in shape (Keras needs `patch_keras` for that).
    result["loss"] = model.fit(data, epochs=1, verbose=0).history["loss"]
    result["stream"] = endless_input(strategy, model, pairs, tokenizer)
    return result


def packed_rows(strategy, initial):
    """One epoch of packed rows (`shapes="packed"`) on both setups: under the strategy as
    the translation job gives them (`distribute_dataset`, 3 rows per replica) and on one
    device, eagerly, in batches of the step's 6 rows. Neither compiles with XLA (as `auto`
    trains packed rows on a CPU with bfloat16 instructions): per-replica XLA, whose
    compilation would cost this most of its time, is compared with Keras' step in `main`.
    Returns the steps of each, the features a replica got, the largest weight difference
    and change."""
    import keras
    import numpy as np

    from tests.fixtures import tiny_hparams, tiny_model
    from tests.training.multi_worker_script import DigitTokenizer, text_pairs
    from tfblocks.text import distribute_dataset, make_dataset
    from tfblocks.training.callbacks import ExactSteps

    tokenizer, pairs = DigitTokenizer(), text_pairs(20, 24)
    settings = {"batch_tokens": 60, "max_length": 10, "shuffle": False, "shapes": "packed"}
    distributed = distribute_dataset(strategy, pairs, tokenizer, tokenizer, **settings)
    whole = make_dataset(pairs, tokenizer, tokenizer, **settings)  # [6, 10] features
    hp = tiny_hparams(24)
    # Eager on one device: no step to trace for three tiny steps.
    single = tiny_model(hp, weights=initial, jit_compile=False, learning_rate=1e-3,
                        run_eagerly=True)  # fmt: skip
    with strategy.scope():
        mirrored = tiny_model(hp, weights=initial, jit_compile=False, learning_rate=1e-3)
    # The steps each `fit` ran, and the optimizer's count of them: the end of a distributed
    # dataset of unknown length raises it once more without an update, which `ExactSteps`
    # (the job's) puts back.
    steps = [[], []]
    for model, data, seen in zip((single, mirrored), (whole, distributed), steps, strict=True):
        counter = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs, s=seen: s.append(batch)
        )
        model.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[counter, ExactSteps()])
    features = next(iter(distributed))[0]
    local = strategy.experimental_local_results(features["inputs"])
    weights = [m.get_weights() for m in (single, mirrored)]
    return {
        "steps": [len(seen) for seen in steps],
        "iterations": [int(m.optimizer.iterations.numpy()) for m in (single, mirrored)],
        "features": sorted(features),
        "replica_rows": [int(ids.shape[0]) for ids in local],
        "weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(*weights, strict=True)),
        "weight_change": max(
            float(np.abs(a - b).max()) for a, b in zip(weights[1], initial, strict=True)
        ),
    }


def endless_input(strategy, model, pairs, tokenizer):
    """`distribute_dataset(repeat=True)`: whether the first 13 steps (two passes of 13
    batches, two a step) give every replica a batch of real pairs only, whether a stream
    started at step 9 gives steps 9.. of the whole one, and the losses of
    `fit(epochs=2, steps_per_epoch=5)`."""
    import numpy as np

    from tfblocks.text import distribute_dataset

    def stream(start_step=0):
        return distribute_dataset(strategy, pairs, tokenizer, tokenizer, batch_tokens=64,
                                  max_length=10, seed=3, shapes="max_length", repeat=True,
                                  start_step=start_step)  # fmt: skip

    def steps(data, count):
        taken = []
        for features, _ in data:
            local = strategy.experimental_local_results(features["inputs"])
            taken.append([ids.numpy() for ids in local])
            if len(taken) == count:
                return taken
        return taken

    whole, started = steps(stream(), 16), steps(stream(9), 7)
    full = all(all((ids > 1).any(axis=1).all() for ids in step) for step in whole[:13])
    same = all(
        all(np.array_equal(a, b) for a, b in zip(x, y, strict=True))
        for x, y in zip(whole[9:], started, strict=True)
    )
    history = model.fit(stream(), epochs=2, steps_per_epoch=5, verbose=0).history
    return {"real_batches": bool(full), "started_equals": bool(same and len(started) == 7),
            "loss": history["loss"]}  # fmt: skip


if __name__ == "__main__":
    main()
