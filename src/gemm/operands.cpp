// Operand rules and kernel-argument building of the tiled GEMM (gemm/operands.hpp).
#include "gemm/operands.hpp"

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "gemm/planner.hpp"
#include "hopper/tma_descriptor.hpp"
#include "hopper/wait_record.hpp"
#include "weave/quant.hpp"

namespace weave::gemm {

// The epilogue's TMA-store map over `planes` stacked [m, n] outputs of `dtype` (gemm/kernel_args.hpp).
CUtensorMap make_epilogue_map(const char* what, void* base, DType dtype, int64_t planes, int64_t m, int64_t n,
                              int64_t ld, int box_bytes) {
  WEAVE_EXPECT(box_bytes == 128 || box_bytes == 64, Status::kInternal,
               "epilogue map '" << what << "': box rows are 128 or 64 bytes (got " << box_bytes << ")");
  return hopper::make_tma_3d_planes(what, base, dtype, planes, m, n, ld, m * ld, kEpilogueBoxRows,
                                    box_bytes / static_cast<int>(dtype_bytes(dtype)),
                                    box_bytes == 128 ? hopper::TmaSwizzle::k128B : hopper::TmaSwizzle::k64B);
}

DType gemm_input_dtype(ScaleMode mode) { return mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3; }

namespace {

// Blockscale A scales in ScaleLayout::kMnMajor: fp32 [M, K/128] with strides (1, ld), ld >= M and
// a multiple of 4, base 16-byte aligned (each K block's column is one TMA box). A stride that
// can never be used (rows when M = 1, columns when K/128 = 1) is not checked.
void expect_mn_major_block_scales(const TensorView& v, int64_t m, int64_t kb, int device) {
  WEAVE_EXPECT_ARG(v.rank == 2 && v.shape[0] == m && v.shape[1] == kb && v.dtype == DType::kF32,
                   "argument 'scale_a': scale_layout mn-major needs fp32 [" << m << ", " << kb << "] (got "
                                                                            << v.describe() << ")");
  WEAVE_EXPECT_ARG(v.device == device, "argument 'scale_a': must live on cuda:" << device << " (got " << v.describe()
                                                                                 << ")");
  WEAVE_EXPECT_ARG(m == 1 || v.strides[0] == 1,
                   "argument 'scale_a': scale_layout mn-major needs M-contiguous scales, strides (1, ld) (got "
                       << v.describe() << "; row-major scales are scale_layout raw)");
  WEAVE_EXPECT_ARG(kb == 1 || (v.strides[1] >= m && v.strides[1] % 4 == 0),
                   "argument 'scale_a': scale_layout mn-major needs a column stride >= M = "
                       << m << " and a multiple of 4 floats (16 bytes, the TMA row pitch) (got " << v.describe() << ")");
  WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(v.data) % 16 == 0,
                   "argument 'scale_a': scale_layout mn-major needs a 16-byte aligned base (TMA) (got "
                       << v.data << ")");
}

// The column stride the TMA map of MN-major A scales uses (the dense one when it is never used).
int64_t mn_major_column_stride(const TensorView& v, int64_t m) {
  return v.shape[1] > 1 ? v.strides[1] : ref::mn_major_scale_ld(m);
}

}  // namespace

void check_gemm_inputs(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                       int device) {
  const DType in = gemm_input_dtype(p.mode);
  expect_matrix(a, "A", MatrixRule{in, p.m, p.k, true, true, device});
  expect_matrix(b, "B", MatrixRule{in, p.n, p.k, true, true, device});
  switch (p.mode) {
    case ScaleMode::kBF16:
      WEAVE_EXPECT_ARG(s.a.rank == 0 && s.b.rank == 0,
                       "argument 'scales': mode bf16 takes no scales (got scale_a rank " << s.a.rank << ", scale_b rank "
                                                                                         << s.b.rank << ")");
      break;
    case ScaleMode::kPtpc:
      expect_vector(s.a, "scale_a", DType::kF32, p.m, device);
      expect_vector(s.b, "scale_b", DType::kF32, p.n, device);
      break;
    case ScaleMode::kBlockscale: {
      // The layout is explicit (problem.scale_layout): raw is row-major, K-block contiguous;
      // mn-major is M-contiguous. A tensor in the other layout fails that layout's rule instead
      // of being guessed.
      const int64_t kb = p.k / 128;
      if (p.scale_layout == ScaleLayout::kMnMajor) {
        expect_mn_major_block_scales(s.a, p.m, kb, device);
      } else {
        WEAVE_EXPECT_ARG(!(s.a.rank == 2 && kb > 1 && p.m > 1 && s.a.strides[1] != 1 && s.a.strides[0] == 1),
                         "argument 'scale_a': last dimension must be contiguous (stride 1) for scale_layout raw (got "
                             << s.a.describe() << "); M-contiguous scales are read with scale_layout mn-major");
        expect_matrix(s.a, "scale_a", MatrixRule{DType::kF32, p.m, kb, true, false, device});
      }
      expect_matrix(s.b, "scale_b", MatrixRule{DType::kF32, (p.n + 127) / 128, kb, true, false, device});
      WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(s.a.data) % 4 == 0 && reinterpret_cast<uintptr_t>(s.b.data) % 4 == 0,
                       "arguments 'scale_a'/'scale_b': must be 4-byte aligned fp32");
      break;
    }
    case ScaleMode::kMxfp8: {
      // The layout is explicit (problem.scale_layout), so a tensor whose shape happens to fit both
      // layouts (e.g. M = 1, K = 128) is read as the one declared.
      const int64_t groups = p.k / 32, b_rows = (p.n + 31) / 32;
      if (p.scale_layout == ScaleLayout::kRaw) {
        expect_matrix(s.a, "scale_a", MatrixRule{DType::kUE8M0, p.m, groups, true, false, device});
        expect_matrix(s.b, "scale_b", MatrixRule{DType::kUE8M0, b_rows, groups, true, false, device});
      } else {
        // pack_mxfp8_scales' uint32 words [ceil(K/128), rows], viewed as bytes [ceil(K/128), 4 * rows].
        const int64_t k_words = (p.k + 127) / 128;
        expect_matrix(s.a, "scale_a", MatrixRule{DType::kUE8M0, k_words, 4 * p.m, true, false, device});
        expect_matrix(s.b, "scale_b", MatrixRule{DType::kUE8M0, k_words, 4 * b_rows, true, false, device});
        WEAVE_EXPECT_ARG(s.a.ld() % 4 == 0 && s.b.ld() % 4 == 0,
                         "arguments 'scale_a'/'scale_b': packed mxfp8 rows must be whole uint32 words (leading "
                         "dimensions "
                             << s.a.ld() << " and " << s.b.ld() << " bytes must be multiples of 4)");
      }
      WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(s.a.data) % 4 == 0 && reinterpret_cast<uintptr_t>(s.b.data) % 4 == 0,
                       "arguments 'scale_a'/'scale_b': mxfp8 scale tensors must be 4-byte aligned (the kernels copy "
                       "aligned 4-byte words)");
      break;
    }
  }
}

detail::GemvArgs make_gemv_args(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                                void* c, int64_t ldc) {
  detail::GemvArgs g{};
  g.a = a.data;
  g.b = b.data;
  g.scale_a = s.a.data;
  g.scale_b = s.b.data;
  g.c = c;
  g.m = p.m;
  g.n = p.n;
  g.k = p.k;
  g.lda = a.ld();
  g.ldb = b.ld();
  g.ldc = ldc;
  g.mode = p.mode;
  g.out_dtype = p.out_dtype;
  if (p.mode == ScaleMode::kBlockscale) {
    // Either layout, through its strides (a stride of an extent-1 dimension is never used).
    g.scale_a_row_stride = p.m > 1 ? s.a.strides[0] : 0;
    g.scale_a_k_stride = s.a.cols() > 1 ? s.a.strides[1] : 0;  // (0, 0): gemv_launch's dense default
  }
  return g;
}

bool gemv_scales_dense(const GemmProblem& p, const GemmScales& s) {
  if (p.mode != ScaleMode::kBlockscale && p.mode != ScaleMode::kMxfp8) return true;
  // Blockscale's A scales are read through their strides (either layout); B's densely.
  if (p.mode == ScaleMode::kBlockscale) return s.b.ld() == s.b.cols();
  return s.a.ld() == s.a.cols() && s.b.ld() == s.b.cols();
}

void check_gemv_scales(const GemmProblem& p, const GemmScales& s) {
  // Blockscale: only B's scales are read densely (A's through their strides, either layout).
  const bool block = p.mode == ScaleMode::kBlockscale;
  WEAVE_EXPECT_ARG(gemv_scales_dense(p, s),
                   (block ? "argument 'scale_b'" : "arguments 'scale_a'/'scale_b'")
                       << ": m = " << p.m << " runs the decode GEMV, which reads " << to_string(p.mode)
                       << (block ? " B scales densely; its leading dimension must equal its column count (got "
                                 : " scales densely; leading dimensions must equal the column counts (got ")
                       << (block ? "" : std::to_string(s.a.ld()) + " / " + std::to_string(s.a.cols()) + " and ")
                       << s.b.ld() << " / " << s.b.cols() << ")");
}

GemmPlan fixed_tile_plan(const GemmProblem& p, int num_sms, int block_m, int block_n, int grid) {
  GemmPlanOverrides ov;
  ov.block_m = block_m;
  ov.block_n = block_n;
  ov.split_k = 1;
  ov.grid = grid;
  return gemm_plan(p, num_sms, ov);
}

MainloopDebug MainloopDebug::from_env() {
  MainloopDebug d;
  d.drop_full_wait = env::get_bool("WEAVE_GEMM_DEBUG_DROP_WAIT", false);
  if (d.drop_full_wait)
    WEAVE_LOG(kWarn, "WEAVE_GEMM_DEBUG_DROP_WAIT=1: GEMM consumers skip the full-barrier wait before reading a stage "
                     "(negative control; results will be wrong)");
  d.early_release = env::get_bool("WEAVE_GEMM_DEBUG_EARLY_RELEASE", false);
  if (d.early_release)
    WEAVE_LOG(kWarn, "WEAVE_GEMM_DEBUG_EARLY_RELEASE=1: GEMM consumers release a stage before reading it, where the "
                     "instance has a separate debug role (negative control; results will be wrong)");
  const int64_t stall = env::get_int("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", -1);
  WEAVE_EXPECT_ARG(stall >= -1 && stall < (int64_t{1} << 31),
                   "WEAVE_GEMM_DEBUG_STALL_K_BLOCK: a K-block index >= 0, or -1 for off (got " << stall << ")");
  d.stall_k_block = static_cast<int32_t>(stall);
  if (d.stall_k_block >= 0)
    WEAVE_LOG(kWarn, "WEAVE_GEMM_DEBUG_STALL_K_BLOCK=" << stall << ": the GEMM producer never loads that K block "
                     "(debug: the pipeline waits time out and the kernel aborts; results are incomplete)");
  const int64_t ms = env::get_int("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", 0);
  WEAVE_EXPECT_ARG(ms >= 0 && ms <= 3'600'000,
                   "WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS: 0 (default bound) to 3600000 ms (got " << ms << ")");
  d.pipeline_timeout_ns = static_cast<uint64_t>(ms) * 1'000'000ull;
  return d;
}

CUtensorMap make_multicast_b_map(const GemmProblem& p, const GemmPlan& plan, const TensorView& b) {
  WEAVE_EXPECT(plan.cluster == 2 && plan.block_n % 16 == 0, Status::kInternal,
               "half-B map for a plan of cluster " << plan.cluster << ", tile " << plan.block_m << "x" << plan.block_n);
  return hopper::make_tma_2d("B", b.data, gemm_input_dtype(p.mode), p.n, p.k, b.ld(), plan.block_n / 2, plan.block_k,
                             hopper::TmaSwizzle::k128B);
}

MainloopArgs make_mainloop_args(const GemmProblem& p, const GemmPlan& plan, const TensorView& a, const TensorView& b,
                                const GemmScales& s, const MainloopDebug& debug) {
  MainloopArgs m{};
  const DType in = gemm_input_dtype(p.mode);
  m.tma_a = hopper::make_tma_2d("A", a.data, in, p.m, p.k, a.ld(), plan.block_m, plan.block_k,
                                hopper::TmaSwizzle::k128B);
  m.tma_b = hopper::make_tma_2d("B", b.data, in, p.n, p.k, b.ld(), plan.block_n, plan.block_k,
                                hopper::TmaSwizzle::k128B);
  // Only a last row block of 1-64 rows loads A by halves (gemm/kernel.cuh kHalfBoxA): encoded only then.
  if (plan.block_m == 128 && p.m % 128 != 0 && p.m % 128 <= 64)
    m.tma_a_half = hopper::make_tma_2d("A", a.data, in, p.m, p.k, a.ld(), 64, plan.block_k, hopper::TmaSwizzle::k128B);
  m.scale_a = s.a.data;
  m.scale_b = s.b.data;
  // Row strides in the unit each policy indexes: floats (blockscale), bytes (mxfp8 raw), uint32
  // words (mxfp8 packed).
  const bool packed = p.mode == ScaleMode::kMxfp8 && p.scale_layout == ScaleLayout::kPacked;
  const bool strided = p.mode == ScaleMode::kBlockscale || p.mode == ScaleMode::kMxfp8;
  m.scale_a_ld = strided ? (packed ? s.a.ld() / 4 : s.a.ld()) : 0;
  m.scale_b_ld = strided ? (packed ? s.b.ld() / 4 : s.b.ld()) : 0;
  if (p.mode == ScaleMode::kBlockscale && p.scale_layout == ScaleLayout::kMnMajor) {
    // Viewed as [K/128 rows, M cols]: row kb is K block kb's column of scales, one box per tile.
    const int64_t ld = mn_major_column_stride(s.a, p.m);
    m.scale_a_ld = ld;
    m.tma_scale_a = hopper::make_tma_2d("scale_a", s.a.data, DType::kF32, p.k / 128, p.m, ld, 1, plan.block_m,
                                        hopper::TmaSwizzle::kNone);
  }
  m.m = static_cast<int32_t>(p.m);
  m.n = static_cast<int32_t>(p.n);
  m.k = static_cast<int32_t>(p.k);
  m.group_rows = plan.group_rows;
  const int64_t k_blocks = (p.k + plan.block_k - 1) / plan.block_k;
  m.split_k = plan.split_k;
  m.k_blocks_per_split = static_cast<int32_t>(gemm::split_k_blocks_per_split(k_blocks, plan.split_k));
  WEAVE_EXPECT(plan.split_k >= 1 && static_cast<int64_t>(plan.split_k - 1) * m.k_blocks_per_split < k_blocks,
               Status::kInternal,
               "split-K plan " << plan.split_k << " over " << k_blocks << " K blocks leaves an empty split");
  m.debug_drop_full_wait = debug.drop_full_wait ? 1 : 0;
  m.debug_early_release = debug.early_release ? 1 : 0;
  m.debug_stall_k_block = debug.stall_k_block;
  m.pipeline_timeout_ns = debug.pipeline_timeout_ns;
  m.timeout_record = hopper::wait_timeout_record();
  return m;
}

}  // namespace weave::gemm
