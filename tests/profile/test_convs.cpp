// The convolutions by cuDNN algorithm (`profile convs`, profile/lenses.hpp convs_doc) and the what-if levers
// channels_last and cudnn, on a hand-made traced profile whose figures are written out below; and the kernel
// name rules (profile/kernel_names.hpp kernel_category, conv_algorithm) on names the H200 traces of session 20
// held (benchmarks/results/2026-12-03-s20/).
#include <libreyolo/profile/kernel_names.hpp>
#include <libreyolo/profile/lenses.hpp>
#include <libreyolo/profile/report_text.hpp>

#include <string>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;

namespace {
const char* wgrad_sm90 = "sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn";
const char* fprop_sm80 = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x32x32_stage4_warpsize4x1x1_g1_tensor16x8x16_t1r3s3_execute_kernel__5x_cudnn";
const char* dgrad_legacy = "void cudnn::detail::dgrad_alg1_engine<__half, 128, 6, 7, 3, 3, 5, false, false>(int, int, int, __half const*)";
const char* to_nhwc = "void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(cudnn::reduced_divisor)";
const char* nvjet = "nvjet_sm90_hsh_32x64_64x16_1x1_h_bz_splitK_NTN";
const char* silu = "void at::native::vectorized_elementwise_kernel<8, at::native::silu_kernel>(int)";
// A CUTLASS weight-gradient convolution as the trace names it: mangled, its template arguments holding "NoPermute".
const char* cutlass_wgrad =
    "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageINS_4gemm9G"
    "emmShapeILi64ELi64ELi64EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimizedINS_11MatrixShapeILi64ELi64EEENS_6half"
    "_tENS_9transform29PitchLinearWarpRakedThreadMapENS6_4warp11MmaTensorOpINS7_ILi32ELi32ELi64EEEEfLb0ENSO_9NoPermuteELb0EEEEEvNT_"
    "6ParamsE";

json kernel(const char* raw, double ms, double count) {
  return {{"kernel", short_kernel_name(raw)}, {"raw_name", raw}, {"category", std::string(kernel_category(raw))},
          {"ms_per_step", ms}, {"count_per_step", count}};
}
// 20 ms steps: 1 ms loading, 12 ms GPU busy (= the kernels' sum), 7 ms of launch gaps over 100 launches.
json traced(const json& config) {
  json cfg = {{"amp", true}, {"workers", 4}, {"cuda_graph", false}, {"channels_last", false}, {"cudnn_benchmark", false},
              {"cudnn_heuristic", "instant"}};
  if (config.is_object()) cfg.update(config);
  return {{"schema", analysis_schema}, {"model", "yolo9t"}, {"step_ms", 20.0}, {"dataload_ms", 1.0},
          {"gpu_busy_ms_per_step", 12.0}, {"gpu_kernel_sum_ms_per_step", 12.0}, {"host_overhead_ms_per_step", 7.0},
          {"launches_per_step", 100.0}, {"kernels_per_step", 100.0}, {"trace_collected", true}, {"config", cfg},
          {"kernels", json::array({kernel(wgrad_sm90, 3.0, 10), kernel(fprop_sm80, 2.0, 20), kernel(dgrad_legacy, 1.0, 10),
                                   kernel(to_nhwc, 1.5, 30), kernel(nvjet, 0.5, 5), kernel(silu, 4.0, 25)})}};
}
json lever(const json& doc, const std::string& name) {
  for (const auto& l : doc["levers"])
    if (l["lever"] == name) return l;
  FAIL("no lever " << name);
  return {};
}
}  // namespace

TEST_CASE("kernel names: convolutions by pass, algorithm family, arithmetic and split-K; layout conversions and cuBLAS gemms") {
  // Categories: a mangled CUTLASS convolution is a convolution (not layout/copy for its NoPermute argument);
  // Hopper's cuBLAS kernels (nvjet_*) are gemms; cuDNN's layout converters and padding stay layout/copy.
  CHECK(kernel_category(cutlass_wgrad) == "gemm/conv");
  CHECK(kernel_category(nvjet) == "gemm/conv");
  CHECK(kernel_category(to_nhwc) == "layout/copy");
  CHECK(kernel_category("void cudnn::engines_precompiled::convertTensor_kernel<float, float, float>(float)") == "layout/copy");
  CHECK(kernel_category("void nhwcAddPaddingKernel<__half, __half, float, true>(int, int)") == "layout/copy");
  CHECK(kernel_category("void nhwcSliceCKernel<__half, __half, float, true>(cudnn::reduced_divisor, int)") == "layout/copy");

  auto a = conv_algorithm(wgrad_sm90);
  CHECK(a.pass == "wgrad");
  CHECK(a.family == "implicit GEMM, Tensor Cores");
  CHECK(a.math == "fp16 in, fp32 accumulate");
  CHECK(a.split_k);
  a = conv_algorithm(cutlass_wgrad);
  CHECK(a.pass == "wgrad");
  CHECK(a.family == "implicit GEMM, Tensor Cores");
  CHECK(a.math == "fp16 (accumulator not named)");
  CHECK_FALSE(a.split_k);
  a = conv_algorithm(fprop_sm80);
  CHECK(a.pass == "fprop");
  CHECK_FALSE(a.split_k);
  a = conv_algorithm(dgrad_legacy);
  CHECK(a.pass == "dgrad");
  CHECK(a.family == "cuDNN legacy engine (no Tensor Cores)");
  a = conv_algorithm("sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1_execute");
  CHECK(a.math == "tf32");
  a = conv_algorithm("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816dgrad_optimized_f16_128x64_32x6_nhwc_unity_stride_align8>(P)");
  CHECK(a.pass == "dgrad");
  CHECK(a.math == "fp16 in, fp32 accumulate");
  CHECK(conv_algorithm("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(P)").family == "winograd");
  a = conv_algorithm("void fft2d_r2c_32x32<float, false, 1u, false>(float2*)");
  CHECK(a.family == "fft");
  CHECK(a.pass == "?");  // cuDNN's FFT kernels serve every pass
  CHECK(conv_algorithm("void at::native::(anonymous namespace)::conv_depthwise2d_grad_weight_kernel<c10::Half, unsigned int>(T)").family ==
        "direct (depthwise/grouped)");
  CHECK(conv_algorithm("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int)").family ==
        "cuDNN legacy engine (no Tensor Cores)");
  // No convolution: cuBLAS gemms, split-K reductions, elementwise kernels, layout conversions.
  for (const char* n : {nvjet, silu, to_nhwc, "void cublasLt::splitKreduce_kernel<32, 16, int, float>(P)",
                        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"}) {
    CAPTURE(n);
    CHECK_FALSE(conv_algorithm(n).is_conv());
  }
}

TEST_CASE("profile convs: the convolutions of a hand-made window by algorithm, and the layout conversions around them") {
  const json d = convs_doc(traced({}));
  CHECK(d["conv_ms"].get<double>() == doctest::Approx(6.0));  // 3 + 2 + 1
  CHECK(d["conv_pct_of_busy"].get<double>() == doctest::Approx(50.0));
  CHECK(d["conv_kernels_per_step"].get<double>() == doctest::Approx(40.0));
  CHECK(d["split_k_ms"].get<double>() == doctest::Approx(3.0));
  CHECK(d["dominant"] == "implicit GEMM, Tensor Cores");
  REQUIRE(d["families"].size() == 2);
  CHECK(d["families"][0]["ms"].get<double>() == doctest::Approx(5.0));
  CHECK(d["families"][0]["pct_of_conv"].get<double>() == doctest::Approx(500.0 / 6.0));
  CHECK(d["families"][1]["family"] == "cuDNN legacy engine (no Tensor Cores)");
  REQUIRE(d["rows"].size() == 3);  // largest first
  CHECK(d["rows"][0]["pass"] == "wgrad");
  CHECK(d["rows"][0]["pct_of_conv"].get<double>() == doctest::Approx(50.0));
  CHECK(d["rows"][0]["split_k_ms"].get<double>() == doctest::Approx(3.0));
  CHECK(d["rows"][1]["pass"] == "fprop");
  CHECK(d["rows"][1]["kernels_per_step"].get<double>() == doctest::Approx(20.0));
  CHECK(d["rows"][2]["pass"] == "dgrad");
  CHECK(d["rows"][2]["math"] == "fp16 (accumulator not named)");
  CHECK(d["layout_conversion_ms"].get<double>() == doctest::Approx(1.5));
  CHECK(d["layout_conversion_kernels_per_step"].get<double>() == doctest::Approx(30.0));
  CHECK(d["channels_last"] == false);
  const std::string text = convs_text(d);
  CHECK(text.find("dominant algorithm: implicit GEMM, Tensor Cores") != std::string::npos);
  CHECK(text.find("layout conversions (NCHW <-> NHWC): 1.50 ms/step, 30 kernels/step") != std::string::npos);
  // The summary names the algorithm mix.
  const std::string summary = summary_text(traced({}));
  CHECK(summary.find("convolutions: 6.00 ms/step; by algorithm:  implicit GEMM, Tensor Cores 83%  cuDNN legacy engine (no Tensor "
                     "Cores) 17%") != std::string::npos);

  // Without a kernel trace there is nothing to classify.
  json host = traced({});
  host["trace_collected"] = false;
  CHECK_THROWS_WITH_AS(convs_doc(host), doctest::Contains("needs a kernel trace"), libreyolo::DataError);
}

TEST_CASE("profile what-if: channels_last removes the layout conversions; cudnn is a bound: the step without its convolutions") {
  // Eager: a removed kernel takes its share of the busy union (busy x ms / kernel sum) and of the launch gaps
  // (gaps x its launches / all launches).
  auto d = what_if_doc(traced({}));
  auto cl = lever(d, "channels_last");
  CHECK(cl["applies"] == true);
  CHECK(cl["estimated_step_ms"].get<double>() == doctest::Approx(20.0 - 1.5 - 7.0 * 30 / 100));  // 16.4
  auto cu = lever(d, "cudnn");
  CHECK(cu["applies"] == true);
  CHECK(cu["setting"] == "cudnn_heuristic=b");
  CHECK(cu["estimated_step_ms"].get<double>() == doctest::Approx(20.0 - 6.0 - 7.0 * 40 / 100));  // 11.2
  CHECK(cu["why"].get<std::string>().find("BOUND") != std::string::npos);
  CHECK(cu["why"].get<std::string>().find("lower mAP") != std::string::npos);

  // With graphs the launch gaps are gone already: only the busy share goes.
  d = what_if_doc(traced({{"cuda_graph", true}}));
  CHECK(lever(d, "channels_last")["estimated_step_ms"].get<double>() == doctest::Approx(18.5));
  CHECK(lever(d, "cudnn")["estimated_step_ms"].get<double>() == doctest::Approx(14.0));

  // Mode B already: the next setting is autotuning; autotuning already: nothing to suggest.
  CHECK(lever(what_if_doc(traced({{"cudnn_heuristic", "b"}})), "cudnn")["setting"] == "cudnn_benchmark=true");
  cu = lever(what_if_doc(traced({{"cudnn_benchmark", true}})), "cudnn");
  CHECK(cu["applies"] == false);
  CHECK(cu["why"] == "already autotuning in this run");

  // Channels-last already, no conversions in the window.
  json nhwc = traced({{"channels_last", true}});
  nhwc["kernels"].erase(3);
  cl = lever(what_if_doc(nhwc), "channels_last");
  CHECK(cl["applies"] == false);
  CHECK(cl["why"].get<std::string>().find("already on") != std::string::npos);

  // No kernel trace: both levers say why they cannot estimate.
  json host = traced({});
  host["trace_collected"] = false;
  d = what_if_doc(host);
  CHECK(lever(d, "channels_last")["applies"] == false);
  CHECK(lever(d, "cudnn")["why"].get<std::string>().find("needs a kernel trace") != std::string::npos);
}
