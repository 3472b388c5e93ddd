"""read_torch_checkpoint reads torch.save's zip format into NumPy arrays without torch and
without running the pickle: every dtype, views, shared storages; legacy, truncated,
hostile and malformed files are refused in one line naming the file."""

import io
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tfblocks.models.torch_checkpoint import ALLOWED, read_torch_checkpoint

DATA = Path(__file__).resolve().parents[1] / "data" / "torch"
MODULE = Path(__file__).resolve().parents[2] / "tfblocks" / "models" / "torch_checkpoint.py"


def _refusal(path, match):
    """The message of the ValueError that reading `path` raises: one line, naming it."""
    with pytest.raises(ValueError, match=match) as caught:
        read_torch_checkpoint(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


def test_reads_every_tensor_as_torch_saved_it():
    weights = read_torch_checkpoint(DATA / "state.bin")
    with np.load(DATA / "state.npz") as expected:
        assert list(weights) == list(expected.files)  # the file's order
        for name in expected.files:
            array, want = weights[name], expected[name]
            if name == "bfloat16":
                assert array.dtype == ml_dtypes.bfloat16
                array = array.astype(np.float32)
            assert array.dtype == want.dtype, name
            assert array.shape == want.shape, name
            np.testing.assert_array_equal(array, want, err_msg=name)
            assert array.flags.c_contiguous and array.flags.owndata, name
    assert weights["scalar"].shape == () and weights["scalar"] == np.float32(2.5)
    np.testing.assert_array_equal(weights["transposed"], weights["float32"].T)
    np.testing.assert_array_equal(weights["sliced"], weights["float32"][1:3, 2:5])


def test_shared_storages_give_arrays_of_their_own():
    weights = read_torch_checkpoint(DATA / "state.bin")
    encoder = weights["encoder.embed_tokens.weight"]
    decoder = weights["decoder.embed_tokens.weight"]
    np.testing.assert_array_equal(encoder, decoder)
    views = [weights[name] for name in ("float32", "transposed", "sliced")]
    for one, other in [(encoder, decoder), (views[0], views[1]), (views[0], views[2])]:
        assert not np.shares_memory(one, other)
    before = decoder.copy()
    encoder += 1.0
    np.testing.assert_array_equal(decoder, before)


def test_reading_imports_no_torch():
    # The module alone (not the package, which loads TensorFlow), with torch made
    # unimportable: whether or not torch is installed, reading must not need it.
    script = (
        "import importlib.util, sys\n"
        "sys.modules['torch'] = None\n"
        f"spec = importlib.util.spec_from_file_location('reader', {str(MODULE)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        f"weights = module.read_torch_checkpoint({str(DATA / 'state.bin')!r})\n"
        "assert len(weights) == 16, len(weights)\n"
        "assert sys.modules['torch'] is None\n"
        "assert not [name for name in sys.modules if name.startswith('torch.')]\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_refuses_the_legacy_format():
    message = _refusal(DATA / "legacy.bin", "legacy")
    assert "safetensors" in message and "re-save" in message


@pytest.mark.parametrize("keep", [0.5, 0.98])
def test_refuses_a_truncated_file(tmp_path, keep):
    data = (DATA / "state.bin").read_bytes()
    path = tmp_path / "truncated.bin"
    path.write_bytes(data[: int(len(data) * keep)])
    _refusal(path, "truncated or corrupt zip")


@pytest.mark.parametrize("entry", ["state/data.pkl", "state/data/0"])
def test_refuses_a_corrupt_entry(tmp_path, entry):
    data = bytearray((DATA / "state.bin").read_bytes())
    start = zipfile.ZipFile(DATA / "state.bin").getinfo(entry).header_offset
    name_size, extra_size = struct.unpack("<HH", data[start + 26 : start + 30])
    data[start + 30 + name_size + extra_size] ^= 0xFF  # the entry's first byte
    path = tmp_path / "corrupt.bin"
    path.write_bytes(bytes(data))
    assert "Bad CRC-32" in _refusal(path, "truncated or corrupt zip")


def test_refuses_a_file_that_is_no_zip(tmp_path):
    path = tmp_path / "text.bin"
    path.write_text("not a checkpoint\n")
    _refusal(path, "not a zip archive")


# A checkpoint made by hand: pickle opcodes (protocol 2) in a zip as torch writes it.
def _global(module, name):
    return f"c{module}\n{name}\n".encode()


def _text(value):
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _int(value):
    return b"J" + struct.pack("<i", value)


def _ints(values):
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _tensor(key, numel, offset, size, stride, storage="FloatStorage"):
    """The opcodes of `_rebuild_tensor_v2(storage, offset, size, stride, False, hooks)`."""
    persistent = b"(" + _text("storage") + _global("torch", storage)
    persistent += _text(key) + _text("cpu") + _int(numel) + b"tQ"
    hooks = _global("collections", "OrderedDict") + b")R"
    arguments = persistent + _int(offset) + _ints(size) + _ints(stride) + b"\x89" + hooks
    return _global("torch._utils", "_rebuild_tensor_v2") + b"(" + arguments + b"tR"


def _state(entries):
    """The opcodes of an OrderedDict of `entries` (name -> opcodes of its value)."""
    items = b"".join(_text(name) + value for name, value in entries.items())
    return b"\x80\x02" + _global("collections", "OrderedDict") + b")R(" + items + b"u."


def _checkpoint(path, pickled, storages, byteorder="little"):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        if byteorder is not None:
            archive.writestr("archive/byteorder", byteorder)
        for key, data in storages.items():
            archive.writestr(f"archive/data/{key}", data)
    return path


FOUR = np.arange(4, dtype="<f4").tobytes()


def test_reads_a_hand_made_checkpoint(tmp_path):
    pickled = _state({"w": _tensor("0", 4, 1, (3,), (1,)), "t": _tensor("0", 4, 0, (2, 2), (1, 2))})
    weights = read_torch_checkpoint(_checkpoint(tmp_path / "ok.bin", pickled, {"0": FOUR}))
    np.testing.assert_array_equal(weights["w"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(weights["t"], [[0.0, 2.0], [1.0, 3.0]])
    weights = read_torch_checkpoint(_checkpoint(tmp_path / "old.bin", pickled, {"0": FOUR}, None))
    assert list(weights) == ["w", "t"]


class _Exec:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def test_refuses_a_hostile_pickle_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    hostile = [
        # GLOBAL (protocol 2 names builtins as Python 2 did) and STACK_GLOBAL (protocol 4)
        (pickle.dumps({"weight": _Exec(marker)}, protocol=2), "__builtin__.exec"),
        (pickle.dumps({"weight": _Exec(marker)}, protocol=4), "builtins.exec"),
        (
            _state({"w": _global("os", "system") + b"(" + _text(f"touch {marker}") + b"tR"}),
            "os.system",
        ),
    ]
    for pickled, name in hostile:
        path = _checkpoint(tmp_path / "hostile.bin", pickled, {})
        message = _refusal(path, "refuses to run it")
        assert f"the global {name};" in message
    assert not marker.exists()  # the payload would have made it
    assert not [name for _, name in hostile if name in ALLOWED]


@pytest.mark.parametrize(
    ("entries", "storages", "byteorder", "match"),
    [
        ({"w": _tensor("0", 4, 1, (4,), (1,))}, {"0": FOUR}, "little", "past its storage"),
        ({"w": _tensor("0", 4, 0, (2, 3), (3, 1))}, {"0": FOUR}, "little", "past its storage"),
        ({"w": _tensor("1", 4, 0, (4,), (1,))}, {"0": FOUR}, "little", "lacks the entry"),
        ({"w": _tensor("0", 5, 0, (4,), (1,))}, {"0": FOUR}, "little", "16 bytes"),
        ({"w": _tensor("0", 4, 0, (4,), (1,))}, {"0": FOUR}, "big", "little-endian ones only"),
        (
            {
                "w": _tensor("0", 4, 0, (4,), (1,)),
                "v": _tensor("0", 4, 0, (4,), (1,), "LongStorage"),
            },
            {"0": FOUR},
            "little",
            "4 elements of 8 bytes",
        ),
        ({"w": _tensor("0", 2, 0, (2,), (1,), "ComplexFloatStorage")}, {}, "little", "Complex"),
        ({"w": _text("a string")}, {}, "little", "is a str, not a tensor"),
    ],
)
def test_refuses_a_malformed_checkpoint(tmp_path, entries, storages, byteorder, match):
    path = _checkpoint(tmp_path / "bad.bin", _state(entries), storages, byteorder)
    _refusal(path, match)


def test_refuses_what_is_not_a_dict_of_tensors(tmp_path):
    _refusal(_checkpoint(tmp_path / "list.bin", pickle.dumps([1, 2], protocol=2), {}), "a list")
    _refusal(_checkpoint(tmp_path / "junk.bin", b"\x80\x02junk", {}), "not a torch state dict")
    path = tmp_path / "two.bin"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a/data.pkl", pickle.dumps({}, protocol=2))
        archive.writestr("b/data.pkl", pickle.dumps({}, protocol=2))
    _refusal(path, "2 '<folder>/data.pkl' entries")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/version", "3")
    (tmp_path / "none.bin").write_bytes(buffer.getvalue())
    _refusal(tmp_path / "none.bin", "no '<folder>/data.pkl' entries")


def test_a_view_of_more_elements_than_its_storage_is_refused(tmp_path):
    # A stride-0 view of one element as 2**20 × 2**20 would copy out 4 TiB.
    pickled = _state({"big": _tensor("0", 1, 0, (2**20, 2**20), (0, 0))})
    file = _checkpoint(tmp_path / "big.bin", pickled, {"0": FOUR[:4]})
    with pytest.raises(ValueError, match=r"'big' of size \(1048576, 1048576\).*storage of 1"):
        read_torch_checkpoint(file)
