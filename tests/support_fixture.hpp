#pragma once
// Architecture fixtures of the Python original (shared/fixtures/libreyolo/<model>/, see its README.md):
// keys.tsv (every state_dict entry in order, with shape), config.json (parameter counts), ref.json +
// ref.bin (the input, every direct child module's output and the eval output under a deterministic
// weight fill). This harness, shared by every family's fixture test:
//   - opens a fixture folder (Fixture::open; empty optional when the fixtures are not checked out),
//   - lists name / shape / dtype differences between a module's named_parameters() + named_buffers()
//     and keys.tsv (name_differences),
//   - applies the deterministic fill to a module by name, in keys.tsv order (fill),
//   - builds the deterministic input (input),
//   - compares our tensors with the references, naming the first that differs (compare, compare_all).
#include "support_prereq.hpp"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace lry_test::fixture {

// shared/fixtures/libreyolo next to the worktree (tests get LIBREYOLO_SOURCE_DIR).
inline std::filesystem::path root() { return lry_test::fixtures_root(); }
// The repository's own fixtures, in the same format (made by scripts/fixtures/make_fixture.py), for
// models the shared folder lacks: Fixture::open looks here when root()/<model> does not exist.
inline std::filesystem::path repo_root() { return std::filesystem::path(LIBREYOLO_SOURCE_DIR "/tests/fixtures/libreyolo"); }

// One row of keys.tsv.
struct Key {
  std::string name;
  std::string kind;            // param | bn_stat | buffer
  std::vector<int64_t> shape;  // empty for a scalar
  std::string dtype;           // float32, int64, ...
  int64_t numel = 0;
};

// One entry of ref.json's "tensors".
struct Ref {
  std::vector<int64_t> shape;
  int64_t offset = 0, count = 0, stride = 1;  // into ref.bin, in float32 elements; flat[::stride]
  double sum = 0, abs_sum = 0;                // over all elements, float64
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
inline std::string shape_str(torch::IntArrayRef s) { return shape_str(std::vector<int64_t>(s.begin(), s.end())); }

inline std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    case torch::kBool: return "bool";
    case torch::kUInt8: return "uint8";
    default: return c10::toString(t);
  }
}

// The result of one comparison: ok, and a readable line either way.
struct Comparison {
  bool ok = false;
  std::string message;
  double rel_max_diff = 0;  // max |ours - ref| / mean |ref| over the stored elements
};

class Fixture {
 public:
  std::string model;  // folder name, e.g. yolo9-t
  std::filesystem::path dir;
  std::vector<Key> keys;
  nlohmann::json config;
  nlohmann::json ref_json;
  std::map<std::string, Ref> refs;
  std::vector<std::string> ref_order;  // ref.json's order
  int64_t imgsz = 0;
  bool has_outputs = true;  // ref.json + ref.bin present

  // The fixture folder root()/model (else repo_root()/model), or nothing when neither exists (the caller
  // skips). A folder that exists but is malformed throws std::runtime_error naming the file and line.
  static std::optional<Fixture> open(const std::string& model) {
    auto dir = root() / model;
    if (!std::filesystem::is_directory(dir)) dir = repo_root() / model;
    if (!std::filesystem::is_directory(dir)) return std::nullopt;
    Fixture f;
    f.model = model;
    f.dir = dir;
    f.read_keys(dir / "keys.tsv");
    f.config = read_json(dir / "config.json");
    // A fixture the original could not run (deimv2-l / -x: NaN under the fill) has no ref.* files:
    // has_outputs false, no refs.
    f.has_outputs = std::filesystem::exists(dir / "ref.json");
    if (!f.has_outputs) return f;
    f.ref_json = read_json(dir / "ref.json");
    f.read_refs();
    f.read_bin(dir / "ref.bin");
    return f;
  }

  const Key* key(const std::string& name) const {
    for (const auto& k : keys)
      if (k.name == name) return &k;
    return nullptr;
  }
  bool has_ref(const std::string& name) const { return refs.count(name) != 0; }
  const Ref& ref(const std::string& name) const {
    auto it = refs.find(name);
    if (it == refs.end()) throw std::runtime_error(model + "/ref.json: no tensor '" + name + "'");
    return it->second;
  }
  // The stored elements of a reference tensor: flat[::stride] of its row-major flattening, 1-D float32.
  torch::Tensor stored(const std::string& name) const {
    const Ref& r = ref(name);
    return torch::from_blob(const_cast<float*>(bin_.data()) + r.offset, {r.count}, torch::kFloat32).clone();
  }
  // The whole reference tensor, in its shape (only when stored whole, stride 1).
  torch::Tensor full(const std::string& name) const {
    const Ref& r = ref(name);
    if (r.stride != 1) throw std::runtime_error(model + "/ref.json: '" + name + "' is stored with stride " +
                                                std::to_string(r.stride) + ", not whole");
    return stored(name).view(r.shape);
  }

  // x[j] = 0.5 + 0.5 * sin(0.1 * j), j = 0 .. 3*S*S-1, computed in float64 then cast, shape [1, 3, S, S].
  torch::Tensor input() const {
    auto j = torch::arange(3 * imgsz * imgsz, torch::kFloat64);
    return (0.5 + 0.5 * torch::sin(0.1 * j)).to(torch::kFloat32).view({1, 3, imgsz, imgsz});
  }

  int64_t n_params() const { return config.at("n_params").get<int64_t>(); }

 private:
  std::vector<float> bin_;

  static nlohmann::json read_json(const std::filesystem::path& p) {
    std::ifstream in(p);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    try {
      return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(p.string() + ": " + e.what());
    }
  }

  static std::vector<int64_t> parse_shape(const std::string& s, const std::string& where) {
    std::vector<int64_t> shape;
    if (s.empty()) return shape;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, 'x')) {
      try {
        size_t used = 0;
        shape.push_back(std::stoll(part, &used));
        if (used != part.size()) throw std::invalid_argument(part);
      } catch (const std::exception&) {
        throw std::runtime_error(where + ": bad shape '" + s + "' (expected AxBxC)");
      }
    }
    return shape;
  }

  void read_keys(const std::filesystem::path& p) {
    std::ifstream in(p);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (lineno == 1) {
        if (line.rfind("name\tkind\tshape", 0) != 0)
          throw std::runtime_error(p.string() + ":1: expected the header 'name<TAB>kind<TAB>shape<TAB>dtype<TAB>numel'");
        continue;
      }
      if (line.empty()) continue;
      std::vector<std::string> cols;
      size_t start = 0;
      for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
        cols.push_back(line.substr(start, tab - start));
      cols.push_back(line.substr(start));
      const std::string where = p.string() + ":" + std::to_string(lineno);
      if (cols.size() != 5) throw std::runtime_error(where + ": expected 5 tab-separated columns, got " + std::to_string(cols.size()));
      Key k{cols[0], cols[1], parse_shape(cols[2], where), cols[3], 0};
      k.numel = std::stoll(cols[4]);
      if (k.kind != "param" && k.kind != "bn_stat" && k.kind != "buffer")
        throw std::runtime_error(where + ": kind '" + k.kind + "' is not param, bn_stat or buffer");
      keys.push_back(std::move(k));
    }
  }

  void read_refs() {
    imgsz = ref_json.at("imgsz").get<int64_t>();
    for (const auto& [name, t] : ref_json.at("tensors").items()) {
      Ref r;
      r.shape = t.at("shape").get<std::vector<int64_t>>();
      r.offset = t.at("offset").get<int64_t>();
      r.count = t.at("count").get<int64_t>();
      r.stride = t.at("stride").get<int64_t>();
      r.sum = t.at("sum").get<double>();
      r.abs_sum = t.at("abs_sum").get<double>();
      const int64_t expect = (r.numel() + r.stride - 1) / r.stride;
      if (r.count != expect)
        throw std::runtime_error(model + "/ref.json: '" + name + "' has count " + std::to_string(r.count) + ", but " +
                                 shape_str(r.shape) + " with stride " + std::to_string(r.stride) + " stores " +
                                 std::to_string(expect));
      refs[name] = r;
      ref_order.push_back(name);
    }
  }

  void read_bin(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + p.string());
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() % 4 != 0) throw std::runtime_error(p.string() + ": size " + std::to_string(bytes.size()) + " is not a multiple of 4");
    bin_.resize(bytes.size() / 4);
    for (size_t i = 0; i < bin_.size(); ++i) {  // little-endian float32, whatever the host's order
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<uint8_t>(bytes[4 * i + static_cast<size_t>(b)]);
      std::memcpy(&bin_[i], &u, 4);
    }
    for (const auto& [name, r] : refs)
      if (r.offset < 0 || r.offset + r.count > static_cast<int64_t>(bin_.size()))
        throw std::runtime_error(p.string() + ": '" + name + "' (offset " + std::to_string(r.offset) + ", count " +
                                 std::to_string(r.count) + ") lies past the end (" + std::to_string(bin_.size()) + " floats)");
  }
};

// Our named_parameters() + named_buffers(), by name.
inline std::map<std::string, torch::Tensor> named_state(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value();
  return out;
}

inline int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Differences between the module's parameters + buffers and keys.tsv, one line each ("missing: name
// [shape]" = in keys.tsv, not ours; "unexpected: ..." = ours only; "shape: ..." / "dtype: ..." =
// both, differing). Empty when the two are the same set with the same shapes and dtypes.
inline std::vector<std::string> name_differences(const Fixture& f, torch::nn::Module& m) {
  auto ours = named_state(m);
  std::vector<std::string> diffs;
  std::map<std::string, const Key*> theirs;
  for (const auto& k : f.keys) theirs[k.name] = &k;
  for (const auto& k : f.keys) {
    auto it = ours.find(k.name);
    if (it == ours.end()) {
      diffs.push_back("missing: " + k.name + " " + shape_str(k.shape) + " " + k.dtype);
      continue;
    }
    const auto& t = it->second;
    if (std::vector<int64_t>(t.sizes().begin(), t.sizes().end()) != k.shape)
      diffs.push_back("shape: " + k.name + " ours " + shape_str(t.sizes()) + ", original " + shape_str(k.shape));
    if (dtype_name(t.scalar_type()) != k.dtype)
      diffs.push_back("dtype: " + k.name + " ours " + dtype_name(t.scalar_type()) + ", original " + k.dtype);
  }
  for (const auto& [name, t] : ours)
    if (!theirs.count(name)) diffs.push_back("unexpected: " + name + " " + shape_str(t.sizes()) + " " + dtype_name(t.scalar_type()));
  return diffs;
}

inline std::string join_lines(const std::vector<std::string>& lines, size_t max_lines = 60) {
  std::string out;
  for (size_t i = 0; i < lines.size() && i < max_lines; ++i) out += "  " + lines[i] + "\n";
  if (lines.size() > max_lines) out += "  ... and " + std::to_string(lines.size() - max_lines) + " more\n";
  return out;
}

// The deterministic fill of the README, by name in keys.tsv order (k = the entry's index, every entry
// counted): s = sin(0.37 i + 1.3 k) in float64, cast to the tensor's dtype;
//   parameter with dim >= 2: s / sqrt(numel / shape[0]); 1-D parameter named *weight: 1 + 0.1 s;
//   other parameter: 0.02 s; buffer *running_mean: 0.05 s; *running_var: 1 + 0.25 |s|;
//   every other buffer (num_batches_tracked, ...) and every non-float tensor: untouched.
// Throws std::runtime_error when a keys.tsv name that the fill writes is not in the module (run
// name_differences first for the whole list). Returns the number of tensors written.
inline int64_t fill(const Fixture& f, torch::nn::Module& m) {
  auto ours = named_state(m);
  torch::NoGradGuard no_grad;
  int64_t written = 0;
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (size_t k = 0; k < f.keys.size(); ++k) {
    const Key& key = f.keys[k];
    const bool param = key.kind == "param";
    const bool mean = !param && ends_with(key.name, "running_mean");
    const bool var = !param && ends_with(key.name, "running_var");
    if (!param && !mean && !var) continue;
    auto it = ours.find(key.name);
    if (it == ours.end()) throw std::runtime_error(f.model + ": fill: the module has no '" + key.name + "'");
    auto& t = it->second;
    if (!t.is_floating_point()) continue;
    auto i = torch::arange(t.numel(), torch::kFloat64);
    auto s = torch::sin(0.37 * i + 1.3 * static_cast<double>(k));
    torch::Tensor v;
    if (param && t.dim() >= 2)
      v = s / std::sqrt(static_cast<double>(t.numel()) / static_cast<double>(t.size(0)));
    else if (param && t.dim() == 1 && ends_with(key.name, "weight"))
      v = 1.0 + 0.1 * s;
    else if (param)
      v = 0.02 * s;
    else if (mean)
      v = 0.05 * s;
    else
      v = 1.0 + 0.25 * s.abs();
    t.copy_(v.to(t.scalar_type()).view(t.sizes()));
    ++written;
  }
  return written;
}

// Compares `ours` with the reference `name`: shapes equal; over the stored elements (flat[::stride])
// max |ours - ref| / mean|ref| <= tol (mean|ref| = abs_sum / numel of the whole tensor); and the sums
// over all elements: |sum - ref.sum| and |abs_sum - ref.abs_sum| <= tol · ref.abs_sum.
inline Comparison compare(const Fixture& f, const std::string& name, const torch::Tensor& ours, double tol = 1e-4) {
  Comparison c;
  if (!f.has_ref(name)) {
    c.message = name + ": no such reference in " + f.model + "/ref.json";
    return c;
  }
  const Ref& r = f.ref(name);
  if (std::vector<int64_t>(ours.sizes().begin(), ours.sizes().end()) != r.shape) {
    c.message = name + ": shape ours " + shape_str(ours.sizes()) + ", original " + shape_str(r.shape);
    return c;
  }
  auto flat = ours.detach().to(torch::kCPU, torch::kFloat64).contiguous().view(-1);
  auto picked = flat.slice(0, 0, flat.numel(), r.stride);
  auto ref = f.stored(name).to(torch::kFloat64);
  const double scale = std::max(r.abs_sum / static_cast<double>(r.numel()), 1e-30);
  const double max_diff = (picked - ref).abs().max().item<double>();
  const auto arg = (picked - ref).abs().argmax().item<int64_t>();
  c.rel_max_diff = max_diff / scale;
  const double sum = flat.sum().item<double>(), abs_sum = flat.abs().sum().item<double>();
  const double sum_err = std::abs(sum - r.sum) / std::max(r.abs_sum, 1e-30);
  const double abs_err = std::abs(abs_sum - r.abs_sum) / std::max(r.abs_sum, 1e-30);
  std::ostringstream os;
  os << name << " " << shape_str(r.shape) << ": max|diff|/mean|ref| = " << c.rel_max_diff << " (at flat index "
     << arg * r.stride << ": ours " << picked[arg].item<double>() << ", original " << ref[arg].item<double>()
     << "), sum ours " << sum << " vs " << r.sum << ", abs_sum ours " << abs_sum << " vs " << r.abs_sum;
  c.ok = c.rel_max_diff <= tol && sum_err <= tol && abs_err <= tol;
  c.message = (c.ok ? "ok   " : "DIFF ") + os.str();
  return c;
}

// Compares every (name, tensor) in order; the result names the first mismatch (ok when none), and
// `report` gets one line per tensor.
inline Comparison compare_all(const Fixture& f, const std::vector<std::pair<std::string, torch::Tensor>>& ours,
                              std::string* report = nullptr, double tol = 1e-4) {
  Comparison first_bad;
  bool any_bad = false;
  double worst = 0;
  for (const auto& [name, t] : ours) {
    auto c = compare(f, name, t, tol);
    if (report) *report += c.message + "\n";
    worst = std::max(worst, c.rel_max_diff);
    if (!c.ok && !any_bad) {
      first_bad = c;
      any_bad = true;
    }
  }
  if (any_bad) {
    first_bad.message = "first mismatch: " + first_bad.message;
    return first_bad;
  }
  Comparison ok;
  ok.ok = true;
  ok.rel_max_diff = worst;
  std::ostringstream os;
  os << "all " << ours.size() << " tensors match (worst max|diff|/mean|ref| = " << worst << ")";
  ok.message = os.str();
  return ok;
}

}  // namespace lry_test::fixture

// Inside a test case registered with lry_test::needs({lry_test::Need::fixtures}): open fixture `model`
// into `var`. Without the fixtures the case was skipped (locally) or fails naming them (CI); a missing
// model folder inside present fixtures is a failure naming the folder.
#define LRY_OPEN_FIXTURE(var, model)                                                                     \
  LRY_NEED(lry_test::Need::fixtures);                                                                    \
  auto var##_opt = lry_test::fixture::Fixture::open(model);                                              \
  REQUIRE_MESSAGE(var##_opt.has_value(),                                                                 \
                  "the fixture folder " << (lry_test::fixture::root() / (model)).string() << " is missing"); \
  const lry_test::fixture::Fixture& var = *var##_opt
