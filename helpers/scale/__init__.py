"""Notebook 12, attention at scale: each module one tool, imported by its full path.

- ``flash``             the online softmax, FlashAttention's tiled forward and backward passes
- ``sliding``           sliding-window attention, a rolling KV cache, notebook 11's model under a window
- ``linear_attention``  linear attention: recurrent, parallel and chunked
- ``kv_cost``           KV-cache bytes for MHA, GQA, MQA and MLA, and published configurations
- ``measure``           peak memory read from PyTorch's allocator, best-of timing
"""
