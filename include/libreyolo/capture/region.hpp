#pragma once
// Capture regions (SPEC §2.3): which part of a family's forward a CUDA graph wraps.
//   network           the whole net->forward(x); the loss runs eager.
//   backbone_encoder  the chain the network declares as its encoder boundary: encode(x) is graphed, its
//                     parameters and buffers are those of encoder(); decode(features) (e.g. a DETR decoder
//                     whose token count varies per batch) and the loss run eager.
// A network with the boundary must satisfy net->forward(x) == net->decode(net->encode(x)).
#include <libreyolo/core/traits.hpp>

#include <torch/torch.h>

#include <concepts>
#include <type_traits>

namespace libreyolo::capture {

template <CaptureRegion R>
using region_t = std::integral_constant<CaptureRegion, R>;
using whole_network = region_t<CaptureRegion::network>;

// The encoder boundary a backbone_encoder network declares (on its Impl, reached through the holder).
template <class Impl>
concept EncoderBoundary = requires(Impl& m, const torch::Tensor& x) {
  { m.encoder() } -> std::convertible_to<torch::nn::Module&>;  // owns the captured parameters and buffers
  m.encode(x);                                                 // backbone + encoder: the graphed chain
  m.decode(m.encode(x));                                       // the rest of the forward: eager
};

}  // namespace libreyolo::capture
