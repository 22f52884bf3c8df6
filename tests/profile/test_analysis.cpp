// Analysis of profiler windows: verdict thresholds, busy-time union, correlation-based attribution,
// window rounding, the no-trace case, and the synthetic fixture checked against figures computed
// independently by tests/data/profile/make_synthetic_record.py.
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/window.hpp>

#include <fstream>
#include <map>
#include <unordered_map>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;

namespace {
constexpr int64_t ms = 1'000'000;

json read_json(const std::string& rel) {
  std::ifstream f(std::string(LIBREYOLO_SOURCE_DIR) + "/tests/data/profile/" + rel);
  REQUIRE(f.good());
  return json::parse(f);
}

VerdictInputs traced(double mallocs, double util_raw, double dl_frac) {
  VerdictInputs in;
  in.trace_collected = true;
  in.mallocs_per_step = mallocs;
  in.gpu_util_raw = util_raw;
  in.dataload_frac = dl_frac;
  return in;
}

// Two 100 ms steps (one unsynced, one synced), forward = [10, 40] ms and backward = [40, 70] ms of each.
WindowRecord two_step_record() {
  WindowRecord r;
  r.trace_collected = true;
  for (int i = 0; i < 2; ++i) {
    const int64_t t = i * 100 * ms;
    r.steps.push_back({t, t + 100 * ms, i == 1, 8});
    r.phases.push_back({i, Phase::dataload, t, t + 10 * ms, i == 1});
    r.phases.push_back({i, Phase::forward, t + 10 * ms, t + 40 * ms, i == 1});
    r.phases.push_back({i, Phase::backward, t + 40 * ms, t + 70 * ms, i == 1});
  }
  return r;
}
}  // namespace

TEST_CASE("verdict: memory-pressure at 5 device mallocs per step and above raw utilization 1.05") {
  CHECK(decide_verdict(traced(5.0, 0.5, 0.0)).bound == bound::memory_pressure);
  CHECK(decide_verdict(traced(4.99, 0.5, 0.0)).bound == bound::host_launch);
  CHECK(decide_verdict(traced(0, 1.05, 0.0)).bound == bound::compute);  // 1.05 itself is not over
  CHECK(decide_verdict(traced(0, 1.0501, 0.0)).bound == bound::memory_pressure);
  // Checked first: a starved loader does not hide memory pressure.
  CHECK(decide_verdict(traced(6, 0.3, 0.5)).bound == bound::memory_pressure);
  const auto v = decide_verdict(traced(5.0, 0.5, 0.0));
  CHECK(v.why.find("5.0 device mallocs") != std::string::npos);
  CHECK(v.levers.size() == 3);
}

TEST_CASE("verdict: dataloader at dataload_frac 0.2, compute at utilization 0.8, else host/launch") {
  CHECK(decide_verdict(traced(0, 0.9, 0.2)).bound == bound::dataloader);
  CHECK(decide_verdict(traced(0, 0.9, 0.1999)).bound == bound::compute);
  CHECK(decide_verdict(traced(0, 0.8, 0.0)).bound == bound::compute);
  CHECK(decide_verdict(traced(0, 0.7999, 0.0)).bound == bound::host_launch);
  CHECK(decide_verdict(traced(0, 0.0, 0.0)).bound == bound::host_launch);
  // dataload_frac exactly 0.2 through the analysis: 20 ms of loader in a 100 ms step.
  WindowRecord r = two_step_record();
  r.phases[0].end_ns = 20 * ms;
  r.phases[1].start_ns = 20 * ms;
  const auto a = analyse(r);
  CHECK(a.dataload_frac == 0.2);
  CHECK(a.verdict.bound == bound::dataloader);
}

TEST_CASE("verdict: the fp32 note appears exactly when AMP is off") {
  auto in = traced(0, 0.9, 0.0);
  in.amp = false;
  auto v = decide_verdict(in);
  REQUIRE(v.notes.size() == 1);
  CHECK(v.notes[0].find("Tensor Cores") != std::string::npos);
  in.amp = true;
  CHECK(decide_verdict(in).notes.empty());
  // On a CPU device AMP falls back to fp32 and there are no Tensor Cores: no note.
  in.amp = false;
  in.cuda_device = false;
  CHECK(decide_verdict(in).notes.empty());
  in.cuda_device = true;
  CHECK(decide_verdict(in).notes.size() == 1);
}

TEST_CASE("verdict without a kernel trace never says host/launch") {
  VerdictInputs in;  // trace_collected = false, utilization 0
  in.dataload_frac = 0.1;
  auto v = decide_verdict(in);
  CHECK(v.bound == bound::unknown_no_trace);
  REQUIRE(!v.notes.empty());
  CHECK(v.notes[0].find("no GPU kernel trace") != std::string::npos);
  in.dataload_frac = 0.2;
  CHECK(decide_verdict(in).bound == bound::dataloader);
  in.dataload_frac = 0.0;
  in.mallocs_per_step = 7;  // allocator counts do not need the tracer
  CHECK(decide_verdict(in).bound == bound::memory_pressure);
  // Through the analysis: a record with host spans only.
  WindowRecord r = two_step_record();
  r.trace_collected = false;
  const auto a = analyse(r);
  CHECK(a.verdict.bound == bound::unknown_no_trace);
  CHECK(a.kernels_per_step == 0);
}

TEST_CASE("busy time is the union of kernel intervals across streams; the raw sum is kept") {
  CHECK(interval_union_ns({{0, 10}, {20, 30}, {5, 25}}) == 30);
  CHECK(interval_union_ns({{0, 10}, {10, 20}}) == 20);   // touching
  CHECK(interval_union_ns({{0, 100}, {10, 20}}) == 100);  // nested
  CHECK(interval_union_ns({}) == 0);
  WindowRecord r = two_step_record();
  // stream 7: [10,20) and [30,40) ms; stream 13: [15,35) ms -> union 30 ms, raw 40 ms, over 2 steps.
  r.gpu = {{GpuKind::kernel, "k_a", 7, 10 * ms, 10 * ms, 1}, {GpuKind::kernel, "k_b", 7, 30 * ms, 10 * ms, 2},
           {GpuKind::kernel, "k_c", 13, 15 * ms, 20 * ms, 3}};
  const auto a = analyse(r);
  CHECK(a.gpu_busy_ms_per_step == doctest::Approx(15.0));
  CHECK(a.gpu_kernel_sum_ms_per_step == doctest::Approx(20.0));
  CHECK(a.gpu_util_raw == doctest::Approx(0.15));  // 15 ms busy / 100 ms unsynced step
  CHECK(a.kernels_per_step == doctest::Approx(1.5));
  CHECK(a.mean_kernel_us == doctest::Approx(40.0 * 1000 / 3));
  CHECK(a.unique_kernels == 3);
  // host overhead = step - busy - dataload = 100 - 15 - 10
  CHECK(a.host_overhead_ms_per_step == doctest::Approx(75.0));
}

TEST_CASE("a kernel belongs to the phase of its launch call, not to the phase its start falls in") {
  WindowRecord r = two_step_record();
  r.runtime = {{"cudaLaunchKernel", 39 * ms, 5000, 1, 1},   // end of forward
               {"cudaLaunchKernel", 45 * ms, 5000, 2, 1},   // backward
               {"cudaLaunchKernel", 80 * ms, 5000, 4, 1},   // after backward: zero_grad/EMA
               {"cudaMemcpyAsync", 12 * ms, 5000, 5, 1}};  // forward
  r.gpu = {{GpuKind::kernel, "late_forward", 7, 55 * ms, 2 * ms, 1},  // runs while the host is in backward
           {GpuKind::kernel, "bwd", 7, 58 * ms, 1 * ms, 2},
           {GpuKind::kernel, "orphan", 7, 20 * ms, 1 * ms, 3},  // no launch recorded
           {GpuKind::kernel, "ema", 7, 81 * ms, 1 * ms, 4},
           {GpuKind::memcpy, "Memcpy HtoD", 7, 13 * ms, 3 * ms, 5}};
  const auto slots = attribute_gpu_to_phases(r);
  CHECK(slots == std::vector<int>{int(Phase::forward), int(Phase::backward), outside_slot, outside_slot,
                                  int(Phase::forward)});
  const auto a = analyse(r);
  const auto& fwd = a.phases[int(Phase::forward)];
  CHECK(fwd.phase == "forward");
  CHECK(fwd.gpu_ms_per_step == doctest::Approx((2.0 + 3.0) / 2));  // kernel + memcpy, 2 steps
  CHECK(fwd.kernels_per_step == doctest::Approx(0.5));
  REQUIRE(fwd.kernels.size() == 1);
  CHECK(fwd.kernels[0].raw_name == "late_forward");
  CHECK(a.phases[outside_slot].phase == "outside");
  CHECK(a.phases[outside_slot].kernels_per_step == doctest::Approx(1.0));
  CHECK(a.launches_per_step == doctest::Approx(1.5));  // 3 launch calls over 2 steps, memcpy is no launch
  // Phase wall ms from the synced step (the second): forward 30 ms, outside = 100 - 70.
  CHECK(fwd.wall_ms_per_step == doctest::Approx(30.0));
  CHECK(a.phases[outside_slot].wall_ms_per_step == doctest::Approx(30.0));
}

TEST_CASE("tracing from traced_from: device and CPU-op figures are per traced step, timings from untraced steps") {
  // Steps 0-1 unsynced and untraced (100 ms each), steps 2-3 synced and traced (130 ms each).
  WindowRecord r;
  r.trace_collected = true;
  r.traced_from = 2;
  for (int i = 0; i < 4; ++i) {
    const int64_t t = i * 200 * ms;
    const bool synced = i >= 2;
    r.steps.push_back({t, t + (synced ? 130 : 100) * ms, synced, 8});
    r.phases.push_back({i, Phase::dataload, t, t + 10 * ms, synced});
    r.phases.push_back({i, Phase::forward, t + 10 * ms, t + 60 * ms, synced});
  }
  // Each traced step: one 20 ms forward kernel launched at +20 ms, one aten::mm op of 5 ms.
  for (int i = 2; i < 4; ++i) {
    const int64_t t = i * 200 * ms;
    const auto corr = static_cast<uint64_t>(i);
    r.runtime.push_back({"cudaLaunchKernel", t + 20 * ms, 5000, corr, 1});
    r.gpu.push_back({GpuKind::kernel, "k", 7, t + 25 * ms, 20 * ms, corr});
    r.cpu_ops.push_back({"aten::mm", t + 15 * ms, 5 * ms});
  }
  const auto a = analyse(r);
  CHECK(a.traced_steps == 2);
  CHECK(a.step_ms == doctest::Approx(100.0));  // the untraced, unsynced steps
  CHECK(a.gpu_busy_ms_per_step == doctest::Approx(20.0));
  CHECK(a.kernels_per_step == doctest::Approx(1.0));
  CHECK(a.gpu_util_raw == doctest::Approx(0.2));
  CHECK(a.launches_per_step == doctest::Approx(1.0));
  CHECK(a.phases[int(Phase::forward)].gpu_ms_per_step == doctest::Approx(20.0));
  CHECK(a.phases[int(Phase::forward)].ops_per_step == doctest::Approx(1.0));
  REQUIRE(a.ops.size() == 1);
  CHECK(a.ops[0].ms_per_step == doctest::Approx(5.0));
  CHECK(a.phases[int(Phase::forward)].wall_ms_per_step == doctest::Approx(50.0));  // synced steps
}

TEST_CASE("clock alignment pairs the traced phase ranges with the last phases and shifts the rest") {
  WindowRecord r;
  for (int i = 0; i < 2; ++i) {
    const int64_t t = i * 100;
    r.steps.push_back({t, t + 90, i == 1, 1});
    r.phases.push_back({i, Phase::dataload, t, t + 10, i == 1});
    r.phases.push_back({i, Phase::forward, t + 10, t + 50, i == 1});
  }
  // The tracer saw only step 1's two phases, 1000 ns later on its clock (and forward 2 ns longer).
  align_host_to_trace(r, {{"phase/dataload", {1100, 1110}}, {"phase/forward", {1110, 1152}}});
  CHECK(r.phases[0].start_ns == 1000);  // untraced: shifted by the median offset
  CHECK(r.phases[1].end_ns == 1050);
  CHECK(r.phases[2].start_ns == 1100);  // traced: replaced
  CHECK(r.phases[3].end_ns == 1152);
  CHECK(r.steps[0].start_ns == 1000);
  CHECK(r.steps[1].end_ns == 1190);
  // Names that do not match the record's last phases: nothing is moved.
  WindowRecord same = r;
  align_host_to_trace(same, {{"phase/backward", {5000, 5010}}});
  CHECK(same.phases[3].start_ns == r.phases[3].start_ns);
  CHECK(same.steps[0].start_ns == r.steps[0].start_ns);
}

TEST_CASE("events the tracer saw after the window's last step are left out of the record") {
  WindowRecord r;
  r.steps = {{0, 100, true, 1}, {100, 200, true, 1}};
  r.gpu = {{GpuKind::kernel, "in_window", 7, 150, 20, 1}, {GpuKind::kernel, "at_end", 7, 200, 5, 2},
           {GpuKind::memcpy, "next_step", 7, 201, 5, 3}};
  r.runtime = {{"cudaLaunchKernel", 140, 2, 1, 9}, {"cudaLaunchKernel", 230, 2, 4, 9}};
  r.cpu_ops = {{"aten::mm", 120, 30}, {"aten::add", 260, 4}};
  drop_after_window(r);
  REQUIRE(r.gpu.size() == 2);
  CHECK(r.gpu[1].name == "at_end");  // started at the window's end: kept
  REQUIRE(r.runtime.size() == 1);
  CHECK(r.runtime[0].correlation == 1);
  REQUIRE(r.cpu_ops.size() == 1);
  CHECK(r.cpu_ops[0].name == "aten::mm");
  WindowRecord empty;  // no steps: nothing to cut against, nothing removed
  empty.cpu_ops = {{"aten::mm", 5, 1}};
  drop_after_window(empty);
  CHECK(empty.cpu_ops.size() == 1);
}

TEST_CASE("window plan: warm-up and window round up to multiples of the accumulation count") {
  auto check = [](int w, int act, int acc, WindowPlan want) {
    const auto p = plan_window(w, act, acc);
    CAPTURE(w);
    CAPTURE(act);
    CAPTURE(acc);
    CHECK(p.warmup == want.warmup);
    CHECK(p.active == want.active);
    CHECK(p.unsynced == want.unsynced);
  };
  check(5, 20, 1, {5, 20, 10});
  check(5, 5, 1, {5, 5, 3});
  check(0, 2, 1, {0, 2, 1});
  check(5, 20, 4, {8, 20, 12});  // 5 optimizer steps: 3 unsynced, 2 synced
  check(5, 18, 4, {8, 20, 12});
  check(5, 20, 3, {6, 21, 12});
  check(3, 2, 4, {4, 4, 2});  // a single optimizer step is split in micro-steps
  check(5, 20, 0, {5, 20, 10});  // accumulate < 1 counts as 1
  // Traced steps: the last ones of the synchronised half, in whole optimizer steps, at most all of it.
  CHECK(plan_window(5, 20, 1, 2).traced == 2);
  CHECK(plan_window(5, 20, 1, 0).traced == 10);   // 0 = every synchronised step
  CHECK(plan_window(5, 20, 1, 50).traced == 10);
  CHECK(plan_window(5, 20, 4, 2).traced == 4);    // one optimizer step of 4 micro-steps
  CHECK(plan_window(5, 20, 4, 5).traced == 8);    // capped: 8 synchronised micro-steps
  CHECK(plan_window(5, 20, 3, 4).traced == 6);
}

TEST_CASE("kernel names: short names, categories, Tensor-Core patterns") {
  CHECK(short_kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                          "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>)") ==
        "at::native::vectorized_elementwise_kernel");
  CHECK(short_kernel_name("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<X>(Y)") ==
        "at::native::anon::multi_tensor_apply_kernel");
  CHECK(short_kernel_name("sm90_xmma_gemm_f16f16_f16f32") == "sm90_xmma_gemm_f16f16_f16f32");
  CHECK(is_tensorcore_kernel("cutlass_80_TensorOp_f16_s16816gemm"));
  CHECK(is_tensorcore_kernel("volta_h884gemm_HMMA"));
  CHECK(is_tensorcore_kernel("sm90_gmma_kernel"));
  CHECK_FALSE(is_tensorcore_kernel("void at::native::reduce_kernel<512>"));
  CHECK(kernel_category("void cudnn::engines_precompiled::nchwToNhwcKernel<__half>") == "layout/copy");
  CHECK(kernel_category("cudnn::bn_fw_tr_1C11_kernel_NCHW") == "reduction/norm");
  CHECK(kernel_category("implicit_convolve_sgemm") == "gemm/conv");
  CHECK(kernel_category("void at::native::vectorized_elementwise_kernel<4, silu>") == "elementwise");
  CHECK(kernel_category("nms_kernel_impl") == "other");
  // Parameter types do not count: cudnn::reduced_divisor is no reduction.
  CHECK(kernel_category("void cudnn::conv2d_grouped_direct_kernel<float>(cudnn::reduced_divisor, int)") == "gemm/conv");
  CHECK(kernel_category("void cublasLt::splitKreduce_kernel<32, 16>(cublasLt::cublasSplitKParams<float>)") == "gemm/conv");
  CHECK(without_parameter_list("void a::(anonymous namespace)::k<x(y)>(int)") == "void a::anon::k<x(y)>");
}

TEST_CASE("synthetic fixture: every figure matches the independent Python computation") {
  const json rec_json = read_json("synthetic_record.json");
  const json want = read_json("synthetic_expected.json");
  const WindowRecord rec = record_from_json(rec_json);
  // The fixture only tests attribution if start-time attribution would have got kernels wrong.
  REQUIRE(want["kernels_misattributed_by_start_time"].get<int>() > 0);
  const Analysis a = analyse(rec);
  auto approx = [](double v) { return doctest::Approx(v).epsilon(1e-9); };
  CHECK(a.real_steps == want["real_steps"].get<int>());
  CHECK(a.synced_steps == want["synced_steps"].get<int>());
  for (auto [name, got] : std::initializer_list<std::pair<const char*, double>>{
           {"step_ms", a.step_ms}, {"dataload_ms", a.dataload_ms}, {"dataload_frac", a.dataload_frac},
           {"img_per_s", a.img_per_s}, {"gpu_busy_ms_per_step", a.gpu_busy_ms_per_step},
           {"gpu_kernel_sum_ms_per_step", a.gpu_kernel_sum_ms_per_step}, {"gpu_util_raw", a.gpu_util_raw},
           {"gpu_util", a.gpu_util}, {"kernels_per_step", a.kernels_per_step}, {"mean_kernel_us", a.mean_kernel_us},
           {"memcpy_ms_per_step", a.memcpy_ms_per_step}, {"memset_ms_per_step", a.memset_ms_per_step},
           {"tensorcore_pct", a.tensorcore_pct}, {"launches_per_step", a.launches_per_step},
           {"cuda_mallocs_per_step", a.cuda_mallocs_per_step},
           {"host_overhead_ms_per_step", a.host_overhead_ms_per_step}, {"peak_vram_mb", a.peak_vram_mb}}) {
    CAPTURE(name);
    CHECK(got == approx(want[name].get<double>()));
  }
  CHECK(a.unique_kernels == want["unique_kernels"].get<int>());
  CHECK(a.gpu_busy_ms_per_step < a.gpu_kernel_sum_ms_per_step);  // the two streams overlap
  for (const auto& p : a.phases) {
    CAPTURE(p.phase);
    CHECK(p.gpu_ms_per_step == approx(want["phase_gpu_ms"][p.phase].get<double>()));
    CHECK(p.kernels_per_step == approx(want["phase_kernels"][p.phase].get<double>()));
    if (p.phase != "outside") CHECK(p.wall_ms_per_step == approx(want["phase_wall_ms"][p.phase].get<double>()));
  }
  for (const auto& k : a.kernels) {
    CAPTURE(k.raw_name);
    CHECK(k.category == want["category_of"][k.raw_name].get<std::string>());
  }
  for (const auto& c : a.categories) {
    CAPTURE(c.name);
    const double w = want["category_ms"].contains(c.name) ? want["category_ms"][c.name].get<double>() : 0.0;
    CHECK(c.ms_per_step == approx(w));
  }
  CHECK(a.verdict.bound == want["bound"].get<std::string>());
  CHECK(a.verdict.notes.empty());  // AMP on, trace present
}

TEST_CASE("record JSON: round trip, and errors that name the bad key or value") {
  const json j = read_json("synthetic_record.json");
  // The fixture predates traced_from/tracer_ms: it reads as traced from the first step, and writing it
  // back adds exactly those two keys.
  const WindowRecord old = record_from_json(j);
  CHECK(old.traced_from == 0);
  json written = to_json(old);
  CHECK(written["traced_from"] == 0);
  CHECK(written["tracer_ms"] == json{{"setup", 0.0}, {"start", 0.0}, {"detach", 0.0}, {"readout", 0.0}, {"convert", 0.0}});
  written.erase("traced_from");
  written.erase("tracer_ms");
  CHECK(written == j);
  WindowRecord partial = old;
  partial.traced_from = 2, partial.tracer_setup_ms = 310.5, partial.tracer_start_ms = 1.25, partial.tracer_readout_ms = 42;
  partial.tracer_convert_ms = 7.5, partial.tracer_detach_ms = 0.25;
  const json pj = to_json(partial);
  CHECK(to_json(record_from_json(pj)) == pj);
  CHECK(record_from_json(pj).tracer_setup_ms == 310.5);
  CHECK(record_from_json(pj).tracer_convert_ms == 7.5);
  CHECK(record_from_json(pj).tracer_detach_ms == 0.25);
  json no_detach = pj;  // records written before the read-out moved off the training thread
  no_detach["tracer_ms"].erase("detach");
  CHECK(record_from_json(no_detach).tracer_detach_ms == 0);
  CHECK(record_from_json(no_detach).tracer_readout_ms == 42);
  json bad = pj;
  bad["traced_from"] = static_cast<int>(old.steps.size());
  const std::string outside = "traced_from=" + std::to_string(old.steps.size()) + " is outside";
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains(outside.c_str()), libreyolo::DataError);
  bad = pj;
  bad["tracer_ms"].erase("readout");
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains("record.tracer_ms lacks key 'readout'"), libreyolo::DataError);
  bad = j;
  bad["schema"] = "something/v9";
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains("libreyolo.profile.record/v1"), libreyolo::DataError);
  bad = j;
  bad["steps"][3].erase("end_ns");
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains("steps[3] lacks key 'end_ns'"), libreyolo::DataError);
  bad = j;
  bad["phases"][0]["phase"] = "warmup";
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains("'warmup'; allowed: dataload"), libreyolo::DataError);
  bad = j;
  bad["gpu"][1]["kind"] = "graph";
  CHECK_THROWS_WITH_AS(record_from_json(bad), doctest::Contains("gpu[1].kind is 'graph'"), libreyolo::DataError);
  bad = j;
  bad["phases"][0]["step"] = 99;
  CHECK_THROWS_AS(record_from_json(bad), libreyolo::DataError);
}

// Recorded on an H200 (LibTorch 2.11, Kineto) by the gpu test case in test_window.cpp: a toy
// 512x512 MLP step, Window<2,6>. Checks facts of the trace itself and of attribution through it.
TEST_CASE("real H200 record: every kernel has its launch, and each step attributes the same kernels") {
  const WindowRecord rec = record_from_json(read_json("h200_toy_record.json"));
  REQUIRE(rec.trace_collected);
  REQUIRE(rec.steps.size() == 6);
  std::map<uint64_t, int> launches;
  for (const auto& c : rec.runtime) launches[c.correlation] += 1;
  for (const auto& g : rec.gpu) CHECK(launches[g.correlation] == 1);
  // Per step and slot, count kernels; a deterministic loop must give the same counts every step.
  const auto slots = attribute_gpu_to_phases(rec);
  std::unordered_map<uint64_t, int64_t> launch_at;
  for (const auto& c : rec.runtime) launch_at[c.correlation] = c.start_ns;
  std::vector<std::vector<int>> per_step(rec.steps.size(), std::vector<int>(phase_count + 1, 0));
  for (size_t i = 0; i < rec.gpu.size(); ++i) {
    if (rec.gpu[i].kind != GpuKind::kernel) continue;
    const int64_t t = launch_at[rec.gpu[i].correlation];
    for (size_t s = 0; s < rec.steps.size(); ++s)
      if (rec.steps[s].start_ns <= t && t <= rec.steps[s].end_ns) per_step[s][slots[i]] += 1;
  }
  for (size_t s = 1; s < per_step.size(); ++s) CHECK(per_step[s] == per_step[0]);
  CHECK(per_step[0][int(Phase::dataload)] == 0);  // the loader runs on the CPU
  CHECK(per_step[0][int(Phase::forward)] > 0);
  CHECK(per_step[0][int(Phase::backward)] > per_step[0][int(Phase::forward)]);
  CHECK(per_step[0][int(Phase::optimizer)] > 0);
  const auto a = analyse(rec);
  CHECK(a.phases[int(Phase::to_device)].gpu_ms_per_step > 0);  // the host-to-device copy
  CHECK(a.verdict.bound == bound::host_launch);                 // ~2% GPU busy on a toy step
}

// A real training run on the H200 (ResNet-18 b16 224, AMP fp16, cache=ram, accumulate 4, `libreyolo train
// … profile=true`, benchmarks/gpu_session.sh stage train, run r18_cached), trimmed by
// tests/data/profile/trim_h200_trace.py to two unsynced and two synced steps; the expected figures are
// computed by that script from the trimmed record, independently of the C++ analysis.
TEST_CASE("real H200 training trace (ResNet-18): analysis reproduces the independently computed figures") {
  const WindowRecord rec = record_from_json(read_json("h200_r18_record.json"));
  const json want = read_json("h200_r18_expected.json");
  const auto a = analyse(rec);
  REQUIRE(a.trace_collected);
  CHECK(a.real_steps == want["real_steps"].get<int>());
  CHECK(a.synced_steps == want["synced_steps"].get<int>());
  auto near = [](double got, const json& w) { return got == doctest::Approx(w.get<double>()).epsilon(1e-9); };
  CHECK(near(a.step_ms, want["step_ms"]));
  CHECK(near(a.dataload_ms, want["dataload_ms"]));
  CHECK(near(a.gpu_busy_ms_per_step, want["gpu_busy_ms_per_step"]));
  CHECK(near(a.gpu_kernel_sum_ms_per_step, want["kernel_sum_ms_per_step"]));
  CHECK(near(a.kernels_per_step, want["kernels_per_step"]));
  CHECK(near(a.gpu_util_raw, want["gpu_util_raw"]));
  CHECK(near(a.host_overhead_ms_per_step, want["host_overhead_ms_per_step"]));
  CHECK(near(a.launches_per_step, want["launches_per_step"]));
  CHECK(a.verdict.bound == want["bound"].get<std::string>());
  CHECK(a.verdict.bound == bound::host_launch);
  // Correlation-based attribution: GPU ms and kernels of every phase, and nothing in dataload.
  for (const auto& p : a.phases) {
    INFO("phase " << p.phase);
    const double gpu_ms = want["phase_gpu_ms"].value(p.phase, 0.0);
    const double kernels = want["phase_kernels"].value(p.phase, 0.0);
    CHECK(p.gpu_ms_per_step == doctest::Approx(gpu_ms).epsilon(1e-9));
    CHECK(p.kernels_per_step == doctest::Approx(kernels).epsilon(1e-9));
  }
  CHECK(a.phases[int(Phase::dataload)].gpu_ms_per_step == 0);
  CHECK(a.phases[int(Phase::backward)].kernels_per_step > a.phases[int(Phase::forward)].kernels_per_step);
  // The trimmed steps agree with the full 20-step window the run reported.
  CHECK(want["source"]["full_window_bound"] == "host/launch");
  CHECK(a.gpu_busy_ms_per_step == doctest::Approx(want["source"]["full_window_gpu_busy_ms_per_step"].get<double>()).epsilon(0.1));
}
