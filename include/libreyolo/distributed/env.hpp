#pragma once
// The torchrun-compatible environment of one data-parallel process: RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT. Read once; a present but malformed variable is a SetupError naming it.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo::dist {

struct Env {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool is_main() const { return rank == 0; }
};

namespace detail {
inline std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}
inline int env_int(const char* name, int fallback, int lo, int hi) {
  auto v = env_value(name);
  if (!v) return fallback;
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v->size() || x < lo || x > hi)
    throw SetupError(std::string("environment: ") + name + "=" + *v + " is invalid; allowed: an integer in [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}
}  // namespace detail

// True when the process was started as one rank of several (WORLD_SIZE > 1).
inline bool launched_distributed() { return detail::env_int("WORLD_SIZE", 1, 1, 1 << 20) > 1; }

inline Env env_from_environment() {
  Env e;
  e.world_size = detail::env_int("WORLD_SIZE", 1, 1, 1 << 20);
  e.rank = detail::env_int("RANK", 0, 0, e.world_size - 1);
  e.local_rank = detail::env_int("LOCAL_RANK", e.rank, 0, e.world_size - 1);
  e.master_addr = detail::env_value("MASTER_ADDR").value_or(e.master_addr);
  e.master_port = detail::env_int("MASTER_PORT", e.master_port, 1, 65535);
  if (e.world_size > 1 && !detail::env_value("RANK"))
    throw SetupError("environment: WORLD_SIZE=" + std::to_string(e.world_size) +
                     " but RANK is not set; a launcher (torchrun, or libreyolo train nproc=N) sets both");
  return e;
}

// The device key as one rank sees it: a list "0,1,2,3" gives rank `local_rank` its entry; "cuda" (or
// empty, meaning CUDA when present) gives cuda:<local_rank>, one GPU per process; anything else
// (cpu, cuda:N, N) is taken as written.
inline std::string rank_device_spec(const std::string& spec, int local_rank, bool cuda_present) {
  if (const auto items = device_list(spec); items.size() > 1) {
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t j = i + 1; j < items.size(); ++j)
        if (items[i] == items[j])
          throw SetupError("device=" + spec + " lists device " + items[i] + " twice; NCCL runs one process per GPU");
    if (local_rank >= static_cast<int>(items.size()))
      throw SetupError("device=" + spec + " lists " + std::to_string(items.size()) + " devices but this is local rank " +
                       std::to_string(local_rank) + "; list one device per process");
    return items[static_cast<size_t>(local_rank)];
  }
  if (spec == "cuda" || (spec.empty() && cuda_present)) return "cuda:" + std::to_string(local_rank);
  return spec;
}

// Number of entries of a device list ("0,1,2,3" -> 4); 1 for a single device.
inline int device_list_size(const std::string& spec) { return static_cast<int>(device_list(spec).size()); }

}  // namespace libreyolo::dist
