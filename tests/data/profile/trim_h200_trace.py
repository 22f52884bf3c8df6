#!/usr/bin/env python3
"""Turns a real training-run trace recorded on the H200 into a small test fixture, and works out the
figures the C++ analysis must reproduce from it, independently of the C++ code.

Input: a run directory's profile_trace.json (or .json.gz; Chrome Trace format written by libreyolo) and
its profile.json. Output: <name>_record.json (a libreyolo.profile.record/v1 WindowRecord holding the
kept steps) and <name>_expected.json (figures computed here).

Trimming: keeps the last --unsynced N unsynchronised and the last --synced N synchronised steps of the
first accumulation cycle of each half (so each kept run ends with the step that ran the optimizer), their
phases, the GPU events launched inside them, and the CUDA runtime calls that carry a kept GPU event's
correlation id or are launches. CPU operator events are dropped and kernel names are cut to --name-chars
characters (size), so operator tables and the Tensor-Core share are not part of the fixture.

  python3 trim_h200_trace.py RUN_DIR NAME [--unsynced 4 --synced 4]
"""
import argparse, gzip, json, os

from interval_union import interval_union

ap = argparse.ArgumentParser()
ap.add_argument("run_dir"); ap.add_argument("name")
ap.add_argument("--unsynced", type=int, default=2); ap.add_argument("--synced", type=int, default=2)
ap.add_argument("--name-chars", type=int, default=80)
args = ap.parse_args()

path = os.path.join(args.run_dir, "profile_trace.json")
opener = open if os.path.exists(path) else gzip.open
trace = json.load(opener(path if os.path.exists(path) else path + ".gz", "rt"))
prof = json.load(open(os.path.join(args.run_dir, "profile.json")))
ev = trace["traceEvents"]
ns = lambda us: int(round(us * 1000))
X = [e for e in ev if e.get("ph") == "X"]
steps = sorted([e for e in X if e["cat"] == "step"], key=lambda e: e["ts"])
phases = [e for e in X if e["cat"] == "phase"]
acc = int(prof["config"].get("accumulate", 1))

uns = [i for i, s in enumerate(steps) if not s["args"]["synced"]][:acc][-args.unsynced:]
syn = [i for i, s in enumerate(steps) if s["args"]["synced"]][:acc][-args.synced:]
keep = uns + syn
new_index = {old: new for new, old in enumerate(keep)}

rec = {"schema": "libreyolo.profile.record/v1", "warmup": prof["window"]["warmup"],
       "peak_vram_bytes": int(prof["peak_vram_mb"] * 1048576), "device_mallocs": 0, "trace_collected": True,
       "meta": prof["config"], "steps": [], "phases": [], "gpu": [], "runtime": [], "cpu_ops": []}
for i in keep:
    s = steps[i]
    rec["steps"].append({"start_ns": ns(s["ts"]), "end_ns": ns(s["ts"]) + ns(s["dur"]),
                         "synced": s["args"]["synced"], "images": s["args"]["images"]})
for p in sorted(phases, key=lambda e: e["ts"]):
    if p["args"]["step"] in new_index:
        rec["phases"].append({"step": new_index[p["args"]["step"]], "phase": p["name"], "start_ns": ns(p["ts"]),
                              "end_ns": ns(p["ts"]) + ns(p["dur"]), "synced": p["args"]["synced"]})

def in_kept_step(t):
    return any(s["start_ns"] <= t <= s["end_ns"] for s in rec["steps"])

runtime = [e for e in X if e["cat"] == "cuda_runtime"]
launch_at = {e["args"]["correlation"]: ns(e["ts"]) for e in runtime}
gpu = [e for e in X if e["cat"] in ("kernel", "memory")]
kept_corr = set()
for g in gpu:
    t = launch_at.get(g["args"]["correlation"])
    if t is not None and in_kept_step(t):
        kept_corr.add(g["args"]["correlation"])
        rec["gpu"].append({"kind": g["args"]["kind"], "name": g["name"][: args.name_chars], "stream": g["tid"], "start_ns": ns(g["ts"]),
                           "dur_ns": ns(g["dur"]), "correlation": g["args"]["correlation"]})
for r in runtime:
    t = ns(r["ts"])
    if in_kept_step(t) and (r["args"]["correlation"] in kept_corr or "launch" in r["name"].lower()):
        rec["runtime"].append({"name": r["name"], "start_ns": t, "dur_ns": ns(r["dur"]),
                               "correlation": r["args"]["correlation"], "thread": 0})

# ---- expected figures, computed here from the trimmed record ----
S = rec["steps"]; n = len(S)
real = [s for s in S if not s["synced"]]
dataload = {}
for p in rec["phases"]:
    if p["phase"] == "dataload":
        dataload[p["step"]] = dataload.get(p["step"], 0) + p["end_ns"] - p["start_ns"]
step_ms = sum(s["end_ns"] - s["start_ns"] for s in real) / len(real) / 1e6
dl_ms = sum(dataload.get(i, 0) for i, s in enumerate(S) if not s["synced"]) / len(real) / 1e6
kern = [g for g in rec["gpu"] if g["kind"] == "kernel"]
busy = interval_union((g["start_ns"], g["start_ns"] + g["dur_ns"]) for g in kern)
busy_ms = busy / n / 1e6
# phase of each GPU event = the phase span containing its launch call's start
spans = sorted((p["start_ns"], p["end_ns"], p["phase"]) for p in rec["phases"])
def phase_at(t):
    for a, b, ph in spans:
        if a <= t <= b: return ph
    return "outside"
launch = {r["correlation"]: r["start_ns"] for r in rec["runtime"]}
phase_gpu = {}
phase_kernels = {}
for g in rec["gpu"]:
    ph = phase_at(launch[g["correlation"]])
    phase_gpu[ph] = phase_gpu.get(ph, 0) + g["dur_ns"] / n / 1e6
    if g["kind"] == "kernel": phase_kernels[ph] = phase_kernels.get(ph, 0) + 1 / n
launches = sum(1 for r in rec["runtime"] if "launch" in r["name"].lower()) / n
util_raw = busy_ms / step_ms
host = max(0.0, step_ms - busy_ms - dl_ms)
verdict = ("dataloader" if dl_ms / step_ms >= 0.2 else "compute" if util_raw >= 0.8 else "host/launch")
expected = {"steps": n, "real_steps": len(real), "synced_steps": n - len(real), "step_ms": step_ms,
            "dataload_ms": dl_ms, "gpu_busy_ms_per_step": busy_ms, "kernels_per_step": len(kern) / n,
            "kernel_sum_ms_per_step": sum(g["dur_ns"] for g in kern) / n / 1e6, "gpu_util_raw": util_raw,
            "host_overhead_ms_per_step": host, "launches_per_step": launches, "phase_gpu_ms": phase_gpu,
            "phase_kernels": phase_kernels, "bound": verdict,
            "source": {"run": os.path.basename(os.path.normpath(args.run_dir)), "full_window_bound": prof["bound"],
                       "full_window_step_ms": prof["step_ms"], "full_window_kernels_per_step": prof["kernels_per_step"],
                       "full_window_gpu_busy_ms_per_step": prof["gpu_busy_ms_per_step"]}}
out = os.path.dirname(os.path.abspath(__file__))
json.dump(rec, open(os.path.join(out, args.name + "_record.json"), "w"), separators=(",", ":"))
json.dump(expected, open(os.path.join(out, args.name + "_expected.json"), "w"), indent=1)
print(json.dumps({k: v for k, v in expected.items() if k not in ("phase_gpu_ms", "phase_kernels")}, indent=1))
