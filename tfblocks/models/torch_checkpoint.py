"""PyTorch's `pytorch_model.bin` read as NumPy arrays, without torch and without running it.

`torch.save` (torch >= 1.6) writes a zip archive with a single top folder (its name
varies: `archive`, or the file's stem) holding

    <top>/data.pkl      the pickled state dict; each tensor is a call of
                        `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`
                        and each storage a persistent id
                        `('storage', torch.FloatStorage, '<key>', 'cpu', numel)`
    <top>/data/<key>    the raw little-endian bytes of storage `<key>`
    <top>/byteorder     'little' (written by torch >= 1.13; older files are little-endian)
    <top>/version, ...  (not needed here)

A pickle can call any Python function it names, so this module never hands it to a plain
`pickle.load`: `_Unpickler.find_class` gives the pickle only stand-ins of our own for the
few torch names a state dict uses (`ALLOWED`); any other name is refused before anything
is called. The stand-ins only record what was asked for; the arrays are made afterwards,
once every offset, size and stride has been checked against its storage.

Example (any Hugging Face folder with a `pytorch_model.bin`):

    from tfblocks.models.torch_checkpoint import read_torch_checkpoint

    weights = read_torch_checkpoint("opus-mt-en-de/pytorch_model.bin")
    weights["model.shared.weight"].shape  # (58101, 512)

bfloat16 tensors come back as `ml_dtypes.bfloat16` arrays (the exact values; ml_dtypes is
installed with TensorFlow, and `array.astype(np.float32)` widens them losslessly).
"""

import io
import math
import os
import pickle
import re
import zipfile
import zlib
from collections import OrderedDict

import ml_dtypes
import numpy as np

# torch's storage type names -> the little-endian NumPy dtype of their elements.
STORAGE_DTYPES = {
    "FloatStorage": np.dtype("<f4"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "DoubleStorage": np.dtype("<f8"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype("?"),
}
_REBUILDERS = ("_rebuild_tensor_v2", "_rebuild_parameter", "_rebuild_parameter_with_state")
# Every global a checkpoint's pickle may name, as `module.name`.
ALLOWED = (
    *(f"torch._utils.{name}" for name in _REBUILDERS),
    "collections.OrderedDict",
    *(f"torch.{name}" for name in STORAGE_DTYPES),
)
# What torch's legacy (pre-1.6) format starts with: pickle protocol 2, then its magic number.
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def read_torch_checkpoint(path):
    """The state dict in a PyTorch checkpoint, as NumPy arrays, without torch.

    Reads the zip format of `torch.save` (torch >= 1.6): its pickle is unpickled with
    only the globals of `ALLOWED` available (tensor and parameter rebuilding, the storage
    types, `OrderedDict`), each mapped to a stand-in of this module, so nothing from the
    file runs. Every tensor becomes a C-contiguous array that owns its memory, also where
    several tensors share one storage (tied embeddings) or are views of it (transposes,
    slices with an offset).

    Args:
        path: a `pytorch_model.bin` (or any `torch.save` file of a dict of tensors).

    Returns:
        dict[str, np.ndarray]: the tensors by name, in the file's order. dtypes: float32,
        float16, float64, int64, int32, int16, int8, uint8, bool and bfloat16 (as
        `ml_dtypes.bfloat16`).

    Raises:
        ValueError: in one line naming the file, if it is in torch's legacy (non-zip)
            format, is not a zip or a truncated or corrupt one, lacks `data.pkl` or a
            storage, is big-endian, asks its pickle for any global outside `ALLOWED`
            (the `module.name` is given), holds a tensor that does not fit its storage,
            or its top object is not a dict of tensors.
    """
    path = os.fspath(path)
    with _open_zip(path) as archive:
        top = _top_folder(archive, path)
        _check_byteorder(archive, top, path)
        state = _unpickle(_read_entry(archive, f"{top}/data.pkl", path), path)
        storages = {}
        weights = {}
        for name, tensor in state.items():
            storage = tensor.storage
            # Each storage is read once; a key named with another dtype or length is
            # checked against its entry again (torch never writes one).
            seen = (storage.key, storage.dtype, storage.numel)
            if seen not in storages:
                storages[seen] = _read_storage(archive, top, storage, path)
            weights[name] = _materialize(tensor, storages[seen], name, path)
    return weights


def _fail(path, problem):
    """Raises the one-line ValueError of `problem` in the file `path`."""
    raise ValueError(f"{path}: {' '.join(str(problem).split())}")


def _open_zip(path):
    """`path` opened as a zip archive, or the ValueError saying what it is instead."""
    try:
        with open(path, "rb") as file:
            head = file.read(len(_LEGACY_MAGIC))
    except OSError as error:
        _fail(path, f"cannot be read ({error.strerror or error}).")
    if head.startswith(_LEGACY_MAGIC):
        _fail(
            path,
            "is in torch's legacy (pre-1.6, non-zip) format, which tfblocks does not read; "
            "re-save it with a recent torch (`torch.save(torch.load(f), f)`) or convert it "
            "to safetensors.",
        )
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        kind = "a truncated or corrupt zip archive" if head[:2] == b"PK" else "not a zip archive"
        _fail(path, f"is {kind}, not a torch checkpoint ({error}).")


def _read_entry(archive, entry, path):
    """The bytes of `entry` in `archive` (KeyError if it has none)."""
    try:
        return archive.read(entry)
    except KeyError:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, ValueError) as error:
        _fail(path, f"is a truncated or corrupt zip archive ({entry!r}: {error}).")
    except NotImplementedError as error:  # a compression zipfile does not know
        _fail(path, f"cannot be read ({entry!r}: {error}).")


def _top_folder(archive, path):
    """The name of the archive's top folder: the one holding `data.pkl`."""
    tops = [name[: -len("/data.pkl")] for name in archive.namelist() if name.endswith("/data.pkl")]
    tops = [top for top in tops if top and "/" not in top]
    if len(tops) != 1:
        found = "no" if not tops else f"{len(tops)}"
        _fail(path, f"has {found} '<folder>/data.pkl' entries, not one: not a torch checkpoint.")
    return tops[0]


def _check_byteorder(archive, top, path):
    """Refuses a big-endian checkpoint (files without `byteorder` are little-endian)."""
    try:
        order = _read_entry(archive, f"{top}/byteorder", path)
    except KeyError:
        return
    order = order.decode("ascii", "replace").strip()
    if order != "little":
        _fail(path, f"is a {order!r}-endian checkpoint; tfblocks reads little-endian ones only.")


class _StorageType:
    """Stands in for `torch.FloatStorage` and the other storage types."""

    __slots__ = ("dtype", "name")

    def __init__(self, name):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", STORAGE_DTYPES[name])

    def __setattr__(self, name, value):
        raise TypeError("a storage type cannot be changed")


class _Storage:
    """A storage the pickle refers to: its element type, key in `data/` and length."""

    __slots__ = ("dtype", "key", "numel")

    def __init__(self, dtype, key, numel):
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "numel", numel)

    def __setattr__(self, name, value):
        raise TypeError("a storage cannot be changed")


class _Tensor:
    """A tensor the pickle asked for: a strided view of a storage, not yet made."""

    __slots__ = ("offset", "size", "storage", "stride")

    def __init__(self, storage, offset, size, stride):
        object.__setattr__(self, "storage", storage)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "stride", stride)

    def __setattr__(self, name, value):
        raise TypeError("a tensor cannot be changed")


class _Call:
    """A function the pickle may call, which it cannot change (pickle's BUILD sets
    attributes; a plain function would take them)."""

    __slots__ = ("function",)

    def __init__(self, function):
        object.__setattr__(self, "function", function)

    def __setattr__(self, name, value):
        raise TypeError("an allowed global cannot be changed")

    def __call__(self, *args):
        return self.function(*args)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _rebuild_tensor(storage, offset, size, stride, *_rest):
    """Stands in for `torch._utils._rebuild_tensor_v2(storage, storage_offset, size,
    stride, requires_grad, backward_hooks[, metadata])`: checks the types, records it."""
    if not isinstance(storage, _Storage):
        raise TypeError("_rebuild_tensor_v2 got no storage")
    if not _is_int(offset) or offset < 0:
        raise TypeError(f"_rebuild_tensor_v2 got the storage offset {offset!r}")
    for what, values in (("size", size), ("stride", stride)):
        if not isinstance(values, tuple) or not all(_is_int(v) and v >= 0 for v in values):
            raise TypeError(f"_rebuild_tensor_v2 got the {what} {values!r}")
    if len(size) != len(stride):
        raise TypeError(f"_rebuild_tensor_v2 got the size {size} with the stride {stride}")
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *_rest):
    """Stands in for `torch._utils._rebuild_parameter(data, requires_grad, hooks)` and
    `_rebuild_parameter_with_state(data, requires_grad, hooks, state)`: the tensor."""
    if not isinstance(data, _Tensor):
        raise TypeError("_rebuild_parameter got no tensor")
    return data


def _ordered_dict(*args):
    """Stands in for `collections.OrderedDict` (the state dict and the empty hooks)."""
    if args:
        raise TypeError("OrderedDict is rebuilt from no arguments")
    return OrderedDict()


class _Unpickler(pickle.Unpickler):
    """An unpickler that knows the globals of `ALLOWED` only, as this module's stand-ins."""

    def __init__(self, file, path):
        super().__init__(file)
        self._path = path
        calls = {f"torch._utils.{name}": _rebuild_parameter for name in _REBUILDERS[1:]}
        calls["torch._utils._rebuild_tensor_v2"] = _rebuild_tensor
        calls["collections.OrderedDict"] = _ordered_dict
        self._globals = {name: _Call(function) for name, function in calls.items()}
        self._globals.update({f"torch.{n}": _StorageType(n) for n in STORAGE_DTYPES})

    def find_class(self, module, name):
        found = self._globals.get(f"{module}.{name}")
        if found is not None:
            return found
        if module == "torch" and name.endswith("Storage"):
            _fail(self._path, f"holds a torch.{name}, a tensor type tfblocks does not read.")
        _fail(
            self._path,
            f"its pickle asks for the global {module}.{name}; tfblocks reads tensors "
            "only and refuses to run it.",
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"persistent id {pid!r} names no storage type")
        if not (isinstance(key, str) and _KEY.fullmatch(key)) or not _is_int(numel) or numel < 0:
            raise pickle.UnpicklingError(f"persistent id {pid!r} is malformed")
        return _Storage(storage_type.dtype, key, numel)


def _unpickle(data, path):
    """The state dict pickled in `data`, tensors as `_Tensor`s (in the file's order)."""
    try:
        state = _Unpickler(io.BytesIO(data), path).load()
    except ValueError as error:
        if str(error).startswith(f"{path}: "):
            raise
        _fail(path, f"has a data.pkl that is not a torch state dict ({error}).")
    except Exception as error:  # anything a corrupt or hostile pickle raises
        name = type(error).__name__
        _fail(path, f"has a data.pkl that is not a torch state dict ({name}: {error}).")
    if not isinstance(state, dict):
        _fail(path, f"holds a {type(state).__name__}, not a dict of tensors.")
    for name, value in state.items():
        if not isinstance(name, str):
            _fail(path, f"is not a dict of tensors: it has the key {name!r}, not a string.")
        if not isinstance(value, _Tensor):
            what = type(value).__name__
            _fail(path, f"is not a dict of tensors: its entry {name!r} is a {what}, not a tensor.")
    return state


def _read_storage(archive, top, storage, path):
    """The elements of `storage`: a read-only array over the bytes of `<top>/data/<key>`."""
    entry = f"{top}/data/{storage.key}"
    try:
        info = archive.getinfo(entry)
    except KeyError:
        _fail(path, f"lacks the entry {entry!r} of a storage its data.pkl uses.")
    expected = storage.numel * storage.dtype.itemsize
    if info.file_size != expected:
        _fail(
            path,
            f"has {info.file_size} bytes in {entry!r} where its data.pkl says "
            f"{storage.numel} elements of {storage.dtype.itemsize} bytes ({expected}).",
        )
    return np.frombuffer(_read_entry(archive, entry, path), dtype=storage.dtype)


def _materialize(tensor, elements, name, path):
    """`tensor` as an array of its own, after checking that it lies within `elements`."""
    count = math.prod(tensor.size)
    if count:
        steps = zip(tensor.size, tensor.stride, strict=True)
        last = tensor.offset + sum((n - 1) * s for n, s in steps)
        if last >= len(elements):
            _fail(
                path,
                f"has a tensor {name!r} (offset {tensor.offset}, size {tensor.size}, stride "
                f"{tensor.stride}) reaching past its storage of {len(elements)} elements.",
            )
    if count > max(len(elements), 1):  # only overlapping (stride 0) views repeat elements
        _fail(
            path,
            f"has a tensor {name!r} of size {tensor.size} ({count} elements) over a storage "
            f"of {len(elements)}: an expanded view, which tfblocks does not copy out.",
        )
    itemsize = elements.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        elements[tensor.offset :] if count else elements[:0],
        shape=tensor.size,
        strides=tuple(s * itemsize for s in tensor.stride),
        writeable=False,
    )
    return np.array(view, order="C", copy=True)
