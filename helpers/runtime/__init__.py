"""What every notebook needs at run time, below everything else in ``helpers``.

- ``session``  the repository's paths, the seed and ``setup()`` (re-exported as ``helpers.setup``)
- ``claims``   the claims the prose makes, checked where they are made
- ``smoke``    smoke runs: every cell executed, every training run cut to a few steps
- ``style``    the course's plot style
"""
