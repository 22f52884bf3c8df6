#pragma once
// The semantic families' cross-check against a Python transcription of the original's forward
// (tests/<family>/ref_<family>.py): the network's tensors under a deterministic fill, written by name for
// the script to load strictly (so the names are checked too), the eval forward of both compared.
#include <libreyolo/core/error.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "support_prereq.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace lry_test {

// A python3 that can import torch and numpy ("" = none): Need::python_torch (support_prereq.hpp).
inline std::string semantic_python() { return python_with_torch(); }

// Overwrites every parameter and the BatchNorm statistics with seeded values that exercise every path
// (non-zero biases, LayerNorm scales near 1, LayerScale gammas of 0.3, positive variances).
inline void semantic_fill(torch::nn::Module& net, uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& kv : net.named_parameters()) {
    auto& p = kv.value();
    const auto& n = kv.key();
    auto r = at::normal(0.0, 1.0, p.sizes(), gen);
    if (n.size() >= 5 && n.compare(n.size() - 5, 5, "gamma") == 0) p.copy_(0.3 + 0.05 * r);
    else if (p.dim() == 1 && n.size() >= 6 && n.compare(n.size() - 6, 6, "weight") == 0) p.copy_(1.0 + 0.1 * r);
    else p.copy_(0.05 * r);
  }
  for (auto& kv : net.named_buffers()) {
    const auto& n = kv.key();
    auto& b = kv.value();
    if (n.find("running_var") != std::string::npos) b.copy_(at::rand(b.sizes(), gen) + 0.5);
    else if (n.find("running_mean") != std::string::npos) b.copy_(0.1 * at::normal(0.0, 1.0, b.sizes(), gen));
  }
}

// Runs `script` on the network's tensors and x; returns its output (float32 of `out_shape`).
inline torch::Tensor semantic_reference(torch::nn::Module& net, const torch::Tensor& x, const std::filesystem::path& script,
                                        const std::string& size, int64_t nc, const std::filesystem::path& dir,
                                        std::vector<int64_t> out_shape, const std::string& python) {
  std::filesystem::create_directories(dir);
  nlohmann::json meta{{"names", nlohmann::json::array()}, {"shapes", nlohmann::json::array()}, {"input", x.sizes().vec()}};
  std::ofstream params(dir / "params.bin", std::ios::binary);
  auto put = [&](const std::string& name, const torch::Tensor& t) {
    meta["names"].push_back(name);
    meta["shapes"].push_back(t.sizes().vec());
    auto f = t.detach().to(torch::kFloat32).contiguous();
    params.write(reinterpret_cast<const char*>(f.data_ptr<float>()), static_cast<std::streamsize>(f.numel() * 4));
  };
  for (auto& kv : net.named_parameters()) put(kv.key(), kv.value());
  for (auto& kv : net.named_buffers()) put(kv.key(), kv.value());
  params.close();
  std::ofstream(dir / "meta.json") << meta.dump();
  auto xf = x.contiguous();
  std::ofstream(dir / "x.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(xf.data_ptr<float>()), static_cast<std::streamsize>(xf.numel() * 4));
  const std::string cmd = python + " " + script.string() + " " + dir.string() + " " + size + " " + std::to_string(nc) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) throw libreyolo::Error("reference script failed: " + cmd);
  std::ifstream in(dir / "out.bin", std::ios::binary);
  auto out = torch::empty(out_shape, torch::kFloat32);
  in.read(reinterpret_cast<char*>(out.data_ptr<float>()), static_cast<std::streamsize>(out.numel() * 4));
  if (in.gcount() != out.numel() * 4) throw libreyolo::Error("reference output has the wrong size (" + std::to_string(in.gcount()) + " bytes)");
  return out;
}

}  // namespace lry_test
