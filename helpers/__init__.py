"""Shared helper package of *Attention and Transformers from Scratch*.

Every notebook starts with ``helpers.setup()``; later notebooks import what earlier notebooks built
(``from helpers.attention import MultiHeadAttention``). The layout follows the course, lowest layer first; a module
imports only from its own layer or the ones above it in this list (``tests/test_layout.py``):

- ``helpers.runtime``     what every notebook needs at run time: ``setup()`` and the paths (``session``), the claims
                          the prose makes (``claims``), smoke runs (``smoke``), the plot style (``style``)
- ``helpers.attention``   the foundations, notebooks 01-04: softmax, scaled dot-product attention, masks, multi-head attention
- ``helpers.blocks``      05-06: positional encodings, layer norm, feed-forward, encoder and decoder blocks
- ``helpers.training``    07 on: one training loop and evaluation
- ``helpers.data``        data sets, generated or shipped, checked on load
- ``helpers.models``      full models: classifier (07), Vision Transformer (08), translator (09), MiniLM (10),
                          language model (11), induction heads (13)
- ``helpers.tokenizers``  tokenizers: WordPiece (10), byte-level BPE (15)
- ``helpers.scale``       notebook 12: online softmax and FlashAttention, sliding windows, linear attention, the KV
                          cache's cost, memory and time measurements
- ``helpers.handwritten`` notebook 14: transformer weights written by hand (``program``) and their evaluation (``evaluate``)
- ``helpers.chat``        notebook 16: a real chat model read from its GGUF file
- ``helpers.plots``       figures
- ``helpers.checks``      the exercise checks
- ``helpers.grading``     nbgrader for instructors
- ``helpers.authoring``   for the course's authors: student notebooks (``student``), re-execution (``execute``), the
                          website (``website``)
"""

from __future__ import annotations

from helpers.runtime.session import DATA_DIR, ROOT, SEED, setup

__all__ = ["setup", "ROOT", "DATA_DIR", "SEED"]
