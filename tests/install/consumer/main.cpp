// Uses the installed headers: parses a config, composes a trainer type, runs a ResNet-18 forward.
#include <libreyolo/libreyolo.hpp>

#include <iostream>

int main() {
  auto cfg = libreyolo::parse_args({"model=resnet18", "epochs=2", "imgsz=64"});
  using T = libreyolo::Trainer<libreyolo::ResNetFamily, libreyolo::precision::Fp32, libreyolo::capture::Eager,
                               libreyolo::profile::Off>;
  static_assert(std::is_same_v<T::Capture, libreyolo::capture::Eager>);
  libreyolo::resnet::ResNet net(libreyolo::resnet::ResNetOptions{18, 10});
  auto y = net->forward(torch::randn({2, 3, cfg.imgsz, cfg.imgsz}));
  std::cout << "consumer ok " << y.size(0) << "x" << y.size(1) << " epochs=" << cfg.epochs << "\n";
  return y.size(1) == 10 ? 0 : 1;
}
