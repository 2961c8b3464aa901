"""The character vocabulary the built-in text models are made for (torch-free).

One fixed vocabulary for every corpus, so weights pre-trained on one text transfer to
another: index 0 is "\\n", indices 1..95 are printable ASCII 32..126, index 96 is
<unk> (shown as U+FFFD) for any other character. It lives with the models, whose
output layer it sizes; data/text.py maps corpora onto it.
"""

UNK = "\ufffd"
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127)) + UNK
VOCAB_SIZE = len(VOCAB)  # 97
UNK_ID = VOCAB_SIZE - 1
