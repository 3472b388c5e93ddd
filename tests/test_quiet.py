"""`import tfblocks` prints none of TensorFlow's log lines unless the user chose a level
(tfblocks/_quiet.py), and the console scripts parse their arguments before they load
TensorFlow (tfblocks/_lazy.py)."""

import textwrap

import pytest

from tests.scripts import CPP_LOG, ROOT, console_scripts, run_quietly
from tfblocks._quiet import is_noise, wants_quiet

CUINIT = (
    "E0000 00:00:1796037716.241454    5047 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
)
ONEDNN = "I0000 00:00:1796037712.885045    5047 port.cc:153] oneDNN custom operations are on.\n"


def test_is_noise_follows_the_log_level():
    assert is_noise(CUINIT, 3) and not is_noise(CUINIT, 2)
    assert is_noise(ONEDNN, 1) and not is_noise(ONEDNN, 0)
    old_style = "2024-01-02 10:11:12.123456: W tensorflow/core/x.cc:10] slow\n"
    assert is_noise(old_style, 2) and not is_noise(old_style, 1)
    preamble = "WARNING: All log messages before absl::InitializeLog() is called are written\n"
    assert is_noise(preamble, 1) and not is_noise(preamble, 0)
    for kept in ["F0000 00:00:1.5  1 x.cc:1] fatal\n", "UserWarning: something\n", "Epoch 1/2\n"]:
        assert not is_noise(kept, 3)


def test_quiet_unless_verbose():
    assert wants_quiet(["my_script.py"])  # any program that imports tfblocks
    assert wants_quiet(["/venv/bin/tfblocks-train", "--epochs", "2"])
    assert not wants_quiet(["examples/quickstart.py", "--verbose"])
    assert wants_quiet(["--verbose"])  # the program's name, not an argument
    assert wants_quiet([])


def test_the_first_import_of_tensorflow_is_filtered(tmp_path):
    # A stand-in `tensorflow` that writes to file descriptor 2 as TF's C++ code does;
    # _quiet.py is loaded by path (which installs its import hook), so that neither
    # tfblocks nor the real TensorFlow is imported.
    written = (ONEDNN + CUINIT + "a real problem\n").encode()
    (tmp_path / "tensorflow.py").write_text(
        f"import os\nos.write(2, {written!r})\n"
        "import sys\nprint('a Python warning', file=sys.stderr)\n"
    )
    code = f"""
        import importlib.util, logging, os, sys
        sys.path.insert(0, {str(tmp_path)!r})
        spec = importlib.util.spec_from_file_location("q", {str(ROOT / "tfblocks/_quiet.py")!r})
        quiet = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(quiet)
        assert "tensorflow" not in sys.modules and quiet.quiet_tensorflow()  # not twice
        assert sum(isinstance(f, quiet._QuietImport) for f in sys.meta_path) == 1
        import tensorflow
        # The module keeps its own loader, not the hook's.
        assert type(tensorflow.__loader__).__name__ == "SourceFileLoader"
        assert tensorflow.__spec__.loader is tensorflow.__loader__
        assert not quiet.quiet_tensorflow()  # already imported: nothing to do
        print("after", file=sys.stderr)
        print(os.environ["TF_CPP_MIN_LOG_LEVEL"], logging.getLogger("tensorflow").level)
    """
    quiet = run_quietly(["-c", textwrap.dedent(code)])
    assert quiet.stderr == "a real problem\na Python warning\nafter\n"
    assert quiet.stdout == "3 40\n"  # C++ lines below FATAL, Python's logger at ERROR
    # A level the user set is theirs: 0 shows every line; the Python logger is untouched.
    shown = run_quietly(["-c", textwrap.dedent(code)], TF_CPP_MIN_LOG_LEVEL="0")
    assert shown.stderr == ONEDNN + CUINIT + "a real problem\na Python warning\nafter\n"
    assert shown.stdout == "0 0\n"


def test_import_and_first_use_write_nothing():
    # As a user runs it: no TF_CPP_MIN_LOG_LEVEL. The layer's call creates TensorFlow's
    # devices (cuInit's error line on a machine without a GPU).
    code = """
        import numpy as np
        import tfblocks
        block = tfblocks.TransformerBlock(num_heads=2, filter_size=16)
        print(tuple(block(np.zeros((1, 3, 8), "float32")).shape))
    """
    result = run_quietly(["-c", textwrap.dedent(code)])
    assert result.stdout == "(1, 3, 8)\n"
    assert result.stderr == ""


def test_verbose_restores_the_lines():
    # --verbose as an example parses it, without training.
    verbose = run_quietly(["-c", "import tfblocks", "--verbose"])
    assert CPP_LOG.search(verbose.stderr), verbose.stderr[-3000:]


# What the installed console script runs (pip writes it): its name in sys.argv[0], then
# `from MODULE import run; sys.exit(run())`. Prints whether TensorFlow or Keras got loaded.
CONSOLE_SCRIPT = """
import sys
sys.argv[0] = "/venv/bin/{name}"
from {module} import {function}
try:
    {function}()
finally:
    import tfblocks
    assert "TransformerBlock" in dir(tfblocks) and "BOS_ID" in tfblocks.__all__
    print("loaded:", sorted({{"tensorflow", "keras"}} & set(sys.modules)))
"""
COMMANDS = console_scripts()  # {name: (module, function)}, setup.py's


def console_script(name, *args, returncode):
    module, function = COMMANDS[name]
    code = CONSOLE_SCRIPT.format(name=name, module=module, function=function)
    return run_quietly(["-c", code, *args], returncode=returncode)


def test_in_a_command_public_names_are_imported_on_first_use():
    code = """
        import sys
        sys.argv[0] = "/venv/bin/tfblocks-train"
        import tfblocks.text
        assert "make_dataset" in dir(tfblocks.text) and "make_dataset" not in vars(tfblocks.text)
        from tfblocks.text import corpus, read_sentences  # a submodule, and a public name
        assert read_sentences is corpus.read_sentences and "read_sentences" in vars(tfblocks.text)
        assert tfblocks.BOS_ID == 3 and tfblocks.text is sys.modules["tfblocks.text"]
        print(sorted({"tensorflow", "keras"} & set(sys.modules)))
    """
    assert run_quietly(["-c", textwrap.dedent(code)]).stdout == "[]\n"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_does_not_load_tensorflow(name):
    result = console_script(name, "--help", returncode=0)
    assert result.stdout.startswith(f"usage: {name} ")
    assert result.stdout.endswith("loaded: []\n"), result.stdout[-500:]
    assert result.stderr == ""


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("tfblocks-train", ["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        ("tfblocks-train", ["--epochs", "0"], "--epochs=0"),  # checked after parsing
        ("tfblocks-translate", ["--model", "run", "--batch-size", "0"], "--batch-size=0"),
        ("tfblocks-evaluate", ["--model", "run"], "the following arguments are required"),
        ("tfblocks-import", ["onnx", "dir", "--output", "run"], "invalid choice: 'onnx'"),
        ("tfblocks-export", ["onnx", "--model", "run"], "invalid choice: 'onnx'"),
    ],
)
def test_argument_errors_do_not_load_tensorflow(name, args, message):
    result = console_script(name, *args, returncode=2)
    assert f"{name}: error: " in result.stderr and message in result.stderr, result.stderr
    assert result.stdout == "loaded: []\n"
    assert "loading TensorFlow" not in result.stderr  # said only when it loads
