#pragma once
// More ways to read a profile.json (`libreyolo profile ...`): `--json` for every subcommand (the
// numbers a script wants, one JSON document on stdout), `profile ops` (the host's top operators, the
// `ops` table) and `profile what-if` (from the measured window, what each lever would give: an
// estimate, and labelled as one).
#include <libreyolo/core/api.hpp>
#include <libreyolo/profile/report.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace libreyolo::profile {

// ---- --json documents -----------------------------------------------------------------------------
LIBREYOLO_INLINE nlohmann::json summary_doc(const nlohmann::json& p);
LIBREYOLO_INLINE nlohmann::json phases_doc(const nlohmann::json& p);

// The kernel rows a query selects, sorted (kernels_text's selection, as JSON).
LIBREYOLO_INLINE nlohmann::json kernels_doc(const nlohmann::json& p, const KernelQuery& q);

LIBREYOLO_INLINE nlohmann::json compare_doc(const nlohmann::json& a, const nlohmann::json& b);

// ---- profile ops ---------------------------------------------------------------------------------
// The host's operators (LibTorch ops the training thread ran), largest time first; --phase picks one.
LIBREYOLO_INLINE nlohmann::json ops_doc(const nlohmann::json& p, int top, const std::string& phase);
LIBREYOLO_INLINE std::string ops_text(const nlohmann::json& doc);

// ---- profile convs ---------------------------------------------------------------------------------
// The convolutions of the measured window by algorithm (conv_algorithm over the kernels' raw names): their
// GPU ms per step and share of the busy time, one row per (pass, algorithm family, arithmetic) with its
// share of the convolution time and the split-K share, the families summed, the dominant one named; and
// the layout conversions (NCHW <-> NHWC) cuDNN ran around them, which channels-last tensors avoid.
// DataError without a kernel trace.
LIBREYOLO_INLINE nlohmann::json convs_doc(const nlohmann::json& p);
LIBREYOLO_INLINE std::string convs_text(const nlohmann::json& d);

// ---- profile what-if -------------------------------------------------------------------------------
// From the measured window: each lever's estimated step time. The models are simple and stated:
//  cuda_graph  the step approaches max(GPU busy, dataload) (launch and host overhead disappear);
//  amp         gemm/conv kernels run about 2x faster on Tensor Cores in fp16/bf16; the rest is unchanged;
//  workers     dataloader-bound: twice the workers halve the loading time left on the step (workers=0:
//              loading moves off the training thread and the step approaches its compute time).
//  channels_last  the NCHW <-> NHWC conversions cuDNN ran (convs_doc) disappear, with their launch gaps.
//  cudnn       another convolution algorithm choice (cudnn_heuristic=b, cudnn_benchmark=true) can only change
//              the convolution kernels: the estimate is a bound, the step without them (and their gaps);
//              the measured effect on accuracy is not in a profile (docs/performance.md).
LIBREYOLO_INLINE nlohmann::json what_if_doc(const nlohmann::json& p);
LIBREYOLO_INLINE std::string what_if_text(const nlohmann::json& d);

// What-if with work taken away (`profile what-if --remove-category C` / `--remove-launches`): the step
// re-derived from the measured window's own split, step = dataload + GPU busy + launch gaps (the host
// overhead, step - busy - dataload). Removing category C takes away its share of the busy time (busy x
// C's ms / the kernel-time sum: the union shrinks in proportion) and the gaps of its launches (gaps x
// C's kernels per step / all kernels per step: one launch each); --remove-launches closes every launch
// gap. An estimate, labelled as one; it needs a kernel trace (DataError without one).
struct Removal {
  std::string category;   // one of kernel_categories; empty: none
  bool launches = false;  // close every launch gap
};
// ConfigError for an unknown category (listing the allowed ones) or an empty removal.
LIBREYOLO_INLINE nlohmann::json what_if_removal_doc(const nlohmann::json& p, const Removal& r);
LIBREYOLO_INLINE std::string what_if_removal_text(const nlohmann::json& d);

// ---- profile get -----------------------------------------------------------------------------------
// One value of a profile.json, for scripts. The names: the headline scalars as the file spells them
// (step_ms, gpu_util, bound, bound_why, model, ...), short aliases (util, busy_ms, dataload_pct = 100 x dataload_frac, verdict =
// bound, host_overhead_ms, launches, kernels, memcpy_ms), the window (real_steps, synced_steps,
// traced_steps, warmup, window_wall_ms), the run's config (batch, imgsz, device, amp, workers), each
// phase's <phase>_gpu_ms / _wall_ms / _kernels / _ops and each kernel category's <category>_ms / _pct.
// A name the profile has no value for (a GPU figure of a run without a kernel trace) gives null.
LIBREYOLO_INLINE std::vector<std::string> metric_names();
// ConfigError for an unknown name, listing the allowed ones.
LIBREYOLO_INLINE nlohmann::json get_metric(const nlohmann::json& p, const std::string& name);
// The value as a script reads it: a number or a bare string (no quotes), `null` when there is none.
LIBREYOLO_INLINE std::string metric_text(const nlohmann::json& v);

// ---- entry points with --json ----------------------------------------------------------------------
namespace detail {
template <class Doc, class Text>
int lens(const std::vector<std::filesystem::path>& files, bool as_json, std::ostream& out, std::ostream& err, Doc&& doc, Text&& text) {
  return guarded(err, files, [&] {
    if (as_json) out << doc().dump(2) << "\n";
    else out << text();
  });
}
}  // namespace detail

LIBREYOLO_INLINE int run_summary(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_phases(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_kernels(const std::filesystem::path& f, const KernelQuery& q, bool as_json, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_ops(const std::filesystem::path& f, int top, const std::string& phase, bool as_json, std::ostream& out,
                   std::ostream& err);
LIBREYOLO_INLINE int run_what_if(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_convs(const std::filesystem::path& f, bool as_json, std::ostream& out, std::ostream& err);
// With a removal (a category or the launch gaps): what_if_removal_doc / _text instead of the levers.
LIBREYOLO_INLINE int run_what_if(const std::filesystem::path& f, const Removal& r, bool as_json, std::ostream& out,
                                 std::ostream& err);
// Prints one metric (text: the bare value; --json: {"<name>": value}); exit 2 for an unknown name.
LIBREYOLO_INLINE int run_get(const std::filesystem::path& f, const std::string& name, bool as_json, std::ostream& out,
                             std::ostream& err);
LIBREYOLO_INLINE int run_compare(const std::filesystem::path& a, const std::filesystem::path& b, bool as_json, std::ostream& out,
                       std::ostream& err);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/lenses-inl.hpp>
#endif
