"""`tfblocks`: the package's version (`--version`) and its commands, one line each.

Examples:
  tfblocks --version
  tfblocks
"""

import importlib.util
import sys

from tfblocks._version import __version__
from tfblocks.cli.arguments import add_verbose_argument, command_parser

# The commands, in the order of a run's life: `tfblocks-NAME` is `tfblocks.cli.MODULE`.
COMMANDS = {
    "train": "train",
    "translate": "translate",
    "evaluate": "evaluate",
    "import": "import_",
    "export": "export",
}


def summary(module):
    """The first line of the command module's docstring, without its `tfblocks-x`: name.

    >>> summary("train")
    'train a translator in a run folder, evaluate it, export it, reload it.'
    """
    spec = importlib.util.find_spec(f"tfblocks.cli.{module}")
    with open(spec.origin, encoding="utf-8") as source:  # not imported: no TensorFlow
        first = source.read().split('"""', 2)[1].splitlines()[0]
    return first.split(": ", 1)[1]


def main(argv=None):
    parser = command_parser("tfblocks", __doc__)
    parser.add_argument("--version", action="version", version=f"tfblocks {__version__}")
    add_verbose_argument(parser)
    parser.parse_args(argv)
    print(f"tfblocks {__version__}: Transformer layers, training and translation.")
    for name, module in COMMANDS.items():
        print(f"  tfblocks-{name:<10} {summary(module)}")
    print("Each command's --help says what it takes.")


def run():
    """The console entry point of `tfblocks`."""
    sys.exit(main())


if __name__ == "__main__":
    run()
