// Uses the installed headers (header-only: every function inline): parses a config, composes a trainer
// type, runs a ResNet-18 forward, and round-trips its weights through a checkpoint file. second.cpp includes
// the same headers (CMakeLists.txt says why).
#include "every_split_header.hpp"
#include <libreyolo/families/resnet/family.hpp>
#include <libreyolo/libreyolo.hpp>

#include <filesystem>
#include <iostream>
#include <string>

std::string consumer_second_unit();

int main() {
  auto cfg = libreyolo::parse_args({"model=resnet18", "epochs=2", "imgsz=64"});
  using T = libreyolo::Trainer<libreyolo::ResNetFamily, libreyolo::precision::Fp32, libreyolo::capture::Eager,
                               libreyolo::profile::Off>;
  static_assert(std::is_same_v<T::Capture, libreyolo::capture::Eager>);
  libreyolo::resnet::ResNet net(libreyolo::resnet::ResNetOptions{18, 10});
  auto y = net->forward(torch::randn({2, 3, cfg.imgsz, cfg.imgsz}));

  libreyolo::train::Checkpoint ck;
  libreyolo::train::put_module_state(ck, "model.", *net);
  const auto path = std::filesystem::temp_directory_path() / ("lry_consumer_" + std::to_string(::getpid()) + ".ckpt");
  libreyolo::train::save_checkpoint(ck, path);
  const auto back = libreyolo::train::load_checkpoint(path);
  std::filesystem::remove(path);
  bool same = back.tensors.size() == ck.tensors.size();
  for (const auto& [k, t] : ck.tensors) same = same && back.tensors.count(k) && torch::equal(back.tensors.at(k), t);

  std::cout << "consumer ok " << y.size(0) << "x" << y.size(1) << " epochs=" << cfg.epochs
            << " checkpoint=" << (same ? "same" : "differs") << " " << consumer_second_unit() << "\n";
  return y.size(1) == 10 && same ? 0 : 1;
}
