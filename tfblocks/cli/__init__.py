"""The console scripts, thin over the library: `tfblocks-train`, `tfblocks-translate`,
`tfblocks-evaluate` (installed with the package; each module also runs with
`python -m tfblocks.cli.NAME`)."""
