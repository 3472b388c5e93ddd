"""`tfblocks-export`: the model of a run folder in another inference format.

    tfblocks-export ctranslate2 --model runs/enja --output runs/enja/ctranslate2
    tfblocks-translate --model runs/enja --engine ctranslate2 < input.ja
    tfblocks-export litert --model runs/enja --output enja.tflite --quantization dynamic

`ctranslate2` converts the model of a run folder (its `model/` preset, as `tfblocks-train`
and `tfblocks-import` write it, or a preset folder itself) with its tokenizer(s) into a
CTranslate2 model directory (`tfblocks.export_ctranslate2`; `pip install
tfblocks[ctranslate2]`), which `tfblocks-translate --engine ctranslate2` and
`tfblocks.CTranslate2Translator` run. `--quantization` stores the weights in 8-bit
integers or 16-bit floats (default: float32). Written into the run folder itself
(`--output RUN/ctranslate2`), the export is then checked: the run's held-out test
translated by both engines, which `--engine auto` reads (docs/command-line.md, "Choosing
the engine"). `--output` must not exist: the folder is
written beside it and renamed into place when complete, so a refused or failed export
leaves nothing behind, and nothing already there is replaced.

`litert` writes one LiteRT (TFLite) file that translates strings to strings on a phone
or with the `ai-edge-litert` interpreter (`Translator.export_litert`; `pip install
tfblocks[litert]` to run it): beam search of `--beam-size` (default: the run's, as its
SavedModel: 4 unless its run.json records another, such as an imported model's
`num_beams`; 1: greedy), weights in float32, int8 (`--quantization dynamic`) or float16. `--output`
must not exist either. A file translates into one language: a run of several directions
(`tfblocks-train --pairs`) needs `--target-lang`, which the file records in its metadata.

Examples:
  tfblocks-export ctranslate2 --model runs/enja --output runs/enja/ctranslate2
  tfblocks-export ctranslate2 --model runs/enja --output enja-int8 --quantization int8
  tfblocks-export litert --model runs/enja --output enja.tflite --beam-size 1
  tfblocks-export litert --model runs/multi --output into-en.tflite --target-lang en
"""

import os
import sys

from tfblocks.cli.arguments import add_verbose_argument, command_parser
from tfblocks.cli.console import run_command

# `--quantization` of `ctranslate2`: CTranslate2's weight types offered on the command line
# (`export_ctranslate2` takes the others too). None: float32, as the model holds them.
QUANTIZATIONS = ("int8", "int8_float32", "float16")
# `--quantization` of `litert` (`tfblocks.serving.litert.QUANTIZATIONS`; None: float32).
LITERT_QUANTIZATIONS = ("dynamic", "float16")
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
    litert = formats.add_parser(
        "litert",
        help="one LiteRT (TFLite) file, strings in and out, for phones",
        description="Write the model of a run folder as one LiteRT file that translates "
        "strings (its SentencePiece tokenizer and beam search inside).",
    )
    litert.add_argument(
        "--model",
        required=True,
        metavar="RUN",
        help="a run folder of tfblocks-train or tfblocks-import (its model/), or a preset",
    )
    litert.add_argument(
        "--output",
        required=True,
        metavar="FILE",
        help="the .tflite file to write (must not exist)",
    )
    litert.add_argument(
        "--quantization",
        choices=LITERT_QUANTIZATIONS,
        default=None,
        help="store the weights as int8 (dynamic) or float16 (default: float32)",
    )
    litert.add_argument(
        "--beam-size",
        type=int,
        default=None,
        metavar="N",
        help="the file's beam size (default: the run's, as its SavedModel: 4 unless the run "
        "recorded another, as an imported model's num_beams; 1: greedy search)",
    )
    litert.add_argument(
        "--target-lang",
        default=None,
        metavar="LANG",
        help="the one language the file translates into, for a model of several directions "
        "(tfblocks-train --pairs; required there): recorded in the file's metadata "
        "(default: the run's one target language)",
    )
    add_verbose_argument(litert)
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


def check_output(output, kind="folder"):
    """Refuses an `--output` that exists (nothing is replaced) or names no `kind`."""
    if not output.strip():
        raise ValueError(f"--output must name a new {kind}, got --output={output!r}")
    if os.path.lexists(output):
        raise ValueError(f"--output={output!r} exists; choose a new {kind} (nothing is replaced)")


def to_ctranslate2(args):
    """`tfblocks-export ctranslate2`: returns the written directory, absolute."""
    preset = preset_folder(args.model)
    check_output(args.output)  # both before TensorFlow and CTranslate2 load
    from tfblocks.models import load_preset, load_target_tokenizer
    from tfblocks.serving.ctranslate2_export import export_ctranslate2

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
    from tfblocks.translation.run_folder import CTRANSLATE2_DIR, RUN_FILE

    run = os.path.dirname(os.path.abspath(written))
    inside = os.path.abspath(os.path.join(args.model, CTRANSLATE2_DIR)) == os.path.abspath(written)
    if inside and os.path.isfile(os.path.join(run, RUN_FILE)):  # what --engine auto reads
        from tfblocks.translation.engine_check import check_ctranslate2

        notice = lambda message: print(f"tfblocks-export: {message}", file=sys.stderr)  # noqa: E731
        check_ctranslate2(run, notice)
    return written


def to_litert(args):
    """`tfblocks-export litert`: returns the written file, absolute."""
    preset = preset_folder(args.model)
    check_output(args.output, "file")
    if args.beam_size is not None and args.beam_size < 1:
        raise ValueError(f"--beam-size must be at least 1, got --beam-size={args.beam_size}")
    from tfblocks.translation.run_folder import run_beam_size

    beam_size = run_beam_size(preset) if args.beam_size is None else args.beam_size
    from tfblocks.translation.targets import target_language

    notice = lambda message: print(f"tfblocks-export: {message}", file=sys.stderr)  # noqa: E731
    target = target_language(args.model, args.target_lang, notice)  # before the model loads
    from tfblocks.models import load_preset, load_target_tokenizer
    from tfblocks.serving import Translator

    weights = {None: "float32", "dynamic": "int8"}.get(args.quantization, args.quantization)
    print(f"exporting {preset} to LiteRT ({weights} weights)", file=sys.stderr)
    model, tokenizer, hp = load_preset(preset)
    target_tokenizer = load_target_tokenizer(preset) or tokenizer
    max_length = hp.max_length if hp is not None else 256  # as tfblocks-translate reads it
    from tfblocks.translation.run_folder import run_language_tokens

    tokens = run_language_tokens(preset)
    translator = Translator(model, tokenizer, target_tokenizer, max_length, language_tokens=tokens)
    written = translator.export_litert(
        args.output, quantization=args.quantization, beam_size=beam_size, target_lang=target
    )
    print(f"wrote {written}", file=sys.stderr)
    return written


def main(argv=None):
    args = parse_args(argv)
    if args.format == "ctranslate2":
        return to_ctranslate2(args)
    if args.format == "litert":
        return to_litert(args)
    raise ValueError(f"unknown format {args.format!r}")  # argparse's choices keep it out


def run():
    """The console entry point of `tfblocks-export`."""
    run_command("tfblocks-export", main, errors=(ImportError,))  # CTranslate2 not installed


if __name__ == "__main__":
    run()
