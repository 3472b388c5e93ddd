"""`--engine auto`: a run folder translates with its CTranslate2 export when that export was
checked to translate the run's held-out test as TensorFlow does, with TensorFlow otherwise.

`tfblocks-export ctranslate2 --model RUN --output RUN/ctranslate2` translates the first
`CHECK_LINES` lines of the run's held-out test (`RUN/heldout/test.SRC`) with both engines,
with the run's beam and with greedy search, and records in `RUN/ctranslate2/CHECK_FILE`
how many lines came out the same (`engine_check.check_ctranslate2`). `choose_engine` then
picks CTranslate2 for a plain translation (no option only TensorFlow has) whose decoding
was checked and gave every line the same, and TensorFlow for anything else, with the
reason in one phrase that the commands print in their first line.

CTranslate2's beam search normalizes lengths its own way and stops when `beam_size`
hypotheses have finished (`tfblocks.serving.ctranslate2`), so a beam of several often
differs from TensorFlow's in a few lines and stays on TensorFlow; greedy search gives the
same ids. Reads only small JSON files: no TensorFlow, no CTranslate2 import.
"""

import importlib.util
import json
import os

CHECK_FILE = "tfblocks-check.json"  # in RUN/ctranslate2/, written by `engine_check`
CHECK_LINES = 500  # the held-out test lines the check translates (at most)
CHECK_FORMAT = 1
ENGINES = ("auto", "tensorflow", "ctranslate2")
_CTRANSLATE2_DIR = "ctranslate2"  # run_folder.CTRANSLATE2_DIR (which imports NumPy, Keras)


def decoding_name(beam_size):
    """The name of a decoding in the check's record: "greedy" or "beam N"."""
    return "greedy" if beam_size == 1 else f"beam {beam_size}"


def choose_engine(path, beam_size, default_alpha, alpha=None, tensorflow_only=()):
    """`(engine, reason)`: "ctranslate2" or "tensorflow" for `--engine auto`, and why, in
    a phrase ("ctranslate2: greedy translated the 500 held-out test lines as TensorFlow
    does").

    Args:
        path: `--model`: a path, or a list of them (several: an ensemble, TensorFlow's).
        beam_size: the beam the translation decodes with (the run's when none is given).
        default_alpha: the length penalty the check decoded with (`searches.ALPHA`).
        alpha: `--alpha` (None: the default).
        tensorflow_only: the flags given that only TensorFlow does here (`--constraints`,
            `--n-best`, ...): any of them keeps the translation on TensorFlow.
    """
    paths = [path] if isinstance(path, str | os.PathLike) else list(path)
    if len(paths) > 1:
        return "tensorflow", "tensorflow: an ensemble of several --model"
    path = os.fspath(paths[0])
    if os.path.isfile(os.path.join(path, "model.bin")):  # a CTranslate2 model itself
        return "ctranslate2", "ctranslate2: --model is a CTranslate2 model"
    if tensorflow_only:
        return "tensorflow", f"tensorflow: {', '.join(tensorflow_only)} (TensorFlow's only)"
    export = os.path.join(path, _CTRANSLATE2_DIR)
    if not os.path.isfile(os.path.join(export, "model.bin")):
        return "tensorflow", "tensorflow: the run has no ctranslate2/ export"
    if importlib.util.find_spec("ctranslate2") is None:
        return "tensorflow", "tensorflow: ctranslate2 is not installed"
    record = read_check(export)
    if record is None:
        return "tensorflow", (
            "tensorflow: ctranslate2/ has no check against TensorFlow (tfblocks-export "
            "ctranslate2 --output RUN/ctranslate2 makes one from the run's held-out test)"
        )
    digest = final_digest(path)
    if digest is None or record.get("final_digest") != digest:
        return "tensorflow", (
            "tensorflow: ctranslate2/ was made from an earlier model of the run; export it again"
        )
    decoding = decoding_name(beam_size)
    checked = record["decodings"].get(decoding)
    if checked is None or (beam_size > 1 and alpha not in (None, default_alpha)):
        given = decoding if alpha is None or beam_size == 1 else f"{decoding}, alpha {alpha}"
        return "tensorflow", f"tensorflow: {given} was not checked against CTranslate2"
    lines, same = record["lines"], checked["same"]
    if same != lines:
        return "tensorflow", (
            f"tensorflow: with {decoding}, CTranslate2 translated {lines - same} of the "
            f"{lines} checked test lines otherwise"
        )
    return "ctranslate2", (
        f"ctranslate2: {decoding} translated the {lines} checked test lines as TensorFlow does"
    )


def read_check(export):
    """The check's record in the CTranslate2 folder `export`, or None (none, or not one
    tfblocks wrote)."""
    try:
        with open(os.path.join(export, CHECK_FILE), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != CHECK_FORMAT:
        return None
    decodings, lines = record.get("decodings"), record.get("lines")
    if not isinstance(decodings, dict) or not isinstance(lines, int) or lines < 1:
        return None
    for value in decodings.values():
        if not isinstance(value, dict) or not isinstance(value.get("same"), int):
            return None
    return record


def final_digest(run):
    """The run's `metrics.json` `final_digest` (of its final weights, HParams, search and
    test split), or None."""
    try:
        with open(os.path.join(run, "metrics.json"), encoding="utf-8") as f:
            metrics = json.load(f)
    except (OSError, ValueError):
        return None
    return metrics.get("final_digest") if isinstance(metrics, dict) else None
