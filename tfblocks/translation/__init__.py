"""The translation application as a library, usable without argparse: the training job
(`job` and its parts), its run folder (`run_folder`), its options (`options`), evaluation
(sacrebleu is imported only here), translating in batches, the engines that load a run for
translation. The console commands that drive it are `tfblocks.cli`."""
