"""The translation application: the training job (`job`), its run folder (`run_folder`),
evaluation (sacrebleu is imported only here), translating in batches, the engines, and
the console scripts `tfblocks-train`, `tfblocks-translate`, `tfblocks-evaluate`,
`tfblocks-import` and `tfblocks-export` (`*_command.py`; each also runs as
`python -m tfblocks.translation.NAME_command`)."""
