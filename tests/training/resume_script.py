"""Subprocess body for test_resume: `fit` with BackupAndRestore that can be SIGKILLed.

Usage: `python -m tests.training.resume_script WORKDIR` from the repository root. Trains
EPOCHS epochs with `keras.callbacks.BackupAndRestore(WORKDIR/backup)` and a CSVLogger
(append). While `WORKDIR/killed` does not exist, it writes `WORKDIR/ready` in the middle
of epoch KILL_EPOCH and waits there to be killed. Prints the history and the optimizer's
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

    from tests.fixtures import synthetic_pairs, tiny_hparams, tiny_model

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

    hp = tiny_hparams(16)
    x, y = synthetic_pairs(STEPS * 8, 7, 16, padded=False)
    model = tiny_model(hp, seed=0, jit_compile=False, learning_rate=3e-3)
    history = model.fit(
        x,
        y,
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
