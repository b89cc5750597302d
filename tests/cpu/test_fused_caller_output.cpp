// The fused operators' caller output (fused/caller_output.hpp) on the CPU: the rules run() checks
// before any GPU work, each error naming 'out' and the rule, on views that point nowhere (the
// checks read addresses, never memory). The copy itself is a GPU test (test_fused_ops_typed.cu:
// EmulatedFusedOp/*.CallerOutputIsTheWindowViewCopiedAfterTheCall).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "fused/caller_output.hpp"
#include "support/expect_error.hpp"

using namespace weave;

namespace {

// A two-rank window as mapped on rank 0 of device 0: rank 0's at 1 MiB, rank 1's at 8 MiB.
constexpr std::uint64_t kWindowBytes = 1 << 20;
WindowHandle two_rank_window() {
  WindowHandle h;
  h.rank = 0;
  h.world = 2;
  h.bytes = kWindowBytes;
  h.base[0] = reinterpret_cast<char*>(std::uintptr_t{1} << 20);
  h.base[1] = reinterpret_cast<char*>(std::uintptr_t{8} << 20);
  return h;
}

constexpr std::int64_t kRows = 96, kCols = 256;
constexpr int kDev = 0;
char* const kFree = reinterpret_cast<char*>(std::uintptr_t{64} << 20);  // outside both windows

TensorView out_at(void* p, DType dt = DType::kBF16, std::int64_t rows = kRows, std::int64_t cols = kCols,
                  std::int64_t ld = kCols, int dev = kDev) {
  return TensorView::matrix(p, dt, rows, cols, ld, dev);
}

std::string rejected(const TensorView& out, DType dt = DType::kBF16) {
  return test::error_of([&] { fused::check_caller_output(out, dt, kRows, kCols, kDev, two_rank_window()); });
}

}  // namespace

TEST(FusedCallerOutput, AcceptsDenseAndRowStridedBuffersOfTheOpsDtype) {
  const WindowHandle h = two_rank_window();
  EXPECT_NO_THROW(fused::check_caller_output(out_at(kFree), DType::kBF16, kRows, kCols, kDev, h));
  EXPECT_NO_THROW(fused::check_caller_output(out_at(kFree, DType::kF32), DType::kF32, kRows, kCols, kDev, h));
  // A row stride above N (a column slice of a wider buffer), not a multiple of 16 bytes: a copy
  // engine writes it, so only the base's alignment is asked.
  EXPECT_NO_THROW(fused::check_caller_output(out_at(kFree, DType::kBF16, kRows, kCols, kCols + 3), DType::kBF16,
                                             kRows, kCols, kDev, h));
  // Right after a window and right before one: adjacent, not overlapping.
  EXPECT_NO_THROW(fused::check_caller_output(out_at(h.base[0] + kWindowBytes), DType::kBF16, kRows, kCols, kDev, h));
  EXPECT_NO_THROW(fused::check_caller_output(out_at(h.base[1] - kRows * kCols * 2), DType::kBF16, kRows, kCols, kDev, h));
  // One row: its stride is never used.
  EXPECT_NO_THROW(fused::check_caller_output(out_at(kFree, DType::kBF16, 1, kCols, 1), DType::kBF16, 1, kCols, kDev, h));
}

TEST(FusedCallerOutput, EachBrokenRuleIsAnErrorNamingOutAndTheRule) {
  struct Case {
    TensorView out;
    DType want;
    const char* needle;
  };
  const WindowHandle h = two_rank_window();
  TensorView col_strided = out_at(kFree);
  col_strided.strides = {2 * kCols, 2, 0, 0};
  const Case cases[] = {
      {out_at(kFree, DType::kF32), DType::kBF16, "argument 'out': dtype must be bf16 (got fp32)"},
      {out_at(kFree, DType::kBF16), DType::kF32, "argument 'out': dtype must be fp32 (got bf16)"},
      {out_at(kFree, DType::kBF16, kRows / 2, kCols), DType::kBF16, "argument 'out': shape must be [96, 256] (got [48, 256])"},
      {out_at(kFree, DType::kBF16, kRows, kCols + 8, kCols + 8), DType::kBF16, "argument 'out': shape must be [96, 256]"},
      {TensorView::vector(kFree, DType::kBF16, kRows * kCols, kDev), DType::kBF16, "argument 'out': must be a 2-D matrix"},
      {out_at(nullptr), DType::kBF16, "argument 'out': data pointer is null"},
      {col_strided, DType::kBF16, "argument 'out': last dimension must be contiguous (stride 1; got 2)"},
      {out_at(kFree, DType::kBF16, kRows, kCols, kCols - 8), DType::kBF16, "must be >= the number of columns 256"},
      {out_at(kFree, DType::kBF16, kRows, kCols, kCols, 1), DType::kBF16, "argument 'out': must live in cuda:0 (got cuda:1)"},
      {out_at(kFree, DType::kBF16, kRows, kCols, kCols, kHostDevice), DType::kBF16, "must live in cuda:0 (got host memory)"},
      {out_at(kFree + 2), DType::kBF16, "argument 'out': base address must be 16-byte aligned (address mod 16 = 2)"},
      {out_at(h.base[0]), DType::kBF16, "argument 'out': overlaps the op's window (rank 0's"},
      {out_at(h.base[1] + 4096), DType::kBF16, "argument 'out': overlaps the op's window (rank 1's"},
      // Starting below a window and ending inside it.
      {out_at(h.base[1] - 4096), DType::kBF16, "overlaps the op's window (rank 1's"},
      // Rows far apart (row stride past the window) still straddle it.
      {out_at(h.base[0] - 16 * kCols * 2, DType::kBF16, kRows, kCols, 2 * kCols * 2 * 64), DType::kBF16,
       "overlaps the op's window (rank 0's"},
  };
  for (const Case& c : cases) {
    const std::string msg = rejected(c.out, c.want);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "want '" << c.needle << "' in: " << msg;
  }
}

TEST(FusedCallerOutput, AWindowNotMappedHereIsNotAskedAbout) {
  WindowHandle h = two_rank_window();
  const TensorView in_rank1 = out_at(h.base[1]);
  h.base[1] = nullptr;  // rank 1 outside this rank's NVLink domain: nothing of it has an address here
  EXPECT_NO_THROW(fused::check_caller_output(in_rank1, DType::kBF16, kRows, kCols, kDev, h));
}
