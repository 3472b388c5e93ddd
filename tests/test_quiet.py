"""tfblocks' programs print no TensorFlow C++ log lines unless --verbose (tfblocks/_quiet.py)."""

import textwrap

from tests.scripts import CPP_LOG, ROOT, run_quietly
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


def test_who_asks_for_quiet():
    assert wants_quiet(["examples/quickstart.py"], {"TFBLOCKS_QUIET": "1"})
    assert not wants_quiet(["examples/quickstart.py", "--verbose"], {"TFBLOCKS_QUIET": "1"})
    assert wants_quiet(["/venv/bin/tfblocks-train", "--epochs", "2"], {})
    assert not wants_quiet(["/venv/bin/tfblocks-train"], {"TFBLOCKS_QUIET": "0"})
    assert not wants_quiet(["my_script.py"], {})  # a library user's program: untouched
    assert not wants_quiet([], {})


def test_filter_drops_log_lines_and_keeps_everything_else(tmp_path):
    # A stand-in `tensorflow` that writes to file descriptor 2 as TF's C++ code does;
    # _quiet.py is loaded by path so that the real TensorFlow is not imported.
    written = (ONEDNN + CUINIT + "a real problem\n").encode()
    (tmp_path / "tensorflow.py").write_text(
        f"import os\nos.write(2, {written!r})\n"
        "import sys\nprint('a Python warning', file=sys.stderr)\n"
    )
    code = f"""
        import importlib.util, sys
        sys.path.insert(0, {str(tmp_path)!r})
        spec = importlib.util.spec_from_file_location("q", {str(ROOT / "tfblocks/_quiet.py")!r})
        quiet = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(quiet)
        assert quiet.quiet_tensorflow() and "tensorflow" in sys.modules
        assert not quiet.quiet_tensorflow()  # already imported: nothing to do
        print("after", file=sys.stderr)
    """
    quiet = run_quietly(["-c", textwrap.dedent(code)]).stderr
    assert quiet == "a real problem\na Python warning\nafter\n"
    shown = run_quietly(["-c", textwrap.dedent(code)], TF_CPP_MIN_LOG_LEVEL="0").stderr
    assert shown == ONEDNN + CUINIT + "a real problem\na Python warning\nafter\n"


def test_verbose_restores_the_lines():
    # --verbose as an example parses it, without training.
    code = "import os; os.environ['TFBLOCKS_QUIET'] = '1'; import tfblocks"
    verbose = run_quietly(["-c", code, "--verbose"])
    assert CPP_LOG.search(verbose.stderr), verbose.stderr[-3000:]
