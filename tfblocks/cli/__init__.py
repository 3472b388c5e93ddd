"""The console commands: each module is one command's parser and the turn from its
arguments into the options of the library (`tfblocks.translation`), nothing else.

`tfblocks-train` (`train`), `tfblocks-translate` (`translate`), `tfblocks-evaluate`
(`evaluate`), `tfblocks-import` (`import_`) and `tfblocks-export` (`export`); `tfblocks`
(`overview`) lists them and prints the version. Each also runs as
`python -m tfblocks.cli.NAME`. The arguments several commands share are in `arguments`,
what a console program does around its work (one-line errors, reading input lines) in
`console`, the corpus flags of `tfblocks-train` in `corpus`. Nothing in tfblocks imports
this package: it is the top stage, used by the entry points only.
"""
