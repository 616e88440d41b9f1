#!/usr/bin/env python3
"""bench/aging-walk.py N C [SEED]: the commit indices (0..N-1) of C checkouts
of a history of N commits for bench/aging.sh, one a line: a walk of steps
of one commit back or forward, kept within 2 commits of the even spread
i * (N - 1) / C (forward with some back-and-forth, as a developer moving
between neighbouring versions would), random (seeded, so every filesystem
and every run gets the same walk) where it is free, never the same commit
twice in a row, ending on the last commit."""
import random
import sys

n, c = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 50)
p = 0
out = []
for i in range(1, c + 1):
    ideal = i * (n - 1) / c
    left = c - i  # checkouts after this one
    if n - 1 - p > left:   # must run to reach the end in time
        p += 1
    elif p < ideal - 2:
        p += 1
    elif p > ideal + 2:
        p -= 1
    else:
        p += rng.choice((1, -1))
    p = max(0, min(n - 1, p))
    if out and p == out[-1]:
        p = p - 1 if p > 0 else p + 1
    out.append(p)
if out[-1] != n - 1:
    out[-1] = n - 1
print("\n".join(map(str, out)))
