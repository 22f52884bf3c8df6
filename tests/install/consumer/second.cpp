// The consumer's second translation unit: the same headers as main.cpp (the umbrella, the family and every
// split header), and one function main() calls, so that the link sees both units' definitions.
#include "every_split_header.hpp"
#include <libreyolo/families/resnet/family.hpp>
#include <libreyolo/libreyolo.hpp>

#include <string>

std::string consumer_second_unit() {
  auto cfg = libreyolo::parse_args({"model=resnet18", "epochs=3"});
  return "second=" + std::to_string(cfg.epochs);
}
