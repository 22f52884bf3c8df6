#pragma once
// The run-time name -> family type table the facade and the command line dispatch through.
#include <libreyolo/families/resnet/family.hpp>
#include <libreyolo/families/yolo9/family.hpp>

#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

namespace libreyolo {

inline constexpr auto registered_families = boost::hana::tuple_t<ResNetFamily, Yolo9Family>;

}  // namespace libreyolo
