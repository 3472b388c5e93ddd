"""The training shapes the benchmarks share: one definition, no TensorFlow import.

`name -> (preset, hparams overrides, batch per worker/replica, length)`. Shape (a) is the
README's comparison shape; `base` and `big` are transformer_base/big width with vocab 8000
and the batch this 2-core machine fits; `quick` is the smoke runs' smallest model that
still has every part. `train_throughput.py`, `scaling.py` and `accelerator_check.py`
read it (scaling.py's parent process must not import TensorFlow, hence this module of
its own).
"""

SHAPES = {
    "a": (
        "transformer_small",
        {"vocab_size": 8000, "num_encoder_layers": 3, "num_decoder_layers": 3},
        32,
        64,
    ),
    "base": ("transformer_base", {"vocab_size": 8000}, 8, 64),
    "big": ("transformer_big", {"vocab_size": 8000}, 4, 64),
    "quick": (
        "transformer_tiny",
        {
            "vocab_size": 32,
            "hidden_size": 16,
            "filter_size": 32,
            "num_heads": 2,
            "num_encoder_layers": 1,
            "num_decoder_layers": 1,
        },
        2,
        8,
    ),
}
