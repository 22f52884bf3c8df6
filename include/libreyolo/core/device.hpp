#pragma once
// Device selection from the `device` key: "" = CUDA when available, else CPU.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>

#include <string>

namespace libreyolo {

inline torch::Device resolve_device(const std::string& spec) {
  if (spec.empty()) return compat::cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (spec == "cpu") return torch::kCPU;
  int index = 0;
  if (spec == "cuda") index = 0;
  else if (spec.rfind("cuda:", 0) == 0) index = std::stoi(spec.substr(5));
  else if (spec.find(',') != std::string::npos)
    throw SetupError("device=" + spec + ": a device list trains data-parallel, one process per GPU, started by "
                     "`libreyolo train ... device=" + spec + "` (or torchrun); a single trainer takes one device");
  else index = std::stoi(spec);
  if (!compat::cuda_available())
    throw SetupError("device=" + spec + ": CUDA is not available in this build (LibTorch " + compat::torch_version() +
                     (compat::with_cuda ? ", no CUDA device visible" : ", CPU-only") + "); use device=cpu");
  if (index >= static_cast<int>(torch::cuda::device_count()))
    throw SetupError("device=" + spec + ": only " + std::to_string(torch::cuda::device_count()) + " CUDA device(s) visible");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

inline std::string device_name(const torch::Device& d) {
  return d.is_cuda() ? "cuda:" + std::to_string(compat::device_index(d)) : "cpu";
}

}  // namespace libreyolo
