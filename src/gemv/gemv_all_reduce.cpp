// Host side of the decode GEMV with the all-reduce epilogue: the one-wave launch shape and the launch.
#include "gemv/gemv_all_reduce.hpp"

#include <algorithm>
#include <tuple>

#include "common/check.hpp"
#include "common/memo.hpp"
#include "gemv/gemv_params.hpp"

namespace weave::detail {

namespace {

// The plain GEMV's own split where its clusters fit one wave here (on a GPU of its own, mostly the
// plan mode decode's GEMV would make anyway), else the least modelled time among the splits that
// fit. GemmAllReduce's mode decode runs this split too, so the two modes sum K in one order.
GemvConfig one_wave_config(const GemmProblem& problem, int num_sms, int ranks_per_device) {
  const int share = std::max(1, ranks_per_device);
  const GemvResidency device = gemv_device_residency(problem.mode, /*all_reduce_epilogue=*/true);
  // Ranks sharing the GPU (the emulated world) each get their part of its clusters.
  const GemvResidency shared = [device, share](const GemvConfig& c) { return device(c) / share; };
  // This epilogue's pushed reduction lands whole LL units (4 rows).
  constexpr int kGranule = gemv::kRowsPerCta / kGemvLlUnitsPerBand;
  const GemvConfig as_decode = gemv_config(problem, num_sms, gemv_planned_split(problem, num_sms),
                                           GemvArgs::Path::kRegisters, {}, shared, false, 0, 0, kGranule);
  if (as_decode.waves == 1) return as_decode;
  return gemv_config(problem, num_sms, 0, GemvArgs::Path::kRegisters, {}, shared, /*one_wave=*/true, 0, 0, kGranule);
}

}  // namespace

GemvConfig gemv_all_reduce_config(const GemmProblem& problem, int num_sms, int ranks_per_device) {
  int device = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  // Memoised: a decode step launches the same few shapes over and over (planning weighs 16 splits).
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int, int, int>;
  static Memo<Key, GemvConfig> memo;
  const Key key{device, problem.m, problem.n, problem.k, static_cast<int>(problem.mode), num_sms, ranks_per_device};
  return memo.get(key, [&] { return one_wave_config(problem, num_sms, ranks_per_device); });
}

void gemv_all_reduce_launch(const GemvArgs& args, const GemvAllReduce& ar, int num_sms, cudaStream_t stream) {
  const GemmProblem problem = gemv::checked_problem(args, num_sms);
  WEAVE_EXPECT_ARG(args.split == 0, "gemv all-reduce: argument 'split' must be 0 (the one-wave planner's), got "
                                        << args.split);
  WEAVE_EXPECT_ARG(args.out_dtype == DType::kBF16 && args.n % 4 == 0 && args.ldc % 4 == 0 &&
                       reinterpret_cast<uintptr_t>(args.c) % 8 == 0,
                   "gemv all-reduce: C must be bf16 with N and ldc multiples of 4 and 8-byte aligned (got N "
                       << args.n << ", ldc " << args.ldc << ")");
  WEAVE_EXPECT(ar.payload_bytes == static_cast<uint64_t>(args.m) * static_cast<uint64_t>(args.n) * 2 &&
                   ar.source_bytes == gemv_ll_source_bytes(args.n) && comm::valid_slot_count(ar.slots),
               Status::kInternal,
               "gemv all-reduce: LL parameters do not match the call (payload_bytes "
                   << ar.payload_bytes << ", want M x N x 2 = " << args.m * args.n * 2 << "; source_bytes "
                   << ar.source_bytes << ", want " << gemv_ll_source_bytes(args.n) << "; slots " << ar.slots
                   << ", a power of two)");
  const GemvConfig cfg = gemv_all_reduce_config(problem, num_sms, ar.p.ranks_per_device);
  const gemv::KernelParams p = gemv::kernel_params(args, cfg);
  // No PDL where ranks share the GPU: a rank's early grid could hold SMs a peer's kernel needs.
  const gemv::Launch launch{cfg, WeightPath::kRegisters, args.pdl && ar.p.ranks_per_device <= 1, stream};
  gemv::launch_all_reduce(args.mode, p, ar, launch);
}

}  // namespace weave::detail
