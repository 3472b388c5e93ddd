"""Run folders made in seconds for the command tests: no training."""

import dataclasses
import json
import os

MARIAN = os.path.join(os.path.dirname(__file__), os.pardir, "data", "marian", "shared")


def marian_run(folder, max_length=12, **settings):
    """A run folder at `folder` of the tiny Marian fixture (en->de, beam 2 unless
    `settings` say otherwise, `max_length` subwords at most): its preset and run.json, no
    SavedModel. Returns `folder`."""
    from tfblocks.models import save_preset
    from tfblocks.models.marian import import_marian

    model, source, target, hp, _ = import_marian(MARIAN)[:5]
    save_preset(model, source, folder / "model", dataclasses.replace(hp, max_length=max_length),
                target)  # fmt: skip
    settings = {"source_lang": "en", "target_lang": "de", "beam_size": 2, **settings}
    (folder / "run.json").write_text(json.dumps({"format": 1, "settings": settings}))
    return folder
