#!/usr/bin/env python3
"""Exact mixing of the alternating Feistel network with ideal round functions.

For a domain of m bits (low half ceil(m/2) bits, high half floor(m/2)) and
half-rounds that add a uniformly random function of one half to the other
(modulo its width), the images of a fixed k-tuple of distinct points form a
Markov chain. This script iterates that chain exactly and prints, after each
half-round, the total-variation distance between the distribution of the
image tuple and the uniform distribution over k-tuples of distinct points.
It backs the choice of kSmallDomain and kFeistelRounds (docs/design.md).

    python3 scripts/feistel_mixing.py 3,3 6,2 8,2      # m,k pairs
"""
import itertools
import math
import sys

import numpy as np


def tv_by_round(m, k, rounds):
    lo_bits = (m + 1) // 2
    hi_bits = m - lo_bits
    size = 1 << m
    shape = (size,) * k
    grid = np.indices(shape).reshape(k, -1)  # every k-tuple of points
    distinct = np.ones(grid.shape[1], bool)
    for i in range(k):
        for j in range(i):
            distinct &= grid[i] != grid[j]
    dist = np.zeros(size ** k)
    dist[np.ravel_multi_index(tuple(range(k)), shape)] = 1.0
    lo, hi = grid & ((1 << lo_bits) - 1), grid >> lo_bits
    out = []
    for r in range(rounds):
        update_hi = r % 2 == 0
        inputs = lo if update_hi else hi  # the half the round function reads
        width = hi_bits if update_hi else lo_bits
        # Number of distinct round-function inputs within each tuple.
        n_inputs = np.zeros(grid.shape[1])
        for i in range(k):
            dup = np.zeros(grid.shape[1], bool)
            for j in range(i):
                dup |= inputs[i] == inputs[j]
            n_inputs += ~dup
        new = np.zeros_like(dist)
        for values in itertools.product(range(1 << width), repeat=k):
            v = np.array(values)[:, None]
            consistent = np.ones(grid.shape[1], bool)
            for i in range(k):
                for j in range(i):
                    consistent &= (inputs[i] != inputs[j]) | (v[i] == v[j])
            weight = consistent * float(1 << width) ** (-n_inputs)
            if update_hi:
                nh, nl = (hi + v) % (1 << hi_bits), lo
            else:
                nh, nl = hi, (lo + v) % (1 << lo_bits)
            np.add.at(new, np.ravel_multi_index(tuple((nh << lo_bits) | nl), shape), dist * weight)
        dist = new
        total = math.perm(size, k)
        out.append(0.5 * np.abs(dist[distinct] - 1 / total).sum() + 0.5 * dist[~distinct].sum())
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["3,3", "4,3", "6,2", "8,2"]:
        m, k = (int(x) for x in arg.split(","))
        print(f"m={m} k={k}: " + " ".join(f"{t:.0e}" for t in tv_by_round(m, k, 16)), flush=True)
