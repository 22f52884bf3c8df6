#!/usr/bin/env python3
"""Where the profiler window's cost lands, from a profiler_overhead JSON-lines file.

    python3 benchmarks/profiler_overhead/per_step.py results/.../profiler_overhead.jsonl [--steps 40]

Prints, per arm: each repetition's epoch time, median step and excess over it (epoch - steps * median);
then the median over repetitions of every one of the first --steps step times, arm by arm, so the steps
that cost more stand out (with the default window: 5 warm-up steps, steps 5-14 unsynchronised, 15-24
synchronised, the last traced ones 23-24, read-out after 24); then, per arm and repetition, the time its
first head steps add over off's, each measured against its own epoch's median step (drift of the whole
epoch's rate cancels), and that as a share of off's median epoch.
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--steps", type=int, default=40, help="how many of the first steps to print")
    a = ap.parse_args()
    arms = {}
    for line in open(a.jsonl):
        r = json.loads(line)
        if "arm" in r:
            arms.setdefault(r["arm"], []).append(r)
    if "off" not in arms:
        raise SystemExit(f"{a.jsonl}: no 'off' arm (is this profiler_overhead output?)")
    off = arms["off"]
    fmt = lambda xs, d: " ".join(f"{x:.{d}f}" for x in xs)
    for name, rs in arms.items():
        print(f"{name:11} epoch s {fmt([r['epoch_s'] for r in rs], 2)} | median step ms {fmt([r['median_ms'] for r in rs], 2)}"
              f" | excess s {fmt([r['excess_s'] for r in rs], 3)}")
    head = min(len(r["head_ms"]) for rs in arms.values() for r in rs)
    print("\nstep " + "".join(f"{n:>11}" for n in arms))
    for i in range(min(a.steps, head)):
        print(f"{i:4} " + "".join(f"{statistics.median(r['head_ms'][i] for r in rs):11.2f}" for rs in arms.values()))
    off_epoch = statistics.median(r["epoch_s"] for r in off)
    print(f"\nadded over off in steps 1-{head - 1}, against each epoch's own median step (off's epoch {off_epoch:.2f} s):")
    for name, rs in arms.items():
        if name == "off":
            continue
        added = [sum((r["head_ms"][i] - r["median_ms"]) - (o["head_ms"][i] - o["median_ms"]) for i in range(1, head))
                 for r, o in zip(rs, off)]
        med = statistics.median(added)
        print(f"  {name:11} ms per repetition {fmt(added, 0)} | median {med:.0f} ms = {100 * med / 1e3 / off_epoch:.2f}% of the epoch")


if __name__ == "__main__":
    main()
