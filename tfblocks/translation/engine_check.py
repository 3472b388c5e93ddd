"""The check that lets `--engine auto` choose a run's CTranslate2 export
(`engine_choice`): the run's held-out test translated by both engines, line by line."""

import itertools
import os

from tfblocks._files import write_json
from tfblocks.translation.engine_choice import (
    CHECK_FILE,
    CHECK_FORMAT,
    CHECK_LINES,
    decoding_name,
    final_digest,
)
from tfblocks.translation.run_folder import (
    CTRANSLATE2_DIR,
    HELDOUT_DIR,
    run_beam_size,
    run_language_tokens,
    run_languages,
    run_pairs,
)


def check_ctranslate2(run, notice, batch_size=64):
    """Translates the first `CHECK_LINES` lines of the run folder `run`'s held-out test
    with TensorFlow and with its CTranslate2 export (`run/ctranslate2/`), with the run's
    beam and with greedy search, and writes how many came out the same to
    `run/ctranslate2/CHECK_FILE` (what `--engine auto` reads); returns that record.

    A run without what the check needs (its `metrics.json` digest and one direction's
    held-out test: a `tfblocks-import` has none, nor has a run of several directions or
    language tokens) gets no record, said by `notice(message)`, and returns None.
    """
    from tfblocks.translation import engines
    from tfblocks.translation.in_batches import translate_in_batches
    from tfblocks.translation.progress import count_progress
    from tfblocks.translation.searches import ALPHA

    digest, languages = final_digest(run), run_languages(run)
    test = None if languages is None else os.path.join(run, HELDOUT_DIR, f"test.{languages[0]}")
    if run_pairs(run) or run_language_tokens(run):
        why = "a run of several directions or language tokens stays on TensorFlow"
    elif digest is None or test is None or not os.path.isfile(test):
        why = "the run has no held-out test and metrics.json of tfblocks-train"
    else:
        why = None
    if why is not None:
        notice(f"no check against TensorFlow ({why}): --engine auto keeps TensorFlow")
        return None
    with open(test, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in itertools.islice(f, CHECK_LINES)]
    if not lines:
        notice(f"no check against TensorFlow ({test} is empty): --engine auto keeps TensorFlow")
        return None
    export = os.path.join(run, CTRANSLATE2_DIR)
    beams = sorted({run_beam_size(run), 1}, reverse=True)
    decodings, loaded = {}, {}
    for beam in beams:
        outputs = []
        for engine in ("tensorflow", "ctranslate2"):
            notice(f"checking: {len(lines)} test lines, {decoding_name(beam)}, {engine}")
            translate, _ = engines.load_translate(
                run, beam, engine=engine, notice=notice, loaded=loaded, xla="auto",
                lines=len(lines),
            )  # fmt: skip
            progress = count_progress("lines")
            outputs.append(translate_in_batches(translate, lines, batch_size, progress))
        same = sum(a == b for a, b in zip(*outputs, strict=True))
        decodings[decoding_name(beam)] = {"same": same}
        notice(f"{decoding_name(beam)}: {same} of {len(lines)} lines the same")
    record = {
        "format": CHECK_FORMAT, "final_digest": digest,
        "test": os.path.relpath(test, run), "lines": len(lines), "alpha": ALPHA,
        "decodings": decodings, "versions": _versions(),
    }  # fmt: skip
    write_json(os.path.join(export, CHECK_FILE), record)
    return record


def _versions():
    import ctranslate2
    import tensorflow as tf

    return {"tensorflow": tf.__version__, "ctranslate2": ctranslate2.__version__}
