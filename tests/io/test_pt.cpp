// torch.save checkpoints: reading the original's real files, the small hand-made files under
// tests/data/pt/ (values, shared storages, views; hostile and broken files), writing (round trip here
// and through Python's torch.load), to_json, state_dict and load_state_dict_strict.
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/io/pt_archive.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"
#include "io/io_support.hpp"

namespace io = libreyolo::io;
namespace fs = std::filesystem;
using libreyolo::CheckpointError;
using io::PyValue;

namespace {

const std::string kPtData = LIBREYOLO_SOURCE_DIR "/tests/data/pt/";
const std::string kShared = LIBREYOLO_SOURCE_DIR "/../shared/fixtures/libreyolo/";
const std::string kCkpt = kShared + "yolo9-t-trained/ly9t_ckpt.pt";
const std::string kRef = kShared + "yolo9-t-trained/ly9t_ref.pt";
const std::string kRefTxt = kShared + "yolo9-t-trained/ly9t_ref.txt";
const std::string kKeys = kShared + "yolo9-t/keys.tsv";

// Inside a case registered with lry_test::needs({lry_test::Need::fixtures}): the fixture files are there.
void require_files(std::initializer_list<std::string> files) {
  LRY_NEED(lry_test::Need::fixtures);
  for (const auto& p : files) REQUIRE_MESSAGE(fs::exists(p), "the fixture file " << p << " is missing");
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<int64_t> shape_of(const std::string& s, char sep) {
  std::vector<int64_t> r;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, sep))
    if (!tok.empty()) r.push_back(std::stoll(tok));
  return r;
}

// Deep equality of two values (tensors: same dtype, shape and elements).
bool same(const PyValue& a, const PyValue& b) {
  if (a.kind() != b.kind()) return false;
  using K = PyValue::Kind;
  switch (a.kind()) {
    case K::None: return true;
    case K::Bool: return a.as_bool() == b.as_bool();
    case K::Int: return a.as_int() == b.as_int();
    case K::Float: return a.as_float() == b.as_float();
    case K::String: return a.as_string() == b.as_string();
    case K::Bytes: return a.as_bytes() == b.as_bytes();
    case K::Tensor:
      return a.as_tensor().scalar_type() == b.as_tensor().scalar_type() && a.as_tensor().sizes() == b.as_tensor().sizes() &&
             torch::equal(a.as_tensor(), b.as_tensor());
    case K::Unsupported: return a.unsupported_what() == b.unsupported_what();
    case K::List:
    case K::Tuple:
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i])) return false;
      return true;
    case K::Dict:
      if (a.size() != b.size() || a.ordered() != b.ordered()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        const auto& [ka, va] = a.dict_items()[i];
        const auto& [kb, vb] = b.dict_items()[i];
        if (!same(ka, kb) || !same(va, vb)) return false;
      }
      return true;
  }
  return false;
}


}  // namespace

// ---- the original's files ------------------------------------------------------------------------

TEST_CASE("pt: reads LibreYOLO's trained YOLOv9-t checkpoint: state dict against keys.tsv, metadata" * lry_test::needs({lry_test::Need::fixtures})) {
  require_files({kCkpt, kKeys});
  std::vector<std::string> warnings;
  const PyValue ck = io::read_pt(kCkpt, &warnings);
  CHECK(warnings.empty());
  REQUIRE(ck.is_dict());
  CHECK(ck.size() == 22);

  const auto sd = io::state_dict(ck, "model", kCkpt);
  REQUIRE(sd.size() == 1338);
  CHECK(ck.at("model").ordered());
  // keys.tsv is YOLOv9-t built with nc 80; this checkpoint has nc 8, so only the class tower differs.
  std::ifstream tsv(kKeys);
  std::string line;
  std::getline(tsv, line);  // header
  size_t i = 0, differing = 0;
  while (std::getline(tsv, line)) {
    std::stringstream ss(line);
    std::string name, kind, shape, dtype;
    std::getline(ss, name, '\t');
    std::getline(ss, kind, '\t');
    std::getline(ss, shape, '\t');
    std::getline(ss, dtype, '\t');
    REQUIRE(i < sd.size());
    CHECK(sd[i].first == name);
    CHECK(io::dtype_name(sd[i].second.scalar_type()) == dtype);
    const auto want = shape_of(shape, 'x');
    if (sd[i].second.sizes().vec() != want) {
      ++differing;
      CHECK_MESSAGE(name.rfind("head.cv3.", 0) == 0, name);
      CHECK(sd[i].second.dim() == static_cast<int64_t>(want.size()));
    }
    ++i;
  }
  CHECK(i == 1338);
  CHECK(differing == 36);  // the 3 class towers' convs, BNs and 1x1 outputs (80 -> 64 wide, 80 -> 8 out)
  std::map<std::string, torch::Tensor> by_name(sd.begin(), sd.end());
  CHECK(by_name.at("head.cv3.0.2.weight").sizes() == torch::IntArrayRef({8, 64, 1, 1}));
  CHECK(by_name.at("head.cv3.2.2.bias").sizes() == torch::IntArrayRef({8}));
  // Values (reference sums computed with Python's torch.load of the same file).
  CHECK(by_name.at("backbone.conv0.conv.weight").to(torch::kDouble).sum().item<double>() ==
        doctest::Approx(-8.396550923585892).epsilon(1e-9));
  CHECK(by_name.at("head.cv3.0.2.bias").to(torch::kDouble).sum().item<double>() ==
        doctest::Approx(-75.07490825653076).epsilon(1e-9));
  CHECK((by_name.at("backbone.conv0.bn.num_batches_tracked").scalar_type() == torch::kLong));

  // 'ema' is the same state dict; in the file both name the same storage records.
  const auto ema = io::state_dict(ck, "ema", kCkpt);
  REQUIRE(ema.size() == sd.size());
  size_t shared = 0;
  for (size_t k = 0; k < sd.size(); ++k) {
    CHECK(ema[k].first == sd[k].first);
    shared += ema[k].second.data_ptr() == sd[k].second.data_ptr();
  }
  CHECK(shared == sd.size());

  CHECK(ck.at("best_mAP50_95").as_float() == doctest::Approx(0.5150201995647421).epsilon(1e-15));
  CHECK(ck.at("loss").as_float() == doctest::Approx(4.585206824541092).epsilon(1e-15));
  CHECK(ck.at("model_family").as_string() == "yolo9");
  CHECK(ck.at("size").as_string() == "t");
  CHECK(ck.at("task").as_string() == "detect");
  CHECK(ck.at("nc").as_int() == 8);
  CHECK(ck.at("imgsz").as_int() == 640);
  CHECK(ck.at("epoch").as_int() == 9);
  CHECK(ck.at("ema_updates").as_int() == 400);
  CHECK(ck.at("is_ema_weights").as_bool());
  const PyValue& names = ck.at("names");
  REQUIRE(names.size() == 8);
  for (const auto& [k, v] : names.dict_items()) CHECK(k.is_int());
  CHECK(names.find(int64_t{0})->as_string() == "circle");
  CHECK(names.find(int64_t{7})->as_string() == "diamond");
  const PyValue& cfg = ck.at("config");
  CHECK(cfg.size() == 48);
  CHECK(cfg.at("data_dir").is_none());
  CHECK(cfg.at("mosaic_scale").is_list());
  CHECK(cfg.at("mosaic_scale")[1].as_float() == 1.5);
  CHECK(cfg.at("lr0").as_float() == 0.01);
  CHECK(cfg.at("nesterov").as_bool());

  const auto j = io::to_json(ck);
  CHECK(j.at("names").at("3") == "star");
  CHECK(j.at("model").at("backbone.conv0.conv.weight") == "<tensor float32 [16, 3, 3, 3]>");
  CHECK(j.at("config").at("momentum") == 0.937);
}

TEST_CASE("pt: reads the reference outputs file; shapes and statistics match ly9t_ref.txt" * lry_test::needs({lry_test::Need::fixtures})) {
  require_files({kRef, kRefTxt});
  const PyValue ref = io::read_pt(kRef);
  CHECK(ref.at("input").as_tensor().sizes() == torch::IntArrayRef({2, 3, 320, 320}));
  const PyValue& outs = ref.at("outputs");
  // ly9t_ref.txt: "<name>: shape [a, b, ...] float32" then "    stats: mean m, std s, min a, max b".
  std::ifstream txt(kRefTxt);
  std::string line, name;
  std::vector<int64_t> shape;
  int checked = 0;
  while (std::getline(txt, line)) {
    const auto sp = line.find(": shape [");
    if (sp != std::string::npos && line[0] != ' ') {
      name = line.substr(0, sp);
      const auto a = sp + 9, b = line.find(']', a);
      std::string dims = line.substr(a, b - a);
      dims.erase(std::remove(dims.begin(), dims.end(), ' '), dims.end());
      shape = shape_of(dims, ',');
      continue;
    }
    const auto st = line.find("stats: mean ");
    if (st == std::string::npos || name.empty()) continue;
    double mean, stdv, mn, mx;
    REQUIRE(std::sscanf(line.c_str() + st, "stats: mean %lf, std %lf, min %lf, max %lf", &mean, &stdv, &mn, &mx) == 4);
    CAPTURE(name);
    const PyValue* v = outs.find(name);
    REQUIRE(v != nullptr);
    const torch::Tensor t = v->as_tensor().to(torch::kDouble);
    CHECK(t.sizes().vec() == shape);
    // The text rounds to 6 significant digits.
    auto close = [](double got, double want) { return std::fabs(got - want) <= 1e-5 * std::fabs(want) + 1e-6; };
    CHECK_MESSAGE(close(t.mean().item<double>(), mean), t.mean().item<double>() << " vs " << mean);
    CHECK_MESSAGE(close(t.std().item<double>(), stdv), t.std().item<double>() << " vs " << stdv);
    CHECK(close(t.min().item<double>(), mn));
    CHECK(close(t.max().item<double>(), mx));
    ++checked;
    name.clear();
  }
  CHECK(checked == 7);
}

TEST_CASE("pt: module_state_dict lists a module in PyTorch's state_dict order (YOLOv9-t against keys.tsv)" * lry_test::needs({lry_test::Need::fixtures})) {
  require_files({kKeys});
  libreyolo::families::yolo9::Yolo9 net(libreyolo::families::yolo9::Yolo9Options{"t", 80, 16});
  const auto sd = io::module_state_dict(*net);
  std::ifstream tsv(kKeys);
  std::string line;
  std::getline(tsv, line);
  size_t i = 0;
  while (std::getline(tsv, line)) {
    std::stringstream ss(line);
    std::string name, kind, shape;
    std::getline(ss, name, '\t');
    std::getline(ss, kind, '\t');
    std::getline(ss, shape, '\t');
    REQUIRE(i < sd.size());
    CHECK(sd[i].first == name);
    CHECK(sd[i].second.sizes().vec() == shape_of(shape, 'x'));
    ++i;
  }
  CHECK(i == sd.size());

  // Written and read back, it loads strictly into a fresh network.
  lry_test::TempDir dir("lry_pt");
  PyValue ck = PyValue::dict();
  ck.set("model", PyValue::state_dict(sd));
  io::write_pt((dir / "net.pt").string(), ck);
  libreyolo::families::yolo9::Yolo9 other(libreyolo::families::yolo9::Yolo9Options{"t", 80, 16});
  torch::NoGradGuard ng;
  for (auto& p : other->parameters()) p.zero_();
  CHECK(io::load_state_dict_strict(*other, io::state_dict(io::read_pt((dir / "net.pt").string()), "model"), "net.pt") == sd.size());
  const auto back = io::module_state_dict(*other);
  for (size_t k = 0; k < sd.size(); ++k) CHECK(torch::equal(back[k].second, sd[k].second));
}

TEST_CASE("pt: the original's checkpoint loads strictly into the C++ YOLOv9-t and reproduces its head outputs" * lry_test::needs({lry_test::Need::fixtures})) {
  require_files({kCkpt, kRef});
  const PyValue ck = io::read_pt(kCkpt);
  libreyolo::families::yolo9::Yolo9 net(libreyolo::families::yolo9::Yolo9Options{"t", ck.at("nc").as_int(), 16});
  CHECK(io::load_state_dict_strict(*net, io::state_dict(ck, "model", kCkpt), kCkpt) == 1338);
  net->eval();
  const PyValue ref = io::read_pt(kRef);
  torch::NoGradGuard ng;
  const auto out = net->forward(ref.at("input").as_tensor());
  REQUIRE(out.size() == 3);
  for (size_t l = 0; l < 3; ++l) {
    const torch::Tensor want = ref.at("outputs").at("raw_outputs." + std::to_string(l)).as_tensor();
    REQUIRE(out[l].sizes() == want.sizes());
    const double scale = want.abs().mean().item<double>();
    const double err = (out[l] - want).abs().max().item<double>();
    CHECK_MESSAGE(err <= 1e-4 * scale, "level " << l << ": max |diff| " << err << ", mean |x| " << scale);
  }
}

// ---- the small files -----------------------------------------------------------------------------

TEST_CASE("pt: a small torch.save-layout file: values, shared storages, offsets, strides, numpy scalars, placeholders") {
  std::vector<std::string> warnings;
  const PyValue v = io::read_pt(kPtData + "tiny_ok.pt", &warnings);
  const auto sd = io::state_dict(v, "model", "tiny_ok.pt");
  REQUIRE(sd.size() == 6);
  std::map<std::string, torch::Tensor> t(sd.begin(), sd.end());
  CHECK(sd[0].first == "w");
  CHECK(torch::equal(t["w"], torch::arange(6, torch::kFloat).view({2, 3})));
  CHECK(torch::equal(t["w_t"], t["w"].t()));
  CHECK(t["w_t"].stride(0) == 1);
  CHECK(t["w_t"].stride(1) == 3);
  CHECK(torch::equal(t["row1"], torch::tensor({3.f, 4.f, 5.f})));
  CHECK(t["row1"].storage_offset() == 3);
  // The three views share one storage: writing through one shows in the others.
  CHECK(t["w"].data_ptr() == t["w_t"].data_ptr());
  t["w"][1][0].fill_(42.f);
  CHECK(t["row1"][0].item<float>() == 42.f);
  CHECK(t["w_t"][0][1].item<float>() == 42.f);
  CHECK((t["idx"].scalar_type() == torch::kLong));
  CHECK(torch::equal(t["idx"], torch::tensor({12, 13, 14, 15}, torch::kLong).view({2, 2})));
  CHECK((t["h"].scalar_type() == torch::kHalf));
  CHECK(torch::equal(t["h"].to(torch::kFloat), torch::tensor({0.5f, -2.f})));
  CHECK(t["scalar"].dim() == 0);
  CHECK(t["scalar"].item<int64_t>() == 15);

  CHECK(v.at("names").find(int64_t{1})->as_string() == "dog");
  CHECK(v.at("nc").as_int() == 2);
  CHECK(v.at("lr").as_float() == 0.01);
  CHECK(v.at("neg").as_int() == -123456789012LL);
  CHECK(v.at("flag").as_bool());
  CHECK(v.at("nothing").is_none());
  CHECK(v.at("tup").is_tuple());
  CHECK(v.at("tup")[1].as_string() == "x");
  CHECK(v.at("tup")[2].as_float() == 2.5);
  CHECK(v.at("raw").as_bytes() == std::string("\x00\xff\x10", 3));
  CHECK(v.at("np_f8").as_float() == 0.25);
  CHECK(v.at("np_i8").as_int() == -7);
  CHECK(v.at("np_f4").as_float() == 1.5);
  CHECK(v.at("config").at("nested").at("deep")[2].at("x").as_string() == "y");
  // A custom class instance and a 70-bit int are kept as placeholders, each with a warning naming it.
  CHECK(v.at("custom").is_unsupported());
  CHECK(v.at("custom").unsupported_what() == "mypkg.settings.Config object");
  CHECK(v.at("big").is_unsupported());
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].find("'big'") != std::string::npos);
  CHECK(warnings[1].find("'custom'") != std::string::npos);
  CHECK(warnings[1].find("mypkg.settings.Config") != std::string::npos);
  CHECK(warnings[1].find("tiny_ok.pt") != std::string::npos);

  // Without a warnings vector they go to the log.
  std::vector<std::string> logged;
  auto prev = libreyolo::log::set_sink([&](libreyolo::log::Level l, std::string_view m) {
    if (l == libreyolo::log::Level::warn) logged.emplace_back(m);
  });
  io::read_pt(kPtData + "tiny_ok.pt");
  libreyolo::log::set_sink(prev);
  CHECK(logged.size() == 2);

  // The same file re-zipped with deflate reads the same.
  std::vector<std::string> w3;
  const PyValue d = io::read_pt(kPtData + "deflated.pt", &w3);
  CHECK(torch::equal(d.at("model").at("w_t").as_tensor(), torch::arange(6, torch::kFloat).view({2, 3}).t()));
  CHECK(d.at("np_f8").as_float() == 0.25);
  CHECK(w3.size() == 2);

  // The same bytes from memory.
  const std::string bytes = slurp(kPtData + "tiny_ok.pt");
  std::vector<std::string> w2;
  io::PtReadOptions o;
  o.warnings = &w2;
  const PyValue m = io::read_pt_bytes(bytes.data(), bytes.size(), "mem.pt", o);
  CHECK(io::state_dict(m, "model").size() == 6);
  CHECK(w2.size() == 2);
}

TEST_CASE("pt: a file from Python's torch.save: Parameter, dtypes, shared views, numpy scalars, set, tuple keys") {
  // tests/data/pt/make_torch_files.py (torch 1.13).
  std::vector<std::string> warnings;
  const PyValue v = io::read_pt(kPtData + "torch_mixed.pt", &warnings);
  const auto sd = io::state_dict(v, "model", "torch_mixed.pt");
  REQUIRE(sd.size() == 9);
  std::map<std::string, torch::Tensor> t(sd.begin(), sd.end());
  CHECK(torch::equal(t["param"], torch::tensor({1.f, -2.f, 3.5f})));
  CHECK_FALSE(t["param"].requires_grad());
  CHECK(torch::equal(t["base"], torch::arange(12, torch::kFloat).view({3, 4})));
  CHECK(torch::equal(t["base_t"], t["base"].t()));
  CHECK(t["base_t"].data_ptr() == t["base"].data_ptr());
  CHECK(torch::equal(t["col2"], torch::tensor({2.f, 6.f, 10.f})));
  CHECK(t["col2"].storage_offset() == 2);
  CHECK(t["col2"].stride(0) == 4);
  CHECK((t["bf16"].scalar_type() == torch::kBFloat16));
  CHECK(torch::equal(t["bf16"].to(torch::kFloat), torch::tensor({1.5f, -0.25f})));
  CHECK((t["half"].scalar_type() == torch::kHalf));
  CHECK(t["half"].sizes() == torch::IntArrayRef({1, 2}));
  CHECK(torch::equal(t["i8"], torch::tensor({-128, 0, 127}, torch::kChar)));
  CHECK(torch::equal(t["mask"], torch::tensor({true, false})));
  CHECK(t["step"].dim() == 0);
  CHECK(t["step"].item<int64_t>() == 41);

  CHECK(v.at("np_float").as_float() == 0.125);
  CHECK(v.at("np_int").as_int() == -5);
  CHECK(v.at("np_array").is_unsupported());
  CHECK(v.at("device").is_unsupported());
  CHECK(v.at("dtype").unsupported_what() == "torch.float16");
  const PyValue& tags = v.at("tags");  // a set arrives as a list (in Python's iteration order)
  REQUIRE(tags.is_list());
  REQUIRE(tags.size() == 2);
  CHECK(((tags[0].as_string() == "a" && tags[1].as_string() == "b") || (tags[0].as_string() == "b" && tags[1].as_string() == "a")));
  const PyValue* pair = v.at("by_pair").find(PyValue::tuple({PyValue::integer(1), PyValue::string("x")}));
  REQUIRE(pair != nullptr);
  CHECK(pair->as_int() == 2);
  CHECK(v.at("nested")[1][1][1].is_none());
  REQUIRE(warnings.size() == 3);
  CHECK(warnings[0].find("'np_array' is numpy.core.multiarray._reconstruct(...)") != std::string::npos);
  CHECK(warnings[1].find("'device' is torch.device(...)") != std::string::npos);
  CHECK(warnings[2].find("'dtype' is the global torch.float16") != std::string::npos);
}

TEST_CASE("pt: hostile and broken files are refused with the file and the problem named") {
  auto msg = [](const std::string& f) {
    return lry_test::message_of<CheckpointError>([&] { io::read_pt(kPtData + f, nullptr); });
  };
  auto has = [](const std::string& m, const std::string& part) {
    INFO(m);
    CHECK(m.find(part) != std::string::npos);
  };
  std::string m = msg("evil_os_system.pt");
  has(m, "evil_os_system.pt");
  has(m, "'posix.system'");
  has(m, "refused");
  m = msg("evil_eval.pt");
  has(m, "'builtins.eval'");
  m = msg("not_zip.pt");
  has(m, "not_zip.pt");
  has(m, "not a zip archive");
  has(msg("legacy_pickle.pt"), "legacy (pre-1.6)");
  m = msg("truncated.pt");
  has(m, "truncated.pt");
  has(m, "truncated");
  m = msg("crc_flipped.pt");
  has(m, "CRC-32 mismatch in record 'tiny_ok/data/0'");
  has(msg("missing_record.pt"), "missing record 'missing_record/data/5'");
  m = msg("storage_too_small.pt");
  has(m, "storage too small");
  has(m, "size [4, 4]");
  has(m, "holds 6 float32 elements");
  has(msg("bad_opcode.pt"), "bad pickle opcode 0xff");
  has(msg("dup_case.pt"), "record 'dup_case/DATA.PKL' appears twice");
  has(msg("recursive.pt"), "contains itself");
  has(msg("bomb.pt"), "too many values");
  has(lry_test::message_of<CheckpointError>([] { io::read_pt(kPtData + "does_not_exist.pt"); }), "cannot open");

  // The CRC check is ours: with it off, the flipped byte reaches the tensor unnoticed (neither
  // LibTorch's stream reader nor miniz verify it).
  io::PtReadOptions no_crc;
  no_crc.verify_crc = false;
  std::vector<std::string> ignored;
  no_crc.warnings = &ignored;
  const PyValue flipped = io::read_pt(kPtData + "crc_flipped.pt", no_crc);
  const PyValue good = io::read_pt(kPtData + "tiny_ok.pt", no_crc);
  CHECK_FALSE(torch::equal(flipped.at("model").at("w").as_tensor(), good.at("model").at("w").as_tensor()));
  CHECK(torch::equal(flipped.at("model").at("idx").as_tensor(), good.at("model").at("idx").as_tensor()));
}

TEST_CASE("pt: every truncation and many corruptions of a file end in a CheckpointError or a value, nothing else") {
  const std::string good = slurp(kPtData + "tiny_ok.pt");
  REQUIRE(good.size() > 1000);
  io::PtReadOptions o;
  std::vector<std::string> w;
  o.warnings = &w;
  int refused = 0, read = 0;
  auto attempt = [&](const std::string& b) {
    try {
      io::read_pt_bytes(b, "x.pt", o);
      ++read;
    } catch (const CheckpointError&) {
      ++refused;
    }
  };
  for (size_t n = 0; n < good.size(); n += 5) attempt(good.substr(0, n));
  CHECK(read == 0);
  // Byte flips everywhere, CRC checks off so that corrupted pickles reach the unpickler.
  o.verify_crc = false;
  for (size_t p = 0; p < good.size(); p += 3) {
    std::string b = good;
    b[p] = static_cast<char>(b[p] ^ (p % 2 ? 0x01 : 0xA5));
    attempt(b);
  }
  CHECK(refused > 0);
  CHECK(read > 0);
}

// ---- writing -------------------------------------------------------------------------------------

namespace {
PyValue sample_checkpoint() {
  auto base = torch::arange(24, torch::kFloat).view({4, 6});
  std::vector<std::pair<std::string, torch::Tensor>> sd = {
      {"conv.weight", torch::randn({8, 3, 3, 3})},
      {"bn.num_batches_tracked", torch::tensor(7, torch::kLong)},
      {"half", torch::randn({5}).to(torch::kHalf)},
      {"bf16", torch::randn({3, 2}).to(torch::kBFloat16)},
      {"mask", torch::tensor({true, false, true})},
      {"bytes", torch::arange(10, torch::kUInt8)},
      {"ints", torch::arange(-3, 3, torch::kInt)},
      {"base", base},
      {"view_t", base.t()},                      // non-contiguous view of `base`
      {"view_slice", base.slice(1, 2, 5)},       // offset + strides into `base`
      {"empty", torch::empty({0, 4})},
  };
  PyValue v = PyValue::dict();
  v.set("model", PyValue::state_dict(sd));
  PyValue names = PyValue::dict();
  names.set(PyValue::integer(0), PyValue::string("circle"));
  names.set(PyValue::integer(1), PyValue::string("square"));
  v.set("names", names);
  v.set("nc", PyValue::integer(2));
  v.set("epoch", PyValue::integer(-1));
  v.set("big", PyValue::integer(int64_t(1) << 40));
  v.set("min", PyValue::integer(std::numeric_limits<int64_t>::min()));
  v.set("loss", PyValue::real(4.585206824541092));
  v.set("model_family", PyValue::string("yolo9"));
  v.set("unicode", PyValue::string("\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"));
  v.set("raw", PyValue::bytes(std::string("\x00\x01\xfe", 3)));
  v.set("ok", PyValue::boolean(true));
  v.set("nothing", PyValue::none());
  PyValue cfg = PyValue::dict();
  cfg.set("scale", PyValue::list({PyValue::real(0.5), PyValue::real(1.5)}));
  cfg.set("pair", PyValue::tuple({PyValue::integer(1), PyValue::string("a")}));
  cfg.set("quad", PyValue::tuple({PyValue::integer(1), PyValue::integer(2), PyValue::integer(3), PyValue::integer(4)}));
  PyValue inner = PyValue::dict();
  inner.set("x", PyValue::list());
  cfg.set("inner", inner);
  v.set("config", cfg);
  return v;
}
}  // namespace

TEST_CASE("pt: write -> read round trip keeps every value, dict order, key types and shared storages") {
  lry_test::TempDir dir("lry_pt");
  const PyValue v = sample_checkpoint();
  const std::string path = (dir / "ck.pt").string();
  io::write_pt(path, v);
  // Written atomically: only the final file is left.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);
  const PyValue r = io::read_pt(path);
  CHECK(same(v, r));
  CHECK(r.at("model").ordered());
  CHECK_FALSE(r.at("config").ordered());
  CHECK(r.at("names").dict_items()[0].first.is_int());
  const auto sd = io::state_dict(r, "model");
  std::map<std::string, torch::Tensor> t(sd.begin(), sd.end());
  CHECK(t["view_t"].data_ptr() == t["base"].data_ptr());  // still one storage
  CHECK(t["view_slice"].storage_offset() == 2);
  CHECK(t["view_t"].stride(0) == 1);
  // Overwriting replaces the file.
  PyValue v2 = PyValue::dict();
  v2.set("x", PyValue::integer(1));
  io::write_pt(path, v2);
  CHECK(same(io::read_pt(path), v2));

  // An unsupported placeholder cannot be written; the message names its key.
  PyValue bad = PyValue::dict();
  PyValue sub = PyValue::dict();
  sub.set("thing", PyValue::unsupported("numpy array"));
  bad.set("meta", sub);
  const auto m = lry_test::message_of<CheckpointError>([&] { io::write_pt((dir / "bad.pt").string(), bad); });
  CHECK(m.find("'meta.thing'") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bad.pt"));
}

TEST_CASE("pt: the original's checkpoint survives read -> write -> read unchanged" * lry_test::needs({lry_test::Need::fixtures})) {
  require_files({kCkpt});
  lry_test::TempDir dir("lry_pt");
  const PyValue ck = io::read_pt(kCkpt);
  io::write_pt((dir / "re.pt").string(), ck);
  CHECK(same(ck, io::read_pt((dir / "re.pt").string())));
}

TEST_CASE("pt: files written here load in Python's torch.load as the same dict" * lry_test::needs({lry_test::Need::python_torch})) {
  LRY_NEED(lry_test::Need::python_torch);
  const std::string py = lry_test::python_with_torch();
  lry_test::TempDir dir("lry_pt");
  const PyValue v = sample_checkpoint();
  const std::string path = (dir / "ck.pt").string();
  io::write_pt(path, v);
  // Python prints one line per model tensor (name dtype shape sum) and the metadata it sees.
  const std::string script = (dir / "check.py").string(), out = (dir / "out.txt").string();
  std::ofstream(script) << R"PY(import collections, sys, torch
ck = torch.load(sys.argv[1])
m = ck['model']
assert type(m) is collections.OrderedDict, type(m)
assert m['view_t'].data_ptr() == m['base'].data_ptr()
for k, t in m.items():
    print('T', k, str(t.dtype).replace('torch.', ''), list(t.shape), float(t.double().sum()))
assert ck['names'] == {0: 'circle', 1: 'square'}, ck['names']
assert ck['nc'] == 2 and ck['epoch'] == -1 and ck['big'] == 1 << 40 and ck['min'] == -(1 << 63)
assert ck['loss'] == 4.585206824541092 and ck['model_family'] == 'yolo9'
assert ck['unicode'] == '\u00e9t\u00e9 \u2713' and ck['raw'] == b'\x00\x01\xfe'
assert ck['ok'] is True and ck['nothing'] is None
assert ck['config'] == {'scale': [0.5, 1.5], 'pair': (1, 'a'), 'quad': (1, 2, 3, 4), 'inner': {'x': []}}, ck['config']
print('KEYS', ' '.join(ck.keys()))
)PY";
  const std::string cmd = py + " " + script + " " + path + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string text = slurp(out);
  INFO(text);
  REQUIRE(rc == 0);
  std::map<std::string, std::string> lines;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line))
    if (line.rfind("T ", 0) == 0) lines[line.substr(2, line.find(' ', 2) - 2)] = line;
  const auto sd = io::state_dict(v, "model");
  CHECK(lines.size() == sd.size());
  for (const auto& [name, t] : sd) {
    CAPTURE(name);
    REQUIRE(lines.count(name));
    std::string shape = "[";
    for (int64_t d = 0; d < t.dim(); ++d) shape += (d ? ", " : "") + std::to_string(t.size(d));
    shape += "]";
    const std::string& l = lines[name];
    CHECK(l.find(" " + io::dtype_name(t.scalar_type()) + " " + shape + " ") != std::string::npos);
    const double sum = std::stod(l.substr(l.rfind(' ') + 1));
    CHECK(sum == doctest::Approx(t.to(torch::kDouble).sum().item<double>()).epsilon(1e-12));
  }
  CHECK(text.find("KEYS model names nc epoch big min loss model_family unicode raw ok nothing config") != std::string::npos);
}

// ---- state dicts ---------------------------------------------------------------------------------

TEST_CASE("pt: state_dict names what is wrong") {
  PyValue v = PyValue::dict();
  PyValue sd = PyValue::dict(true);
  sd.set("a", PyValue::tensor(torch::ones({2})));
  sd.set("b", PyValue::unsupported("numpy.core.multiarray._reconstruct(...)"));
  v.set("model", sd);
  v.set("nc", PyValue::integer(3));
  auto m = lry_test::message_of<CheckpointError>([&] { io::state_dict(v, "model", "x.pt"); });
  CHECK(m.find("x.pt: 'model'['b']") != std::string::npos);
  CHECK(m.find("numpy.core.multiarray._reconstruct") != std::string::npos);
  m = lry_test::message_of<CheckpointError>([&] { io::state_dict(v, "ema", "x.pt"); });
  CHECK(m.find("no 'ema' entry") != std::string::npos);
  CHECK(m.find("'model', 'nc'") != std::string::npos);
  m = lry_test::message_of<CheckpointError>([&] { io::state_dict(v, "nc", "x.pt"); });
  CHECK(m.find("'nc' is of type int, not a state dict") != std::string::npos);
}

namespace {
struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    fc = register_module("fc", torch::nn::Linear(3, 2));
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};
io::StateDict tiny_state() {
  return {{"fc.weight", torch::full({2, 3}, 0.5)}, {"fc.bias", torch::full({2}, -1.0)},
          {"bn.weight", torch::full({2}, 2.0)},    {"bn.bias", torch::full({2}, 3.0)},
          {"bn.running_mean", torch::full({2}, 4.0)}, {"bn.running_var", torch::full({2}, 5.0)},
          {"bn.num_batches_tracked", torch::tensor(9, torch::kLong)}};
}
}  // namespace

TEST_CASE("pt: load_state_dict_strict copies all or nothing and lists missing, unexpected and mismatched keys") {
  TinyImpl m;
  CHECK(io::load_state_dict_strict(m, tiny_state(), "t.pt") == 7);
  CHECK(torch::equal(m.fc->weight, torch::full({2, 3}, 0.5)));
  CHECK(m.bn->running_var.allclose(torch::full({2}, 5.0)));
  CHECK(m.bn->num_batches_tracked.item<int64_t>() == 9);

  TinyImpl fresh;
  const auto before = fresh.fc->weight.clone();
  auto st = tiny_state();
  st.erase(st.begin() + 1);                               // fc.bias missing
  st.emplace_back("extra.weight", torch::ones({1}));      // unexpected
  st[0].second = torch::ones({4, 3});                     // fc.weight shape
  const auto msg = lry_test::message_of<CheckpointError>([&] { io::load_state_dict_strict(fresh, st, "t.pt 'model'"); });
  INFO(msg);
  CHECK(msg.find("t.pt 'model'") != std::string::npos);
  CHECK(msg.find("1 missing key: fc.bias") != std::string::npos);
  CHECK(msg.find("1 unexpected key: extra.weight") != std::string::npos);
  CHECK(msg.find("1 shape mismatch: fc.weight (checkpoint [4, 3], model [2, 3])") != std::string::npos);
  CHECK(msg.find("nothing was loaded") != std::string::npos);
  CHECK(torch::equal(fresh.fc->weight, before));  // untouched
  CHECK(fresh.bn->running_mean.abs().sum().item<double>() == 0.0);

  // Many missing keys: the first few and a count.
  const auto many = lry_test::message_of<CheckpointError>([&] { io::load_state_dict_strict(fresh, {}, "e.pt"); });
  CHECK(many.find("7 missing keys: fc.weight, fc.bias, bn.weight, bn.bias, bn.running_mean, ... (2 more)") != std::string::npos);
}

TEST_CASE("pt: to_json summarises tensors and keeps dict order") {
  const auto j = io::to_json(sample_checkpoint());
  CHECK(j.begin().key() == "model");
  CHECK(j.at("model").at("conv.weight") == "<tensor float32 [8, 3, 3, 3]>");
  CHECK(j.at("model").at("half") == "<tensor float16 [5]>");
  CHECK(j.at("names").at("1") == "square");
  CHECK(j.at("raw") == "<bytes of 3>");
  CHECK(j.at("nothing").is_null());
  CHECK(j.at("config").at("pair") == nlohmann::ordered_json::array({1, "a"}));
  CHECK(io::to_json(PyValue::real(std::nan(""))) == "nan");
  CHECK(j.dump().find("\xc3\xa9t\xc3\xa9") != std::string::npos);
}
