"""The weights of a Hugging Face model folder as NumPy arrays, whatever files hold them.

A folder written by `save_pretrained` holds its weights in one of four ways, tried in this
order: `model.safetensors`; shards listed by `model.safetensors.index.json`
(`{"weight_map": {key: shard file}}`); `pytorch_model.bin`; shards listed by
`pytorch_model.bin.index.json`. safetensors files are read with the `safetensors`
package's NumPy API, PyTorch files with `tfblocks.models.torch_checkpoint` (NumPy and a
restricted unpickler: no torch, nothing from the file executed). Either way no torch is
imported.
"""

import json
import os

from tfblocks.models.marian_npz import fail

SAFETENSORS = "model.safetensors"
PYTORCH = "pytorch_model.bin"
# Each single file and the index of its shards, in the order they are looked for.
LAYOUTS = ((SAFETENSORS, SAFETENSORS + ".index.json"), (PYTORCH, PYTORCH + ".index.json"))


def weights_files(path):
    """The files that hold the weights of the folder `path`: `[file]` for one file, the
    shards in the index's order for an index; a one-line ValueError naming what the
    folder lacks when it has none, or an index that is not one."""
    for single, index in LAYOUTS:
        for name in (single, index):
            if os.path.isdir(os.path.join(path, name)):  # there, but not what it should be
                fail(os.path.join(path, name), "a folder where a file is expected.")
        if os.path.isfile(os.path.join(path, single)):
            return [os.path.join(path, single)]
        if os.path.isfile(os.path.join(path, index)):
            return _shards(os.path.join(path, index))
    names = ", ".join(name for layout in LAYOUTS for name in layout)
    fail(os.path.join(path, SAFETENSORS), f"missing: the folder holds none of {names}.")


def _shards(index):
    """The shard files an index file lists (each once, in the order of first use)."""
    try:
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
        fail(index, f"not a JSON index of shards ({error}).")
    if not isinstance(weight_map, dict) or not weight_map:
        fail(index, 'no "weight_map" of weight names to shard files.')
    folder = os.path.dirname(index)
    shards = []
    for key, name in weight_map.items():
        if not isinstance(name, str) or os.path.basename(name) != name:
            fail(index, f"the shard of {key} must be a file name in the folder, got {name!r}.")
        if name not in shards:
            shards.append(name)
    for name in shards:
        if not os.path.isfile(os.path.join(folder, name)):
            fail(os.path.join(folder, name), f"missing: a shard that {index} lists.")
    return [os.path.join(folder, name) for name in shards]


def read_weights(path):
    """`(weights, file)`: every weight of the folder `path` by name (NumPy arrays) and the
    file (or index) the messages should name; a one-line ValueError naming the file when
    one cannot be read or two shards hold the same name."""
    files = weights_files(path)
    weights = {}
    for file in files:
        for key, value in _read_file(file).items():
            if key in weights:
                fail(file, f"{key} is also in another shard.")
            weights[key] = value
    named = files[0] if len(files) == 1 else os.path.join(path, _index_name(files[0]))
    return weights, named


def _index_name(shard):
    return (SAFETENSORS if shard.endswith(".safetensors") else PYTORCH) + ".index.json"


def _read_file(file):
    if file.endswith(".safetensors"):
        import safetensors
        import safetensors.numpy

        try:
            return safetensors.numpy.load_file(file)
        except (safetensors.SafetensorError, OSError, ValueError) as error:
            fail(file, f"not a readable safetensors file (truncated?): {error}.")
    from tfblocks.models.torch_checkpoint import read_torch_checkpoint

    return read_torch_checkpoint(file)
