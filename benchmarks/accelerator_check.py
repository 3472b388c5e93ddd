"""A prepared check to run on a GPU or TPU machine (about 5 minutes): speed and correctness.

Not yet run on an accelerator (figures: benchmarks/README.md). What it does, under
`get_strategy("auto")` (a TPU, else `MirroredStrategy` over all GPUs when there are
several, else one device):

1. Training throughput, mixed precision (`mixed_float16` on GPU, `mixed_bfloat16` on TPU)
   with XLA: target tokens/s of `model.fit` for tfblocks (`build_transformer` +
   `compile_transformer(jit_compile=True)`, per-replica XLA under Mirrored) and the same
   architecture built from keras-hub layers (`benchmarks/train_throughput.py`'s peer,
   compiled the way Keras can: XLA on one device, none under a strategy), on shape (a)
   (vocab 8000, d 256, 4 heads, filter 1024, 3+3 layers) and at `transformer_base` width
   (vocab 32000, d 512, 8 heads, filter 2048, 6+6 layers), batch 32 per replica × 64.
2. Cached decoding speed: `tfblocks.Decoder` greedy and beam search (beam 4) on the
   shape (a) model, batch 32, 64 positions, XLA.
3. Correctness: the loss of every tfblocks run decreases, and after training under the
   mixed policy the weights, the float32 logits and the loss scale are finite.

On a machine without GPU or TPU it runs the same code at tiny sizes (so the script
itself is checked) and prints one `SKIPPED:` line for each part that needs an
accelerator. `--cpu-replicas 2` mirrors over two logical CPUs, to try the multi-replica
path without GPUs. Exit status 1 when a correctness check fails.

Run:  python benchmarks/accelerator_check.py
      python benchmarks/accelerator_check.py --cpu-replicas 2    # on a CPU machine
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from shapes import SHAPES as TRAINING_SHAPES

import tfblocks
from tfblocks.decoding import BeamSearch, Greedy

SHAPES = {  # name -> (preset, overrides, batch per replica, length)
    "a": TRAINING_SHAPES["a"],
    "base": ("transformer_base", {}, 32, 64),
    "tiny": (
        "transformer_tiny",
        {
            "vocab_size": 64,
            "hidden_size": 32,
            "filter_size": 64,
            "num_heads": 2,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
        },
        4,
        12,
    ),
}


class Report:
    """Collects PASS / FAIL / SKIPPED lines and prints them as they come."""

    def __init__(self):
        self.failed, self.passed, self.skipped = [], [], []

    def check(self, ok, text):
        (self.passed if ok else self.failed).append(text)
        print(f"{'PASS' if ok else 'FAIL'}: {text}", flush=True)

    def skip(self, text):
        self.skipped.append(text)
        print(f"SKIPPED: {text}", flush=True)


def accelerator():
    """ "TPU", "GPU" or None."""
    for kind in ("TPU", "GPU"):
        if tf.config.list_physical_devices(kind):
            return kind
    return None


def make_dataset(vocab_size, global_batch, length, seed=0):
    """One fixed batch of full-length ids, repeated (the loss falls as it is learnt)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(4, vocab_size, (global_batch, length)).astype("int32")
    tgt = src[:, ::-1].copy()  # learnable: reverse the source
    dataset = tf.data.Dataset.from_tensors(({"inputs": src, "targets": tgt}, tgt))
    return dataset.repeat()


class EpochTimer(keras.callbacks.Callback):
    """Seconds per step from epoch-end times (each reads the loss: a device sync)."""

    def __init__(self, steps):
        super().__init__()
        self.steps = steps
        self.marks, self.losses = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))  # waits for the device
        self.marks.append(time.perf_counter())

    def step_seconds(self):
        gaps = np.diff(self.marks)  # epoch 0 (compilation) only ends the warm-up
        return statistics.median(gaps) / self.steps


def train_throughput(args, strategy, shape, report):
    """Trains tfblocks and the keras-hub peer; returns the tfblocks model and a table."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_throughput import build_keras_hub_transformer

    preset, overrides, batch, length = SHAPES[shape]
    hp = tfblocks.hparams(preset, **overrides)
    replicas = strategy.num_replicas_in_sync
    dataset = make_dataset(hp.vocab_size, batch * replicas, length)
    rows, tfblocks_model = [], None
    for label in ("tfblocks", "keras-hub"):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            if label == "tfblocks":
                model = tfblocks.build_transformer(hp)
                tfblocks.compile_transformer(model, hp, jit_compile=True, learning_rate=1e-3)
            else:  # Keras compiles the whole step with XLA only without a strategy
                model = build_keras_hub_transformer(hp, length)
                model.compile(
                    optimizer=keras.optimizers.Adam(1e-3, 0.9, hp.optimizer_adam_beta2, 1e-9),
                    loss=keras.losses.SparseCategoricalCrossentropy(
                        from_logits=True, ignore_class=0
                    ),
                    jit_compile=not tf.distribute.has_strategy(),
                )
        timer = EpochTimer(args.steps)
        start = time.perf_counter()
        model.fit(
            dataset,
            epochs=1 + args.rounds,
            steps_per_epoch=args.steps,
            verbose=0,
            callbacks=[timer],
        )
        seconds = timer.step_seconds()
        rows.append(
            {
                "shape": shape,
                "model": label,
                "xla": bool(model.jit_compile),
                "ms": seconds * 1e3,
                "tokens_per_s": batch * replicas * length / seconds,
                "wall_s": time.perf_counter() - start,
            }
        )
        if label == "tfblocks":
            tfblocks_model = model
            losses = timer.losses
            report.check(
                all(np.isfinite(losses)) and losses[-1] < losses[0],
                f"shape {shape}: tfblocks loss decreases under {keras.config.dtype_policy().name}"
                f" ({' → '.join(f'{v:.3f}' for v in losses)})",
            )
    return tfblocks_model, hp, rows


def check_finite(model, hp, shape, report):
    """Weights, float32 logits and the loss scale are finite after training."""
    _, _, batch, length = SHAPES[shape]
    weights_ok = all(np.isfinite(w).all() for w in model.get_weights())
    x = make_dataset(hp.vocab_size, batch, length).take(1).get_single_element()[0]
    logits = model(x, training=False)
    logits_ok = bool(np.isfinite(keras.ops.convert_to_numpy(logits)).all())
    scale = getattr(model.optimizer, "dynamic_scale", None)
    scale_text = "no loss scaling" if scale is None else f"loss scale {float(scale.numpy()):g}"
    scale_ok = scale is None or np.isfinite(float(scale.numpy()))
    policy = keras.config.dtype_policy().name
    report.check(
        weights_ok and logits_ok and scale_ok and logits.dtype == tf.float32,
        f"shape {shape}: after training under {policy}: weights finite={weights_ok}, "
        f"{logits.dtype.name} logits finite={logits_ok}, {scale_text}",
    )


def decoding_speed(args, model, hp, shape, report):
    """Greedy and beam-search positions per second through `tfblocks.Decoder`."""
    decoder_class = getattr(tfblocks, "Decoder", None)  # the decoding API is being reworked
    if decoder_class is None:
        report.skip("decoding: this tfblocks has no tfblocks.Decoder")
        return []
    _, _, batch, length = SHAPES[shape]
    source = make_dataset(hp.vocab_size, batch, length).take(1).get_single_element()[0]
    source = source["inputs"]
    rows = []
    searches = {
        "greedy": lambda d: d.decode(Greedy(), source),
        "beam 4": lambda d: d.decode(BeamSearch(beam_size=4), source),
    }
    decoder = None  # one for both searches: they share its encoder program and model step
    for name, search in searches.items():
        try:
            if decoder is None:
                decoder = decoder_class(model, max_length=length)
            ids, _ = search(decoder)  # trace and compile
            np.asarray(ids)
            start = time.perf_counter()
            for _ in range(args.decode_calls):
                ids, _ = search(decoder)
                np.asarray(ids)  # waits for the device
            seconds = (time.perf_counter() - start) / args.decode_calls
        except (TypeError, AttributeError, ValueError) as error:  # the API moved
            report.skip(
                f"decoding {name}: the Decoder API differs ({type(error).__name__}: {error})"
            )
            continue
        rows.append(
            {"search": name, "ms": seconds * 1e3, "positions_per_s": batch * length / seconds}
        )
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per timed epoch")
    parser.add_argument("--rounds", type=int, default=3, help="timed epochs (after 1 warm-up)")
    parser.add_argument("--decode-calls", type=int, default=3)
    parser.add_argument(
        "--cpu-replicas", type=int, default=1, help="without GPU/TPU: mirror over N logical CPUs"
    )
    parser.add_argument(
        "--shapes", nargs="+", choices=["a", "base"], default=["a", "base"], help="on accelerators"
    )
    args = parser.parse_args(argv)
    for name in ("steps", "rounds", "decode_calls", "cpu_replicas"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    kind = accelerator()
    if kind is None and args.cpu_replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_replicas
        )
    report = Report()
    policy = {"TPU": "mixed_bfloat16", "GPU": "mixed_float16"}.get(kind, "mixed_float16")
    keras.mixed_precision.set_global_policy(policy)
    if kind is None and args.cpu_replicas > 1:
        devices = [f"/cpu:{i}" for i in range(args.cpu_replicas)]
        strategy = tfblocks.get_strategy("mirrored", devices=devices)
    else:
        strategy = tfblocks.get_strategy("auto")
    gpus = len(tf.config.list_physical_devices("GPU"))
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}; accelerator: {kind or 'none'}"
        f" ({gpus} GPU(s)); {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replica(s); policy {policy}",
        flush=True,
    )
    if kind is None:
        shapes = ["tiny"]
        report.skip(
            "training throughput at shape (a) and transformer_base width, and decoding "
            "speed at shape (a): no GPU or TPU here, so only the tiny shape ran (its "
            "figures say nothing about accelerators)"
        )
    else:
        shapes = args.shapes
    if kind != "GPU" or gpus < 2:
        report.skip(f"MirroredStrategy over several GPUs: this machine has {gpus} GPU(s)")

    table, decode_rows = [], []
    for shape in shapes:
        model, hp, rows = train_throughput(args, strategy, shape, report)
        table += rows
        check_finite(model, hp, shape, report)
        if shape in ("a", "tiny"):
            decode_rows = decoding_speed(args, model, hp, shape, report)

    print(f"\ntraining, {policy}, {strategy.num_replicas_in_sync} replica(s), medians of epochs")
    print(
        f"{'shape':<6}{'model':<11}{'XLA':>5}{'ms/step':>10}{'tokens/s':>11}{'tfblocks/peer':>15}"
    )
    for row in table:
        peer = next(r for r in table if r["shape"] == row["shape"] and r["model"] == "keras-hub")
        ratio = row["tokens_per_s"] / peer["tokens_per_s"]
        print(
            f"{row['shape']:<6}{row['model']:<11}{'on' if row['xla'] else 'off':>5}"
            f"{row['ms']:>10.1f}{row['tokens_per_s']:>11.0f}"
            + (f"{ratio:>14.3f}×" if row["model"] == "tfblocks" else "")
        )
    if decode_rows:
        print("\ncached decoding (tfblocks.Decoder, XLA), positions = batch × max_length")
        for row in decode_rows:
            print(
                f"{row['search']:<8}{row['ms']:>10.1f} ms"
                f"{row['positions_per_s']:>11.0f} positions/s"
            )
    print(
        f"\n{len(report.passed)} passed, {len(report.failed)} failed, "
        f"{len(report.skipped)} skipped; {time.perf_counter() - start:.0f} s"
    )
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
