"""The special token ids, fixed project-wide (one home; imports nothing).

The tokenizers of `tfblocks.text` reserve them, the models read padding as `PAD_ID`
and start decoding from `BOS_ID`, the losses and metrics skip `PAD_ID`, and the
searches of `tfblocks.decoding` stop at `EOS_ID`. SentencePiece models trained by
`tfblocks.text.train_tokenizer` use exactly these ids (`<pad>`, `</s>`, `<unk>`, `<s>`).

Example:

>>> from tfblocks.ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
>>> (PAD_ID, EOS_ID, UNK_ID, BOS_ID)
(0, 1, 2, 3)
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
BOS_ID = 3
