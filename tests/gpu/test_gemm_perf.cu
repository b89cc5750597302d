// Quick throughput check of weave::Gemm against cuBLASLt in the same process (CUDA graphs of 20
// calls, alternating arms, cold weights). Not the benchmark of record (`weave bench gemm` is);
// skipped unless WEAVE_GEMM_PERF=1 so the GPU test suite stays short.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "gemm/dispatch.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;

namespace {

struct PerfShape {
  int64_t m, n, k;
};

// The comma-separated items of an environment variable (empty when unset or empty).
std::vector<std::string> env_list(const char* name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name);
  std::string rest = v != nullptr ? v : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    out.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  return out;
}

// tile_splits: WEAVE_GEMM_PERF_TILE_SPLITS (empty: the default arms).
void time_shape(ScaleMode mode, PerfShape s, int l2_bytes, const std::vector<int>& tile_splits) {
  GemmProblem p{.m = s.m, .n = s.n, .k = s.k, .mode = mode, .out_dtype = DType::kBF16};
  // Operands: one A, several B copies (cold weights), one C per arm.
  const auto xa = bench::random_operand(1, s.m, s.k);
  const auto xb = bench::random_operand(2, s.n, s.k);
  const auto qa = bench::quantize_parallel(xa, s.m, s.k, mode, ref::Operand::kA);
  const auto qb = bench::quantize_parallel(xb, s.n, s.k, mode, ref::Operand::kB);
  bench::DeviceOperand a = bench::upload_operand(qa, 0);
  std::vector<bench::DeviceOperand> b;
  b.push_back(bench::upload_operand(qb, 0));
  const int copies = bench::cold_copies(b[0].bytes(), l2_bytes);
  for (int i = 1; i < copies; ++i) b.push_back(bench::clone_operand(b[0]));
  bench::DeviceBuffer c_weave(s.m * s.n * 2), c_lt(s.m * s.n * 2);
  const TensorView cw = TensorView::matrix(c_weave.get(), DType::kBF16, s.m, s.n, 0);
  const TensorView cl = TensorView::matrix(c_lt.get(), DType::kBF16, s.m, s.n, 0);

  // Arm 0 is the planner's choice; the others vary one decision (tile, L2 group size) so one run
  // shows whether the planner picked well. Each arm has one Gemm per weight copy.
  struct Variant {
    std::string name;
    GemmPlanOverrides overrides;
    ScaleLayout layout = ScaleLayout::kRaw;
  };
  std::vector<Variant> variants = {{"weave", {}}};
  for (const auto& inst : gemm::gemm_instances())
    if (inst.mode == mode && inst.out_dtype == DType::kBF16)
      variants.push_back({std::string(inst.scale_layout == ScaleLayout::kMnMajor ? "mn " : "") + "tile " +
                              std::to_string(inst.block_m) + "x" + std::to_string(inst.block_n) +
                              (inst.cluster_m == 2 ? " c2" : ""),
                          GemmPlanOverrides{.block_m = inst.block_m, .block_n = inst.block_n, .cluster = inst.cluster_m},
                          inst.scale_layout});
  // Blockscale: the planner's choice with A's scales M-contiguous too.
  bench::MnMajorScales sa_mn;
  if (mode == ScaleMode::kBlockscale) {
    variants.push_back({"mn", {}, ScaleLayout::kMnMajor});
    sa_mn = bench::upload_mn_major_scales(qa, 0);
  }
  // K splits the planner may not take (its rule keeps >= 1024 K elements per split).
  const int64_t k_blocks = (s.k + (mode == ScaleMode::kBF16 ? 63 : 127)) / (mode == ScaleMode::kBF16 ? 64 : 128);
  if (tile_splits.empty()) {
    for (int g : {2, 4, 16, 64}) variants.push_back({"group " + std::to_string(g), GemmPlanOverrides{.group_rows = g}});
    for (int split : {2, 3, 4})
      if (split <= k_blocks) variants.push_back({"split " + std::to_string(split), GemmPlanOverrides{.split_k = split}});
  } else {
    // WEAVE_GEMM_PERF_TILE_SPLITS=1,2,4,...: every tile (blockscale: of both scale layouts) at every
    // listed K split, 1 = none (where the tile has a split kernel; the planner refuses the others
    // and the arm is left out).
    for (const auto& inst : gemm::gemm_instances())
      if (inst.mode == mode && inst.out_dtype == DType::kBF16)
        for (int split : tile_splits)
          if (split >= 1 && split <= k_blocks)
            variants.push_back({std::string(inst.scale_layout == ScaleLayout::kMnMajor ? "mn " : "") + "tile " +
                                    std::to_string(inst.block_m) + "x" + std::to_string(inst.block_n) + " split " +
                                    std::to_string(split) + (inst.cluster_m == 2 ? " c2" : ""),
                                GemmPlanOverrides{.block_m = inst.block_m, .block_n = inst.block_n, .split_k = split,
                                                  .cluster = inst.cluster_m},
                                inst.scale_layout});
  }
  std::vector<std::vector<std::unique_ptr<Gemm>>> gemm_sets(variants.size());
  std::vector<bench::DeviceBuffer> workspaces(variants.size());
  std::vector<bench::Arm> arms;
  for (size_t v = 0; v < variants.size(); ++v) {
    GemmProblem pv = p;
    pv.scale_layout = variants[v].layout;
    const TensorView sa = variants[v].layout == ScaleLayout::kMnMajor ? sa_mn.view : a.scale_view;
    try {
      for (int i = 0; i < copies; ++i)
        gemm_sets[v].push_back(std::make_unique<Gemm>(pv, a.view, b[i].view, GemmScales{sa, b[i].scale_view}, cw,
                                                      variants[v].overrides));
    } catch (const Error&) {
      if (v == 0 || tile_splits.empty()) throw;
      gemm_sets[v].clear();
      continue;  // a tile x split the planner refuses (no split kernel for the tile): no arm
    }
    if (const std::size_t ws = gemm_sets[v][0]->workspace_bytes(); ws > 0) {
      workspaces[v] = bench::DeviceBuffer(ws);
      for (auto& g : gemm_sets[v]) g->set_workspace(workspaces[v].get(), ws);
    }
    auto* set = &gemm_sets[v];
    arms.push_back({variants[v].name, [set, copies](cudaStream_t st, int call) { (*set)[call % copies]->run(st); }});
  }
  auto& gemms = gemm_sets[0];

  std::unique_ptr<bench::CublasLtGemm> lt, lt_fast;
  std::vector<bench::CublasLtScales> lt_scales;
  std::string lt_why = bench::CublasLtGemm::supports(p);
  if (lt_why.empty()) {
    try {
      lt = std::make_unique<bench::CublasLtGemm>(p, 0);
      for (int i = 0; i < copies; ++i)
        lt_scales.push_back(lt->prepare_scales(GemmScales{a.scale_view, b[i].scale_view}, nullptr));
      arms.push_back({"cublaslt", [&](cudaStream_t st, int call) {
                        lt->run(a.view, b[call % copies].view, lt_scales[call % copies], cl, st);
                      }});
    } catch (const Error& e) {
      lt_why = e.what();
    }
    if (mode == ScaleMode::kPtpc && lt) {
      try {
        bench::CublasLtOptions fast;
        fast.fast_accum = true;
        lt_fast = std::make_unique<bench::CublasLtGemm>(p, 0, fast);
        arms.push_back({"cublaslt_fast", [&](cudaStream_t st, int call) {
                          lt_fast->run(a.view, b[call % copies].view, lt_scales[call % copies], cl, st);
                        }});
      } catch (const Error& e) {
        std::printf("  (cublaslt fast accumulation unavailable: %s)\n", e.what());
      }
    }
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  bench::TimingConfig cfg;
  cfg.samples = 10;
  const auto t = bench::time_alternating(arms, cfg, stream);

  // Validate weave's output of the timed run against the GPU reference (#wrong).
  bench::DeviceBuffer ref(s.m * s.n * 4);
  bench::poison_nan(c_weave.get(), c_weave.bytes(), DType::kBF16, stream);
  gemms[0]->run(stream);
  bench::gpu_reference_gemm(p, a.view, b[0].view, GemmScales{a.scale_view, b[0].scale_view}, ref.as<float>(), stream);
  const auto cmp = bench::gpu_compare(cw, ref.as<float>(), test::tolerance_for(mode, DType::kBF16), stream);
  cudaStreamDestroy(stream);

  const double flop = 2.0 * s.m * s.n * s.k;
  std::printf("  %-10s %6lld %6lld %6lld  %-44s split %d weave %9.1f us %7.1f TFLOPS noise %.1f%% #wrong %lld",
              std::string(to_string(mode)).c_str(), static_cast<long long>(s.m), static_cast<long long>(s.n),
              static_cast<long long>(s.k), gemms[0]->plan().kernel.c_str(), gemms[0]->plan().split_k, t[0].median_us,
              flop / t[0].median_us * 1e-6, t[0].noise_pct, static_cast<long long>(cmp.wrong));
  for (size_t i = 1; i < t.size(); ++i)
    std::printf(" | %s %.1f us (%.3f)", arms[i].name.c_str(), t[i].median_us, t[0].median_us / t[i].median_us);
  if (!lt_why.empty()) std::printf(" | cublaslt: %s", lt_why.c_str());
  std::printf("\n");
  EXPECT_EQ(cmp.wrong, 0) << "weave output wrong in the timed configuration";
}

}  // namespace

TEST(GemmPerf, AgainstCublasLt) {
  WEAVE_REQUIRE_GPUS(1);
  const char* on = std::getenv("WEAVE_GEMM_PERF");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "set WEAVE_GEMM_PERF=1 to time";
  int l2 = 0;
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
  std::vector<PerfShape> shapes = {{8192, 8192, 8192}, {8192, 5120, 2048}, {16384, 2048, 7168},
                                   {2048, 2048, 7168}, {8192, 7168, 640},  {64, 8192, 1280}};
  // WEAVE_GEMM_PERF_SHAPES=MxNxK,... narrows the list (e.g. to the small-M shapes).
  if (const std::vector<std::string> list = env_list("WEAVE_GEMM_PERF_SHAPES"); !list.empty()) {
    shapes.clear();
    for (const std::string& one : list) {
      long long m = 0, n = 0, k = 0;
      ASSERT_EQ(std::sscanf(one.c_str(), "%lldx%lldx%lld", &m, &n, &k), 3)
          << "WEAVE_GEMM_PERF_SHAPES: '" << one << "' is not MxNxK";
      shapes.push_back({m, n, k});
    }
  }
  // WEAVE_GEMM_PERF_TILE_SPLITS=1,2,4: every tile at each of these K splits (see time_shape).
  std::vector<int> tile_splits;
  for (const std::string& one : env_list("WEAVE_GEMM_PERF_TILE_SPLITS")) {
    char* end = nullptr;
    const long split = std::strtol(one.c_str(), &end, 10);
    ASSERT_TRUE(!one.empty() && *end == '\0' && split >= 1 && split <= 64)
        << "WEAVE_GEMM_PERF_TILE_SPLITS: '" << one << "' is not a split count in 1..64";
    tile_splits.push_back(static_cast<int>(split));
  }
  // WEAVE_GEMM_PERF_MODES=ptpc,blockscale narrows the modes (default: bf16, ptpc, blockscale).
  const char* modes_env = std::getenv("WEAVE_GEMM_PERF_MODES");
  const std::string modes = modes_env != nullptr && *modes_env != 0 ? modes_env : "bf16,ptpc,blockscale";
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale})
    if (("," + modes + ",").find("," + std::string(to_string(mode)) + ",") != std::string::npos)
      for (const auto& s : shapes) time_shape(mode, s, l2, tile_splits);
}
