#!/usr/bin/env python3
"""Paired comparison of two arms over seeds, from lane_arm's result lines (issue 41: instant vs mode B).

    python3 benchmarks/fidelity/pairs.py DIR [A_TAG B_TAG] [--set shapes]

Reads the `seed S NAME ours rc=0 ... mAP50-95 X` lines of the files <set>_*_ours.txt below DIR (lane_arm's files),
pairs arm A (default: no tag, e.g. yolo9t) with arm B (default: _b, e.g. yolo9t_b) by seed, and prints each seed's
pair, the mean difference B - A, its standard error, a 95 % t interval, and how many pairs would resolve a difference
of 0.01 and 0.02 at two standard errors given the observed spread. Only the standard library (no scipy here).
"""
import argparse
import math
import re
import statistics as st
import sys
from pathlib import Path

# Two-sided 95 % t quantiles for 1..30 degrees of freedom (then the normal's 1.96).
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
LINE = re.compile(r"^seed (\d+) (\S+) ours rc=(\d+) .*mAP50-95 ([0-9.eE+-]+)\s*$")


def read(directory: Path, set_name: str):
    """{name: {seed: mAP50-95}} from the lane files of one set (a failed run, rc != 0, is reported and left out)."""
    runs = {}
    for f in sorted(directory.rglob(f"{set_name}_*_ours.txt")):
        for line in f.read_text(errors="replace").splitlines():
            m = LINE.match(line)
            if not m:
                continue
            seed, name, rc, v = int(m[1]), m[2], int(m[3]), float(m[4])
            if rc != 0:
                print(f"left out: {f.name}: rc={rc}", file=sys.stderr)
                continue
            runs.setdefault(name, {})[seed] = v
    return runs


def main(argv):
    ap = argparse.ArgumentParser(description="paired seeds of two arms: mean difference and its interval")
    ap.add_argument("directory", type=Path, help="a folder holding lane_arm's <set>_*_ours.txt files")
    ap.add_argument("tags", nargs="*", default=["", "_b"], metavar="TAG", help="arm A's and arm B's run-name tags")
    ap.add_argument("--set", dest="set_name", default="shapes", help="the data set's style (shapes, scenes)")
    opts = ap.parse_args(argv)
    if len(opts.tags) != 2:
        ap.error("give both tags (A_TAG B_TAG; '' for none) or neither")
    directory, set_name, (a_tag, b_tag) = opts.directory, opts.set_name, opts.tags
    runs = read(directory, set_name)
    models = sorted({n[: -len(b_tag)] for n in runs if b_tag and n.endswith(b_tag)})
    if not models:
        sys.exit(f"{directory}: no {set_name} runs named <model>{b_tag}")
    for model in models:
        a, b = runs.get(model + a_tag, {}), runs.get(model + b_tag, {})
        seeds = sorted(set(a) & set(b))
        unpaired = sorted(set(a) ^ set(b))
        print(f"{model}: {model + a_tag} (A) vs {model + b_tag} (B), {set_name} set, {len(seeds)} paired seeds"
              + (f"; unpaired seeds left out: {unpaired}" if unpaired else ""))
        for s in seeds:
            print(f"  seed {s}: A {a[s]:.4f}  B {b[s]:.4f}  B-A {b[s] - a[s]:+.4f}")
        if len(seeds) < 2:
            print("  fewer than two pairs: no spread to judge by")
            continue
        d = [b[s] - a[s] for s in seeds]
        n, mean, sd = len(d), st.mean(d), st.stdev(d)
        se = sd / math.sqrt(n)
        t = T95[n - 2] if n - 1 <= len(T95) else 1.96
        print(f"  mean A {st.mean(a[s] for s in seeds):.4f}, mean B {st.mean(b[s] for s in seeds):.4f}")
        print(f"  B-A mean {mean:+.4f}, sd {sd:.4f}, se {se:.4f}, 95 % interval [{mean - t * se:+.4f}, {mean + t * se:+.4f}]"
              f" ({'excludes' if abs(mean) > t * se else 'includes'} 0)")
        for delta in (0.01, 0.02):
            print(f"  pairs to resolve {delta} at two standard errors: {math.ceil((2 * sd / delta) ** 2)}")


if __name__ == "__main__":
    main(sys.argv[1:])
