"""Notebook 14, a transformer whose weights are written by hand.

- ``program``   the residual stream's layout and the programs (reverse, histogram, sort) as weights
- ``evaluate``  a program scored on its whole domain, rounding bounds, robustness sweeps
"""
