"""The names of `make_dataset`'s batch shapes (`shapes=`), without TensorFlow.

`tfblocks.text.dataset` maps each name to how it batches (`tfblocks.text.batching`,
`tfblocks.text.packing`); the names live here, in a module that imports nothing, so that
`tfblocks-train --help` lists them before TensorFlow is loaded.

>>> SHAPES
('dynamic', 'buckets', 'max_length', 'packed')
"""

SHAPES = ("dynamic", "buckets", "max_length", "packed")
