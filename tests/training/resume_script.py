"""Subprocess body for test_resume: `fit` with BackupAndRestore that can be SIGKILLed.

Usage: `python resume_script.py WORKDIR`. Trains EPOCHS epochs with
`keras.callbacks.BackupAndRestore(WORKDIR/backup)` and a CSVLogger (append). While
`WORKDIR/killed` does not exist, it writes `WORKDIR/ready` in the middle of epoch
KILL_EPOCH and waits there to be killed. Prints the history and the optimizer's
step count as the last JSON line.
"""

import json
import os
import pathlib
import sys
import time

EPOCHS = 4
KILL_EPOCH = 2
STEPS = 8


def main(workdir):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import numpy as np

    from tfblocks.models import build_transformer, hparams
    from tfblocks.training import compile_transformer

    workdir = pathlib.Path(workdir)

    class WaitToBeKilled(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if (
                self.epoch == KILL_EPOCH
                and batch == STEPS // 2
                and not (workdir / "killed").exists()
            ):
                (workdir / "ready").write_text(str(self.epoch))
                time.sleep(600)

    keras.utils.set_random_seed(0)
    hp = hparams(
        "transformer_tiny",
        vocab_size=16,
        hidden_size=32,
        filter_size=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
        layer_prepostprocess_dropout=0.0,
        attention_dropout=0.0,
        relu_dropout=0.0,
    )
    rng = np.random.default_rng(0)
    src = rng.integers(4, 16, (STEPS * 8, 7)).astype("int32")
    tgt = src[:, ::-1].copy()
    model = build_transformer(hp)
    compile_transformer(model, hp, jit_compile=False, learning_rate=3e-3)
    history = model.fit(
        {"inputs": src, "targets": tgt},
        tgt,
        batch_size=8,
        epochs=EPOCHS,
        shuffle=False,
        verbose=0,
        callbacks=[
            keras.callbacks.BackupAndRestore(str(workdir / "backup")),
            keras.callbacks.CSVLogger(str(workdir / "history.csv"), append=True),
            WaitToBeKilled(),
        ],
    )
    print(
        json.dumps(
            {
                "epochs": history.epoch,
                "loss": history.history["loss"],
                "iterations": int(model.optimizer.iterations),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
