"""Regenerates the PyTorch checkpoint fixture of `tests/models/test_torch_checkpoint.py`.

Besides `make_marian_fixture.py`, the only file of the project that imports torch; run it
with a separate environment (tfblocks and its tests never need torch):

    python3 -m venv /tmp/fixture-venv
    /tmp/fixture-venv/bin/pip install torch numpy
    /tmp/fixture-venv/bin/python tests/data/make_torch_checkpoint_fixture.py

It writes into `tests/data/torch/` (a few KB in all):

    state.bin     `torch.save` (zip format) of an OrderedDict of small tensors: every dtype
                  the reader supports (float32, float16, bfloat16, float64, int64, int32,
                  int16, int8, uint8, bool), a transposed (non-contiguous) view, a slice
                  with a storage offset, two entries sharing one storage (tied embeddings),
                  a 0-d scalar and an `nn.Parameter`
    state.npz     the same tensors as NumPy arrays, by the same names (bfloat16 as float32)
    legacy.bin    a small dict of tensors saved in torch's legacy (pre-1.6, non-zip) format
"""

import os
from collections import OrderedDict

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "torch")


def tensors():
    """The OrderedDict that `state.bin` holds."""
    generator = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=generator)
    embedding = torch.randn(5, 3, generator=generator)
    long_row = torch.arange(-3, 9, dtype=torch.int64) * 1_000_000_007
    state = OrderedDict()
    state["float32"] = base
    state["float16"] = torch.randn(2, 3, generator=generator).half()
    state["bfloat16"] = torch.randn(3, 2, generator=generator).bfloat16()
    state["float64"] = torch.randn(2, 2, 2, generator=generator).double()
    state["int64"] = long_row
    state["int32"] = torch.tensor([[-(2**31), 0, 2**31 - 1]], dtype=torch.int32)
    state["int16"] = torch.tensor([-(2**15), -1, 2**15 - 1], dtype=torch.int16)
    state["int8"] = torch.tensor([-128, -1, 0, 127], dtype=torch.int8)
    state["uint8"] = torch.tensor([0, 1, 200, 255], dtype=torch.uint8)
    state["bool"] = torch.tensor([[True, False], [False, True]])
    state["transposed"] = base.t()  # shares base's storage, strides (1, 6)
    state["sliced"] = base[1:3, 2:5]  # storage offset 8, strides (6, 1)
    state["encoder.embed_tokens.weight"] = embedding
    state["decoder.embed_tokens.weight"] = embedding  # tied: the same storage
    state["scalar"] = torch.tensor(2.5)
    state["parameter"] = torch.nn.Parameter(torch.randn(3, generator=generator))
    return state


def as_numpy(tensor):
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy().copy()


def main():
    os.makedirs(OUT, exist_ok=True)
    state = tensors()
    torch.save(state, os.path.join(OUT, "state.bin"))
    np.savez(os.path.join(OUT, "state.npz"), **{k: as_numpy(v) for k, v in state.items()})
    legacy = OrderedDict(weight=torch.ones(2, 2), bias=torch.zeros(2))
    torch.save(legacy, os.path.join(OUT, "legacy.bin"), _use_new_zipfile_serialization=False)
    for name in sorted(os.listdir(OUT)):
        print(name, os.path.getsize(os.path.join(OUT, name)), "bytes")


if __name__ == "__main__":
    main()
