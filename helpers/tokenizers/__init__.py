"""Tokenizers, imported by their full paths.

- ``wordpiece``  BERT's basic tokenization and WordPiece (notebook 10)
- ``bpe``        byte-level BPE: GPT-2's pre-tokenization, naive and incremental trainers, ``BPETokenizer`` (notebook 15)
"""
