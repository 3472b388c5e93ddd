"""The special token ids and the feature names of packed rows, fixed project-wide (one
home; imports nothing).

The tokenizers of `tfblocks.text` reserve them, the models read padding as `PAD_ID`
and start decoding from `BOS_ID`, the losses and metrics skip `PAD_ID`, and the
searches of `tfblocks.decoding` stop at `EOS_ID`. SentencePiece models trained by
`tfblocks.text.train_tokenizer` use exactly these ids (`<pad>`, `</s>`, `<unk>`, `<s>`).

Example:

>>> from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
>>> (PAD_ID, EOS_ID, UNK_ID, BOS_ID)
(0, 1, 2, 3)

Packed rows (several pairs in one row: `tfblocks.text.make_dataset(shapes="packed")`, read by
`tfblocks.Transformer`) carry, beside the ids, t2t's features naming each position's pair
(`*_segmentation`: 1, 2, … within a row, 0 = padding) and its position within the pair
(`*_position`, from 0).
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
BOS_ID = 3

PACKED_SOURCE_FEATURES = ("inputs_segmentation", "inputs_position")
PACKED_TARGET_FEATURES = ("targets_segmentation", "targets_position")
PACKED_LM_FEATURES = ("ids_segmentation", "ids_position")  # a language model's `ids`
