"""Runs several benchmark scripts one after another in one Python, for the smoke tests.

Usage (from the repository root):

    python tests/benchmarks/run_together.py '[["NAME", "benchmarks/x.py", "--quick"], ...]'

Each script runs as `__main__` (`runpy.run_path`) with its own `sys.argv`, its Python-level
standard output and error captured (TensorFlow's C++ lines go to this process's stderr);
between scripts Keras' session and dtype policy and NumPy's print options are reset.
What else a script leaves behind stays for the next: random seeds (the scripts set their
own), warning filters, imported modules (the scripts' own neighbours included), a
configured TensorFlow runtime. After each script one JSON line: `{"name": NAME,
"status": exit status, "stdout": ..., "stderr": ...}`. A script that exits with a
non-zero status or raises does not stop the others.

Starting TensorFlow and keras-hub costs about 10 CPU-seconds a process on the 2-core CI
machine, so one process for the scripts that can share one saves that for all but the
first. Scripts that configure TensorFlow before it starts (threads, XLA
flags) cannot share a process and run alone (tests/benchmarks/test_benchmarks.py).
"""

import contextlib
import faulthandler
import io
import json
import os
import runpy
import sys
import traceback


def run(script, args):
    """(exit status, stdout, stderr) of `python script args...`, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    status = 0
    sys.argv = [script, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            if isinstance(exit_.code, int) or exit_.code is None:
                status = exit_.code or 0
            else:  # sys.exit("message"), as Python prints it
                print(exit_.code, file=sys.stderr)
                status = 1
        except Exception:  # reported; the next script runs
            traceback.print_exc()
            status = 1
    return status, out.getvalue(), err.getvalue()


def main(jobs):
    faulthandler.enable()  # a crash names the script's Python stack on stderr
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    sys.path.insert(0, os.path.abspath("benchmarks"))  # the scripts import their neighbours
    import keras
    import numpy as np

    print_options = np.get_printoptions()
    for name, script, *args in jobs:
        status, stdout, stderr = run(script, [str(a) for a in args])
        line = {"name": name, "status": status, "stdout": stdout, "stderr": stderr}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        keras.config.set_dtype_policy("float32")
        keras.utils.clear_session()
        np.set_printoptions(**print_options)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
