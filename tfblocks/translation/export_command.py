"""`tfblocks-export`: the model of a run folder in another inference format.

    tfblocks-export ctranslate2 --model runs/enja --output runs/enja/ctranslate2
    tfblocks-translate --model runs/enja --engine ctranslate2 < input.ja

`ctranslate2` converts the model of a run folder (its `model/` preset, as `tfblocks-train`
and `tfblocks-import` write it, or a preset folder itself) with its tokenizer(s) into a
CTranslate2 model directory (`tfblocks.export_ctranslate2`; `pip install
tfblocks[ctranslate2]`), which `tfblocks-translate --engine ctranslate2` and
`tfblocks.CTranslate2Translator` run. `--quantization` stores the weights in 8-bit
integers or 16-bit floats (default: float32). `--output` must not exist: the folder is
written beside it and renamed into place when complete, so a refused or failed export
leaves nothing behind, and nothing already there is replaced.

Examples:
  tfblocks-export ctranslate2 --model runs/enja --output runs/enja/ctranslate2
  tfblocks-export ctranslate2 --model runs/enja --output enja-int8 --quantization int8
"""

import os
import sys

from tfblocks.translation.console import add_verbose_argument, command_parser, run_command

# `--quantization` of `ctranslate2`: CTranslate2's weight types offered on the command line
# (`export_ctranslate2` takes the others too). None: float32, as the model holds them.
QUANTIZATIONS = ("int8", "int8_float32", "float16")
# The positions the written timing-signal table covers at least (`export_ctranslate2`'s
# `max_positions`; more when the run's `max_length` is longer).
MIN_POSITIONS = 1024


def parser():
    """The parser of `tfblocks-export` (one subcommand a format); imports nothing heavy."""
    main_parser = command_parser("tfblocks-export", __doc__)
    formats = main_parser.add_subparsers(dest="format", required=True, metavar="FORMAT")
    ctranslate2 = formats.add_parser(
        "ctranslate2",
        help="a CTranslate2 model directory (tfblocks-translate --engine ctranslate2)",
        description="Write the model of a run folder as a CTranslate2 model directory.",
    )
    ctranslate2.add_argument(
        "--model",
        required=True,
        metavar="RUN",
        help="a run folder of tfblocks-train or tfblocks-import (its model/), or a preset",
    )
    ctranslate2.add_argument(
        "--output",
        required=True,
        metavar="DIR",
        help="the CTranslate2 model directory to write (must not exist; its folder is made)",
    )
    ctranslate2.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="store the weights as int8 (int8_float32: the other parts in float32) or "
        "float16 (default: float32)",
    )
    add_verbose_argument(ctranslate2)
    return main_parser


def parse_args(argv=None):
    args = parser().parse_args(argv)
    args.model = os.path.expanduser(args.model)
    args.output = os.path.expanduser(args.output)
    return args


def preset_folder(run):
    """The preset folder of `run`: `run/model` (a run folder) or `run` itself (a preset);
    a ValueError naming `--model` for anything else (a SavedModel cannot be converted)."""
    for folder in (os.path.join(run, "model"), run):
        if os.path.isfile(os.path.join(folder, "config.json")):
            return folder
    raise ValueError(
        f"--model={run!r} is not a run folder: expected {os.path.join(run, 'model')} (the "
        "model/ preset of tfblocks-train or tfblocks-import) with its config.json"
    )


def check_output(output):
    """Refuses an `--output` that exists (nothing is replaced) or names no folder."""
    if not output.strip():
        raise ValueError(f"--output must name a new folder, got --output={output!r}")
    if os.path.lexists(output):
        raise ValueError(f"--output={output!r} exists; choose a new folder (nothing is replaced)")


def to_ctranslate2(args):
    """`tfblocks-export ctranslate2`: returns the written directory, absolute."""
    preset = preset_folder(args.model)
    check_output(args.output)  # both before TensorFlow and CTranslate2 load
    from tfblocks.models import load_preset, load_target_tokenizer
    from tfblocks.serving.ctranslate2 import export_ctranslate2

    weights = args.quantization or "float32"
    print(f"exporting {preset} to CTranslate2 ({weights} weights)", file=sys.stderr)
    model, tokenizer, hp = load_preset(preset)
    positions = max(MIN_POSITIONS, hp.max_length) if hp is not None else MIN_POSITIONS
    written = export_ctranslate2(
        model, tokenizer, args.output, quantization=args.quantization,
        target_tokenizer=load_target_tokenizer(preset), max_positions=positions,
    )  # fmt: skip
    print(
        f"wrote {written}: tfblocks-translate --model {written} --engine ctranslate2",
        file=sys.stderr,
    )
    return written


def main(argv=None):
    args = parse_args(argv)
    if args.format == "ctranslate2":
        return to_ctranslate2(args)
    raise ValueError(f"unknown format {args.format!r}")  # argparse's choices keep it out


def run():
    """The console entry point of `tfblocks-export`."""
    run_command("tfblocks-export", main, errors=(ImportError,))  # CTranslate2 not installed


if __name__ == "__main__":
    run()
