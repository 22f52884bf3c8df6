#pragma once
// `libreyolo checks`: one screen of versions and capabilities to paste into a bug report.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/plot/canvas.hpp>

#include <nlohmann/json.hpp>

#include <thread>
#include <ostream>
#include <string>

#ifndef LIBREYOLO_VERSION_STRING
#define LIBREYOLO_VERSION_STRING "unknown"
#endif

namespace libreyolo::cli {

inline nlohmann::json checks_doc() {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : compat::cuda_devices())
    gpus.push_back({{"name", g.name}, {"capability", std::to_string(g.major) + "." + std::to_string(g.minor)},
                    {"memory_gib", static_cast<double>(g.total_bytes) / (1 << 30)}, {"bf16", g.bf16}});
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  return {{"libreyolo", LIBREYOLO_VERSION_STRING},
          {"libtorch", compat::torch_version()},
          {"cuda_build", compat::with_cuda},
          {"cuda_available", compat::cuda_available()},
          {"cuda_runtime", or_null(compat::with_cuda ? compat::cuda_runtime_version() : "")},
          {"cudnn", or_null(compat::with_cuda ? compat::cudnn_version() : "")},
          {"nccl", or_null(compat::nccl_version())},
          {"gpus", gpus},
          // The profiler's kernel tracer (Kineto) is used in CUDA builds; CPU builds keep host timings only.
          {"kineto", compat::with_cuda},
          {"cairo_plots", plot::available},
#if defined(LIBREYOLO_WITH_RE2)
          {"re2", true},
#else
          {"re2", false},
#endif
          {"cpu_threads", std::thread::hardware_concurrency()},
          {"intra_op_threads", at::get_num_threads()},
          {"models", families::model_list(registered_families, false)}};
}

inline std::string checks_text(const nlohmann::json& d) {
  auto v = [&](const char* k, const char* none = "none") {
    const auto& x = d.at(k);
    return x.is_null() ? std::string(none) : x.is_string() ? x.get<std::string>() : x.dump();
  };
  std::string s;
  s += "libreyolo      " + v("libreyolo") + "\n";
  s += "LibTorch       " + v("libtorch") + (d["cuda_build"].get<bool>() ? " (CUDA build)" : " (CPU build)") + "\n";
  s += "CUDA           " + (d["cuda_build"].get<bool>() ? v("cuda_runtime", "unknown") + (d["cuda_available"].get<bool>() ? "" : " (no device visible)")
                                                        : std::string("not in this build")) + "\n";
  s += "cuDNN          " + v("cudnn") + "\n";
  s += "NCCL           " + v("nccl") + "\n";
  if (d["gpus"].empty()) s += "GPU            none\n";
  for (size_t i = 0; i < d["gpus"].size(); ++i) {
    const auto& g = d["gpus"][i];
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", g["memory_gib"].get<double>());
    s += "GPU " + std::to_string(i) + "          " + g["name"].get<std::string>() + ", sm " + g["capability"].get<std::string>() +
         ", " + mem + ", bf16 " + (g["bf16"].get<bool>() ? "yes" : "no") + "\n";
  }
  s += "Kineto         " + std::string(d["kineto"].get<bool>() ? "yes (kernel traces in profile=true)" : "no (CPU build: the profiler keeps host timings)") + "\n";
  s += "plots (cairo)  " + std::string(d["cairo_plots"].get<bool>() ? "yes" : "no (libcairo2-dev at build time)") + "\n";
  s += "RE2            " + std::string(d["re2"].get<bool>() ? "yes" : "no (profile kernels --grep takes plain text)") + "\n";
  s += "CPU threads    " + v("cpu_threads") + " (LibTorch intra-op " + v("intra_op_threads") + ")\n";
  s += "models         " + d["models"].get<std::string>() + "\n";
  return s;
}

}  // namespace libreyolo::cli
