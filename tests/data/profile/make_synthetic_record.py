#!/usr/bin/env python3
"""Writes synthetic_record.json (a realistic profiler window: 20 steps of a YOLO-like training step
on two CUDA streams) and synthetic_expected.json (the figures SPEC 2.1 defines, computed here
independently of the C++ analysis). Deterministic: re-running gives the same files.

GPU work is queued behind the host: a kernel starts when its launch has happened and its stream is
free, so in unsynchronised steps forward kernels still run while the host is in backward -- the case
where attributing by kernel start time goes wrong and attribution by correlation id does not."""
import json, math, random, os

from interval_union import interval_union

random.seed(7)
BASE = 1_700_000_000_000_000_000  # Unix-epoch ns, like Kineto's clock
US = 1000
MS = 1000_000

# (raw name, category, tensor core) -- categories assigned by hand, the C++ classifier must agree
K = {
 "gemm":  ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm/conv", True),
 "conv":  ("void cudnn::engines_precompiled::conv2d_grouped_direct_kernel<float, float, float, float, float, true, false, 0, 0, 0>(cudnn::engines_precompiled::ConvParams, float const*, float const*, float*, float, float, float const*, float const*, float const*, cudnn::reduced_divisor, int)", "gemm/conv", False),
 "wgrad": ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_nn_align8>(cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_nn_align8::Params)", "gemm/conv", True),
 "silu":  ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::Half)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::Half)#1}, at::detail::Array<char*, 2>)", "elementwise", False),
 "add":   ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "elementwise", False),
 "bn":    ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, c10::Half, float, float, int>(at::GenericPackedTensorAccessor<c10::Half const, 3ul, at::RestrictPtrTraits, int>, float, float, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>)", "reduction/norm", False),
 "reduce":("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)", "reduction/norm", False),
 "nhwc":  ("void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, true, (cudnn::dnn_ops::TensorFormat_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __half const*, __half*)", "layout/copy", False),
 "copy":  ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#10}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)", "layout/copy", False),
 "foreach": ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3>, double, double, double, bool, bool, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::FusedSgdMathFunctor<float, 3>, double, double, double, bool, bool, bool, float*, float*)", "elementwise", False),
 "assign":("triton_red_fused_assigner_topk_0", "reduction/norm", False),
 "misc":  ("void at::native::(anonymous namespace)::nms_kernel_impl<float>(int, double, float const*, unsigned long long*)", "other", False),
}
# per phase: list of (kernel key, stream, duration us)
PLAN = {
 "dataload": [], "to_device": [],
 "forward":  [("nhwc",7,40),("conv",7,180),("bn",7,35),("silu",7,30),("gemm",7,220),("silu",7,30),("conv",7,160),
              ("add",7,25),("gemm",7,210),("reduce",7,45),("assign",7,160),("misc",7,60)],
 "backward": [("silu",7,35),("wgrad",7,260),("gemm",13,240),("bn",7,50),("conv",13,200),("wgrad",7,240),("add",7,25),
              ("gemm",13,230),("reduce",7,50),("copy",7,30),("conv",13,190),("silu",7,35)],
 "optimizer":[("foreach",7,90),("foreach",7,85),("add",7,20)],
 "outside":  [("foreach",7,70),("copy",7,25)],
}
HOST_MS = {"dataload": 0.7, "to_device": 0.25, "forward": 1.0, "backward": 1.6, "optimizer": 0.45, "outside": 0.35}
OPS = {"dataload": [], "to_device": ["aten::to", "aten::copy_"], "forward": ["aten::conv2d", "aten::batch_norm", "aten::silu", "aten::mm"],
       "backward": ["autograd::engine::evaluate_function: ConvolutionBackward0", "aten::mm"], "optimizer": ["aten::_fused_sgd_"], "outside": ["aten::zero_"]}

steps, phases, gpu, runtime, ops = [], [], [], [], []
corr = 1000
stream_free = {7: BASE, 13: BASE}
t = BASE
for i in range(20):
    synced = i >= 10
    step_start = t
    for ph in ["dataload", "to_device", "forward", "backward", "optimizer", "outside"]:
        p_start = t
        host = HOST_MS[ph] * MS * random.uniform(0.9, 1.1)
        if ph == "dataload" and synced:
            host *= 0.4  # synchronising gives workers slack: dataload looks shorter in synced steps
        launches = [("memcpy", 7, 120)] if ph == "to_device" else PLAN[ph]
        n = max(1, len(launches))  # launches spread evenly over the phase
        for j, (key, stream, dur) in enumerate(launches):
            call = p_start + int((j + 0.5) * host / n)
            corr += 1
            name = "cudaMemcpyAsync" if key == "memcpy" else "cudaLaunchKernel"
            runtime.append({"name": name, "start_ns": call, "dur_ns": 6 * US, "correlation": corr, "thread": 1})
            k_start = max(call + 8 * US, stream_free[stream])
            k_dur = int(dur * US * random.uniform(0.95, 1.05))
            stream_free[stream] = k_start + k_dur
            if key == "memcpy":
                gpu.append({"kind": "memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "stream": stream,
                            "start_ns": k_start, "dur_ns": k_dur, "correlation": corr})
            else:
                gpu.append({"kind": "kernel", "name": K[key][0], "stream": stream, "start_ns": k_start,
                            "dur_ns": k_dur, "correlation": corr})
        if ph == "forward":  # a zero-fill of the gradient buckets
            corr += 1
            call = p_start + int(0.1 * host)
            runtime.append({"name": "cudaMemsetAsync", "start_ns": call, "dur_ns": 4 * US, "correlation": corr, "thread": 1})
            ms = max(call + 8 * US, stream_free[7])
            gpu.append({"kind": "memset", "name": "Memset (Device)", "stream": 7, "start_ns": ms, "dur_ns": 5 * US, "correlation": corr})
            stream_free[7] = ms + 5 * US
        for j, op in enumerate(OPS[ph]):
            ops.append({"name": op, "start_ns": p_start + int((j + 0.2) * host / len(OPS[ph])), "dur_ns": int(0.1 * host / len(OPS[ph]))})
        p_end = p_start + int(host)
        if synced and ph != "outside":  # device sync at the end of each phase
            p_end = max(p_end, max(stream_free.values()))
        if ph != "outside":
            phases.append({"step": i, "phase": ph, "start_ns": p_start, "end_ns": p_end, "synced": synced})
        t = p_end + 2 * US
    steps.append({"start_ns": step_start, "end_ns": t, "synced": synced, "images": 16})
    t += 1 * US
    if synced:  # the next synced step starts with an idle device
        t = max(t, max(stream_free.values()))

record = {"schema": "libreyolo.profile.record/v1", "warmup": 5, "steps": steps, "phases": phases, "gpu": gpu,
          "runtime": runtime, "cpu_ops": ops, "peak_vram_bytes": 5_452_595_200, "device_mallocs": 30,
          "trace_collected": True,
          "meta": {"model": "yolo9-s", "device": "cuda:0", "batch": 16, "imgsz": 640, "amp": True,
                   "amp_dtype": "float16", "workers": 4, "cuda_graph": False, "precision": "amp_fp16"}}

# ---- expected figures, computed independently -------------------------------------------------
N = len(steps)
unsynced = [i for i, s in enumerate(steps) if not s["synced"]]
synced_ix = [i for i, s in enumerate(steps) if s["synced"]]
step_ms = sum(steps[i]["end_ns"] - steps[i]["start_ns"] for i in unsynced) / len(unsynced) / MS
dl_ms = sum(p["end_ns"] - p["start_ns"] for p in phases if p["phase"] == "dataload" and p["step"] in unsynced) / len(unsynced) / MS
kern = [g for g in gpu if g["kind"] == "kernel"]
busy = interval_union((g["start_ns"], g["start_ns"] + g["dur_ns"]) for g in kern)
raw = sum(g["dur_ns"] for g in kern)
busy_ms = busy / N / MS
util_raw = busy_ms / step_ms
tc_names = {v[0] for v in K.values() if v[2]}
launch_at = {r["correlation"]: r["start_ns"] for r in runtime}
def phase_of(ts):
    for p in phases:
        if p["start_ns"] <= ts <= p["end_ns"]:
            return p["phase"]
    return "outside"
per_phase = {p: {"gpu_ns": 0, "kernels": 0} for p in ["dataload", "to_device", "forward", "backward", "optimizer", "outside"]}
by_start_disagrees = 0
for g in gpu:
    ph = phase_of(launch_at[g["correlation"]])
    per_phase[ph]["gpu_ns"] += g["dur_ns"]
    if g["kind"] == "kernel":
        per_phase[ph]["kernels"] += 1
        if phase_of(g["start_ns"]) != ph: by_start_disagrees += 1
wall = {p: sum(x["end_ns"] - x["start_ns"] for x in phases if x["phase"] == p and x["step"] in synced_ix) / len(synced_ix) / MS
        for p in ["dataload", "to_device", "forward", "backward", "optimizer"]}
cat_ns = {}
for g in kern:
    cat = next(v[1] for v in K.values() if v[0] == g["name"])
    cat_ns[cat] = cat_ns.get(cat, 0) + g["dur_ns"]
launches = sum(1 for r in runtime if "Launch" in r["name"])
mallocs = record["device_mallocs"] / N
util = min(util_raw, 1.0)
if mallocs >= 5 or util_raw > 1.05: bound = "memory-pressure"
elif dl_ms / step_ms >= 0.2: bound = "dataloader"
elif util >= 0.8: bound = "compute"
else: bound = "host/launch"
expected = {
  "steps": N, "real_steps": len(unsynced), "synced_steps": len(synced_ix),
  "step_ms": step_ms, "dataload_ms": dl_ms, "dataload_frac": dl_ms / step_ms, "img_per_s": 16 / (step_ms / 1e3),
  "gpu_busy_ms_per_step": busy_ms, "gpu_kernel_sum_ms_per_step": raw / N / MS, "gpu_util_raw": util_raw, "gpu_util": util,
  "kernels_per_step": len(kern) / N, "mean_kernel_us": raw / len(kern) / US, "unique_kernels": len({g["name"] for g in kern}),
  "memcpy_ms_per_step": sum(g["dur_ns"] for g in gpu if g["kind"] == "memcpy") / N / MS,
  "memset_ms_per_step": sum(g["dur_ns"] for g in gpu if g["kind"] == "memset") / N / MS,
  "tensorcore_pct": 100 * sum(g["dur_ns"] for g in kern if g["name"] in tc_names) / raw,
  "launches_per_step": launches / N, "cuda_mallocs_per_step": mallocs,
  "host_overhead_ms_per_step": max(step_ms - busy_ms - dl_ms, 0), "peak_vram_mb": record["peak_vram_bytes"] / 2**20,
  "phase_gpu_ms": {p: v["gpu_ns"] / N / MS for p, v in per_phase.items()},
  "phase_kernels": {p: v["kernels"] / N for p, v in per_phase.items()},
  "phase_wall_ms": wall,
  "category_ms": {c: v / N / MS for c, v in cat_ns.items()},
  "category_of": {v[0]: v[1] for v in K.values()},
  "kernels_misattributed_by_start_time": by_start_disagrees,
  "bound": bound,
}
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "synthetic_record.json"), "w") as f:
    json.dump(record, f, indent=0)
with open(os.path.join(here, "synthetic_expected.json"), "w") as f:
    json.dump(expected, f, indent=1)
print(json.dumps({k: expected[k] for k in ["step_ms", "dataload_frac", "gpu_util_raw", "kernels_misattributed_by_start_time", "bound"]}))
