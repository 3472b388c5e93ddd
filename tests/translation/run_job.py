"""A tiny translation run through `tfblocks.translation.job.TrainingJob.train`, shared by the
tests.

`python tests/translation/run_job.py FOLDER EPOCHS [KILL_EPOCH]` trains in FOLDER; with KILL_EPOCH
(1-based) the process SIGKILLs itself in the middle of that epoch, after the epochs
before it were saved.
"""

import os
import signal
import sys

HP = {
    "hidden_size": 32, "filter_size": 64, "num_heads": 2, "num_encoder_layers": 1,
    "num_decoder_layers": 1, "max_length": 24, "layer_prepostprocess_dropout": 0.0,
    "attention_dropout": 0.0, "relu_dropout": 0.0,
}  # fmt: skip


def parts():
    """Splits, tokenizer and HParams of the tiny run (deterministic)."""
    import tfblocks
    from tfblocks.text import load_phrasebook, train_tokenizers

    splits = load_phrasebook(size=1000)
    splits = {"train": splits["train"][:160], "dev": splits["dev"][:16]}
    tokenizer, _ = train_tokenizers(splits["train"], vocab_size=250, model_type="bpe")
    hp = tfblocks.hparams("transformer_tiny", vocab_size=tokenizer.vocabulary_size, **HP)
    return splits, tokenizer, hp


def options(epochs, **overrides):
    from tfblocks.translation.options import TrainingOptions

    settings = {"batch_tokens": 256, "dev_sentences": 0, "strategy": "default", "verbose": 0}
    return TrainingOptions(epochs=epochs, **{**settings, **overrides})


def train(folder, splits, tokenizer, hp, options, log=print, callbacks=()):
    """`TrainingJob(options, splits).train(folder, tokenizer, hp)`: `(model, report)`."""
    from tfblocks.translation.job import TrainingJob

    return TrainingJob(options, splits, log=log, callbacks=callbacks).train(folder, tokenizer, hp)


def main(folder, epochs, kill_epoch=None):
    import keras

    from tfblocks.translation.run_folder import RunFolder

    class Kill(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == kill_epoch and batch == 1:
                os.kill(os.getpid(), signal.SIGKILL)

    splits, tokenizer, hp = parts()
    callbacks = [Kill()] if kill_epoch else []
    train(RunFolder(folder), splits, tokenizer, hp, options(epochs), callbacks=callbacks)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
