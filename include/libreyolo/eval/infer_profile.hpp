#pragma once
// `libreyolo profile infer`: inference latency of one model, stage by stage (preprocess, forward,
// postprocess), eager and from CUDA graphs side by side. Each stage is host wall-clock time with the device
// synchronised at its end (on CUDA), so a stage's time includes the device work it queued. With --trace N
// (CUDA builds), one more pass of N forwards per mode runs under the kernel tracer after the timed ones and
// reports kernels per forward and their busy time; without it no GPU busy time or utilisation is claimed.
//   preprocess   letterbox (detection) or resize + centre crop (classification) of `batch` synthetic
//                images to imgsz, to a tensor on the device, the family's input normalisation;
//   forward      the network (a DETR's decoder included), eager or one graph replay;
//   postprocess  decode (+ NMS for detection, softmax for classification) and the results to the host.
// This file: the options, the percentile statistics and the report (JSON and text); the measuring loop
// is facade.hpp's infer_with (it needs the family).
#include <libreyolo/core/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace libreyolo::eval {

inline constexpr const char* infer_schema = "libreyolo.profile.infer/v1";

struct InferOptions {
  int batch = 1;             // images per forward
  int imgsz = 0;             // 0: the checkpoint's imgsz (640 for a bare model name)
  std::string device;        // "" = CUDA when available
  bool cuda_graph = false;   // also measure the graphed forward (CUDA only)
  int repeat = 50;           // measured iterations per mode
  int warmup = 5;            // unmeasured iterations before them
  double conf = 0.25;        // detection: the score threshold of decode
  bool half = false;           // fp16 weights and inputs (the original's predict(half=True)); CUDA only
  bool channels_last = false;  // NHWC weights and inputs (as training's channels_last)
  bool cudnn_benchmark = false;  // cuDNN autotuning (training's cudnn_benchmark); CUDA only
  // After the timed passes, per mode `trace` forwards of one batch timed alone, then as many under the kernel
  // tracer (profile::time_steps; CUDA builds): kernels per forward and their busy time, the floor under a
  // forward's device time. 0: none.
  int trace = 0;
};

inline void check_infer_options(const InferOptions& o) {
  if (o.batch < 1) throw ConfigError("profile infer: --batch " + std::to_string(o.batch) + ": allowed an integer >= 1");
  if (o.imgsz < 0 || (o.imgsz > 0 && o.imgsz < 32))
    throw ConfigError("profile infer: --imgsz " + std::to_string(o.imgsz) + ": allowed an integer >= 32 (pixels)");
  if (o.repeat < 1) throw ConfigError("profile infer: --repeat " + std::to_string(o.repeat) + ": allowed an integer >= 1");
  if (o.warmup < 0) throw ConfigError("profile infer: --warmup " + std::to_string(o.warmup) + ": allowed an integer >= 0");
  if (o.trace < 0) throw ConfigError("profile infer: --trace " + std::to_string(o.trace) + ": allowed an integer >= 0 (forwards traced)");
}

// The q-th percentile (0..100) of `v`, linear between the closest ranks (numpy's default).
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) throw Error("percentile of no samples");
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// {p50_ms, p90_ms, p99_ms, mean_ms, min_ms, max_ms, n} of a list of milliseconds.
inline nlohmann::json latency_stats(const std::vector<double>& ms) {
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / static_cast<double>(ms.size());
  return {{"p50_ms", percentile(ms, 50)}, {"p90_ms", percentile(ms, 90)}, {"p99_ms", percentile(ms, 99)},
          {"mean_ms", mean}, {"min_ms", *std::min_element(ms.begin(), ms.end())},
          {"max_ms", *std::max_element(ms.begin(), ms.end())}, {"n", ms.size()}};
}

// One mode's samples (milliseconds per iteration).
struct StageSamples {
  std::vector<double> preprocess, forward, postprocess;
  std::vector<double> latency() const {
    std::vector<double> l(preprocess.size());
    for (size_t i = 0; i < l.size(); ++i) l[i] = preprocess[i] + forward[i] + postprocess[i];
    return l;
  }
};

// A mode's block of the report: per-stage statistics, the end-to-end latency and the throughput
// (batch images per mean latency).
inline nlohmann::json mode_doc(const std::string& mode, const StageSamples& s, int batch) {
  const auto lat = latency_stats(s.latency());
  const double mean = lat["mean_ms"].get<double>();
  return {{"mode", mode},
          {"stages_ms", {{"preprocess", latency_stats(s.preprocess)}, {"forward", latency_stats(s.forward)},
                         {"postprocess", latency_stats(s.postprocess)}}},
          {"latency_ms", lat},
          {"img_per_s", mean > 0 ? nlohmann::json(1000.0 * batch / mean) : nlohmann::json()}};
}

inline const char* infer_timing_note() {
  return "host wall-clock timings (the device synchronised after each stage); no GPU kernel trace: GPU busy time and "
         "utilisation are not measured";
}
inline const char* infer_trace_note() {
  return "stages timed on the host (the device synchronised after each); kernel figures from a separate traced pass of "
         "forwards (Kineto), not from the timed ones: a forward can take no less device time than its kernels' busy time";
}

inline std::string infer_text(const nlohmann::json& d) {
  std::ostringstream o;
  char line[200];
  o << "profile infer: " << d.value("model", std::string("?")) << " (" << d.value("weights_note", std::string()) << "), "
    << d.value("task", std::string()) << ", batch " << d.value("batch", 0) << ", imgsz " << d.value("imgsz", 0) << ", device "
    << d.value("device", std::string()) << ", " << d.value("repeat", 0) << " iterations after " << d.value("warmup", 0)
    << " warm-up" << (d.value("half", false) ? ", fp16 weights" : "") << (d.value("channels_last", false) ? ", channels-last" : "")
    << (d.value("cudnn_benchmark", false) ? ", cuDNN autotuning" : "") << "\n";
  if (d.value("trace_collected", false)) o << infer_trace_note() << "\n";
  else o << "host timings only: " << infer_timing_note() << "\n";
  std::snprintf(line, sizeof line, "%-11s %-12s %9s %9s %9s %9s\n", "mode", "stage", "p50 ms", "p90 ms", "p99 ms", "mean ms");
  o << line;
  for (const auto& m : d.at("modes")) {
    const std::string mode = m.at("mode").get<std::string>();
    auto row = [&](const std::string& stage, const nlohmann::json& st) {
      std::snprintf(line, sizeof line, "%-11s %-12s %9.3f %9.3f %9.3f %9.3f\n", mode.c_str(), stage.c_str(),
                    st.at("p50_ms").get<double>(), st.at("p90_ms").get<double>(), st.at("p99_ms").get<double>(),
                    st.at("mean_ms").get<double>());
      o << line;
    };
    for (const char* stage : {"preprocess", "forward", "postprocess"}) row(stage, m.at("stages_ms").at(stage));
    row("latency", m.at("latency_ms"));
    if (m.at("img_per_s").is_number()) {
      std::snprintf(line, sizeof line, "%-11s throughput %.1f img/s\n", mode.c_str(), m.at("img_per_s").get<double>());
      o << line;
    }
    if (m.contains("kernels") && m.at("kernels").is_object()) {
      const auto& k = m.at("kernels");
      std::snprintf(line, sizeof line, "%-11s kernels    %.0f per forward, busy %.3f ms (forward alone: min %.3f ms; %d forwards traced)\n",
                    mode.c_str(), k.at("kernels_per_forward").get<double>(), k.at("busy_ms").get<double>(),
                    k.at("forward_min_ms").get<double>(), k.at("forwards").get<int>());
      o << line;
    }
  }
  const auto& g = d.at("cuda_graph");
  if (g.value("requested", false) && !g.value("measured", false)) o << g.value("why", std::string()) << "\n";
  if (d.contains("graph_speedup_p50") && d.at("graph_speedup_p50").is_number()) {
    std::snprintf(line, sizeof line, "cuda_graph: latency p50 x%.2f of eager\n", d.at("graph_speedup_p50").get<double>());
    o << line;
  }
  return o.str();
}

}  // namespace libreyolo::eval
