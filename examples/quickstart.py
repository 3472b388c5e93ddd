"""Quickstart: a causal Transformer made of tfblocks layers learns a running maximum.

Every position must output the largest token id seen so far, so the model has to
attend to the whole (causal) past: a small test that attention, the causal mask and
padding all work. It builds the model with the Keras functional API from
`SinusoidalEmbedding` and two Pre-LN `TransformerBlock`s, fits it with XLA and prints
accuracy before and after training plus a few predictions.

Run:  python examples/quickstart.py [--epochs 8] [--steps-per-epoch 50]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tfblocks  # isort: skip  (first, so that TensorFlow loads quietly)
import keras
import numpy as np

VOCAB = 20


def make_data(rng, n, length=12):
    """Sequences of ids 1..VOCAB-1 with trailing padding; labels are running maxima."""
    ids = rng.integers(1, VOCAB, size=(n, length))
    lengths = rng.integers(length // 2, length + 1, size=n)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    labels = np.maximum.accumulate(ids, axis=1) * (ids != 0)
    return ids.astype("int32"), labels.astype("int32")


def build_model(hidden=64, heads=4, layers=2):
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedding = tfblocks.SinusoidalEmbedding(VOCAB, hidden, name="embedding")
    h = embedding(ids)
    for i in range(layers):
        h = tfblocks.TransformerBlock(heads, 4 * hidden, causal=True, name=f"block_{i}")(h)
    h = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(h)
    return keras.Model(ids, embedding.attend(h), name="running_max")


def masked_accuracy(model, ids, labels):
    pred = np.argmax(model.predict(ids, verbose=0), axis=-1)
    real = ids != 0
    return float(np.mean(pred[real] == labels[real]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's log lines")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    train_ids, train_labels = make_data(rng, args.batch_size * args.steps_per_epoch)
    test_ids, test_labels = make_data(rng, 512)

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
        jit_compile=True,
    )
    print(f"tfblocks {tfblocks.__version__}: {model.count_params():,} parameters")
    print(f"accuracy before training: {masked_accuracy(model, test_ids, test_labels):.3f}")
    start = time.perf_counter()
    model.fit(
        train_ids,
        np.where(train_ids != 0, train_labels, 0),
        batch_size=args.batch_size,
        epochs=args.epochs,
        verbose=2,
    )
    print(f"trained in {time.perf_counter() - start:.1f} s")
    print(f"accuracy after training:  {masked_accuracy(model, test_ids, test_labels):.3f}")
    pred = np.argmax(model.predict(test_ids[:3], verbose=0), axis=-1)
    for ids, p in zip(test_ids[:3], pred, strict=True):
        real = ids != 0
        print(f"  input {ids[real].tolist()}\n  maxes {p[real].tolist()}")


if __name__ == "__main__":
    main()
