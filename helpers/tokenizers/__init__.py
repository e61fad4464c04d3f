"""Tokenizers, imported by their full paths.

- ``wordpiece``  BERT's basic tokenization and WordPiece (notebook 10)
"""
