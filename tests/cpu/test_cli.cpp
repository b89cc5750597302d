// The `weave` tool as a user meets it: bad input gets exit status 2 and one message naming the
// option (or the unknown subcommand) and the rule, before any GPU work: no GPU probe, no idle
// wait, nothing printed first. On a machine without a GPU a check that came too late would show
// as the no-GPU message instead of the option's; each case below asserts it does not. Help texts
// are checked for leftovers (issue numbers) and messages for the build machine's source paths.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "cli/gemm_targets.hpp"
#include "comm/transport_build.hpp"
#include "weave/device.hpp"
#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"
#include "weave/version.hpp"
#include "support/scoped_file.hpp"

namespace {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr, interleaved
};

// Runs the built `weave` with `args`; kills it after 60 s (a check that let a benchmark start).
CliRun run_weave(const std::vector<std::string>& args) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::vector<std::string> storage{WEAVE_TEST_CLI};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execv(argv[0], argv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  CliRun r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  char buf[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0 || ::poll(&p, 1, left) <= 0) {
      ::kill(pid, SIGKILL);
      r.out += "\n[killed after 60 s]";
      break;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    r.out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

std::string missing_dir_file() {
  return (std::filesystem::temp_directory_path() / "weave-no-such-folder" / "out.json").string();
}

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> says;  // substrings the message must contain
};

std::vector<BadInput> bad_inputs() {
  const std::string nofolder = missing_dir_file();
  const std::string folder = std::filesystem::temp_directory_path().string();
  std::vector<BadInput> cases = {
      // sizes: sign, zero, junk, overflow, order
      {"BenchCommNegativeMaxBytes", {"bench", "comm", "-e", "-1"}, {"-e/--maxbytes '-1'", "digits with an optional K, M or G"}},
      {"BenchCommNegativeMinBytes", {"bench", "comm", "-b", "-8K"}, {"-b/--minbytes '-8K'"}},
      {"BenchCommZeroBytes", {"bench", "comm", "-b", "0"}, {"-b/--minbytes '0'", "at least 1 byte"}},
      {"BenchCommJunkSize", {"bench", "comm", "-e", "64Mjunk"}, {"-e/--maxbytes '64Mjunk'"}},
      {"BenchCommHugeSize", {"bench", "comm", "-e", "18446744073709551615"}, {"-e/--maxbytes", "at most 1024.00 GiB"}},
      {"BenchCommMinAboveMax", {"bench", "comm", "-b", "1M", "-e", "8K"}, {"-b/--minbytes 1M must not exceed -e/--maxbytes 8K"}},
      {"BenchCommStepFactorOne", {"bench", "comm", "-f", "1"}, {"--stepfactor", "not in range 2 to 1024"}},
      {"BenchCommStepFactorJunk", {"bench", "comm", "-f", "4x"}, {"--stepfactor"}},
      {"BenchCommNegativeLsaBlocks", {"bench", "comm", "--lsa-blocks", "-1"}, {"--lsa-blocks", "not in range 0 to 4096"}},
      {"BenchCommUnknownOp", {"bench", "comm", "--op", "all-to-all"}, {"--op 'all-to-all'"}},
      {"BenchCommBadDtype", {"bench", "comm", "--dtype", "fp8"}, {"--dtype 'fp8'"}},
      {"BenchCommJsonInMissingFolder", {"bench", "comm", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"PlanCommNegativeBytes", {"plan", "comm", "--bytes", "-5"}, {"--bytes '-5'", "digits with an optional K, M or G"}},
      {"PlanCommZeroBytes", {"plan", "comm", "--bytes", "0"}, {"--bytes '0'", "at least 1 byte"}},
      {"PlanCommHugeBytes", {"plan", "comm", "--bytes", "2000G"}, {"--bytes '2000G'", "at most"}},
      {"PlanCommLsaTeamAboveWorld", {"plan", "comm", "--world", "2", "--lsa-team", "4"}, {"--lsa-team 4", "at most --world = 2"}},
      {"PlanCommMaxBlocksZero", {"plan", "comm", "--max-blocks", "0"}, {"--max-blocks", "not in range"}},
      {"PlanCommWorldLetters", {"plan", "comm", "--world", "two"}, {"--world: Value two is not an integer"}},
      // GEMM planner overrides
      {"PlanGemmTileTrailingJunk", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--tile", "128x256junk"},
       {"--tile '128x256junk'", "BMxBN"}},
      {"PlanGemmTileZero", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--tile", "0x0"}, {"--tile '0x0'"}},
      {"PlanGemmTileNotBuilt", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--tile", "192x192"},
       {"--tile '192x192'", "no bf16/bf16 kernel of that tile is built (built: "}},
      {"PlanGemmGridHuge", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--grid", "100000"},
       {"--grid", "not in range 0 to 1024"}},
      {"PlanGemmGridAboveSms", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--grid", "200"},
       {"--grid: override 'grid' = 200", "at most one CTA per SM, so 1 .. num_sms = 132"}},
      {"PlanGemmGridAboveSmsOnGemv", {"plan", "gemm", "-m", "4", "-n", "4096", "-k", "4096", "--sms", "8", "--grid", "9"},
       {"--grid: override 'grid' = 9", "num_sms = 8"}},
      {"PlanGemmGridNegative", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--grid", "-3"}, {"--grid"}},
      {"PlanGemmSmsZero", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--sms", "0"},
       {"--sms", "not in range 1 to 1024"}},
      {"PlanGemmSplitK17", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--split-k", "17"},
       {"--split-k", "not in range 0 to 16"}},
      {"PlanGemmSplitKAboveKBlocks", {"plan", "gemm", "-m", "128", "-n", "128", "-k", "128", "--split-k", "16"},
       {"--split-k: override 'split_k' = 16"}},
      {"PlanGemmClusterThree", {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--cluster", "3"},
       {"--cluster", "not in range 0 to 2"}},
      {"PlanGemmClusterOddGrid",
       {"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--quant", "ptpc", "--cluster", "2", "--grid", "7"},
       {"--grid: override 'grid' = 7: 2-CTA clusters"}},
      {"PlanGemmGridOnGemv", {"plan", "gemm", "-m", "4", "-n", "4096", "-k", "4096", "--grid", "8"},
       {"--grid: m = 4 goes to the decode GEMV"}},
      {"BenchDecodeCompareRoutesWithAForcedRoute",
       {"bench", "decode", "--compare-routes", "--decode-route", "gemv"},
       {"--compare-routes", "leave --decode-route at auto"}},
      {"BenchDecodeRouteBad", {"bench", "decode", "--decode-route", "fast"}, {"--decode-route 'fast'"}},
      {"PlanGemmDecodeRouteBad", {"plan", "gemm", "-m", "4", "-n", "4096", "-k", "4096", "--decode-route", "fast"},
       {"--decode-route 'fast'"}},
      {"PlanGemmDecodeRouteGemvPast32", {"plan", "gemm", "-m", "33", "-n", "4096", "-k", "4096", "--decode-route", "gemv"},
       {"--decode-route", "m = 33 > 32"}},
      {"PlanGemmZeroM", {"plan", "gemm", "-m", "0", "-n", "128", "-k", "128"}, {"-m", "not in range"}},
      // a rule of the kernels is the user's input too: one line naming the options
      {"PlanGemmKNotMultipleOfTheScaleBlock", {"plan", "gemm", "-m", "4096", "-n", "5120", "-k", "2000", "--quant", "blockscale"},
       {"weave plan gemm: -k 2000 --quant blockscale: k must be a multiple of 128 for blockscale"}},
      {"PlanGemmNNotMultipleOf8", {"plan", "gemm", "-m", "128", "-n", "100", "-k", "128"},
       {"-n 100 --out bf16: n must be a multiple of 8 for bf16 output"}},
      {"PlanGemmMAboveTheKernels", {"plan", "gemm", "-m", "2147483648", "-n", "128", "-k", "128"},
       {"-m", "not in range 1 to 2147483647"}},
      // non-numbers are called non-numbers (CLI::Range called them out of range)
      {"PlanGemmMLetters", {"plan", "gemm", "-m", "abc", "-n", "128", "-k", "128"}, {"-m: Value abc is not an integer"}},
      {"PlanGemmMFraction", {"plan", "gemm", "-m", "1.5", "-n", "128", "-k", "128"}, {"-m: Value 1.5 is not an integer"}},
      {"PlanGemmMExponent", {"plan", "gemm", "-m", "1e3", "-n", "128", "-k", "128"}, {"-m: Value 1e3 is not an integer"}},
      {"PlanGemmSmsLetters", {"plan", "gemm", "-m", "128", "-n", "128", "-k", "128", "--sms", "many"},
       {"--sms: Value many is not an integer"}},
      {"PlanGemmAgSmsFraction", {"plan", "gemm-ag", "--sms", "0.5"}, {"--sms: Value 0.5 is not an integer"}},
      {"PlanGemmBadQuant", {"plan", "gemm", "-m", "128", "-n", "128", "-k", "128", "--quant", "fp4"}, {"--quant 'fp4'"}},
      {"PlanGemmBadOut", {"plan", "gemm", "-m", "128", "-n", "128", "-k", "128", "--out", "e4m3"}, {"--out 'e4m3'"}},
      // bench gemm shapes
      {"BenchGemmZeroShape", {"bench", "gemm", "-m", "0", "-n", "0", "-k", "0"}, {"-m", "not in range 1 to 2147483647"}},
      {"BenchGemmPartialShape", {"bench", "gemm", "-m", "128"}, {"-m, -n, -k: give all three", "-m 128"}},
      {"BenchGemmHugeShape", {"bench", "gemm", "-m", "2147483647", "-n", "2147483647", "-k", "2147483647"},
       {"each of M*K, N*K and M*N must be at most 2^32"}},
      {"BenchGemmShapeJunk", {"bench", "gemm", "--shapes", "128x128x128x"}, {"--shapes '128x128x128x'", "MxNxK"}},
      {"BenchGemmShapeZero", {"bench", "gemm", "--shapes", "128x0x128"}, {"--shapes '128x0x128'"}},
      {"BenchGemmCpuRefNan", {"bench", "gemm", "--cpu-ref-max", "nan"}, {"--cpu-ref-max"}},
      {"BenchGemmNegativeSeed", {"bench", "gemm", "--seed", "-1"}, {"--seed"}},
      {"BenchGemmBadQuant", {"bench", "gemm", "--quant", "bf16,int8"}, {"--quant: 'int8'"}},
      {"BenchGemmJsonInMissingFolder", {"bench", "gemm", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchGemmJsonIsAFolder", {"bench", "gemm", "--json", folder}, {"is a directory"}},
      {"BenchGemmKNotMultipleOfTheScaleBlock", {"bench", "gemm", "-m", "128", "-n", "128", "-k", "96", "--quant", "bf16,blockscale,mxfp8"},
       {"-k 96 --quant blockscale: k must be a multiple of 128"}},
      {"BenchGemmShapesNNotMultipleOf8", {"bench", "gemm", "--shapes", "4096x4096x4096,128x100x128"},
       {"--shapes 128x100x128 --out bf16: n must be a multiple of 8"}},
      {"BenchGemmEmptyQuantItem", {"bench", "gemm", "--quant", "bf16,"}, {"--quant: 'bf16,' has an empty item"}},
      {"BenchGemmEmptyShapesItem", {"bench", "gemm", "--shapes", ",128x128x128"}, {"--shapes: ',128x128x128' has an empty item"}},
      // bench copy and the shared options
      {"BenchCopyNegativeSize", {"bench", "copy", "--sizes", "-1"}, {"--sizes -1", "at least 16 bytes"}},
      {"BenchCopyNanSize", {"bench", "copy", "--sizes", "nan"}, {"--sizes"}},
      {"BenchCopyHugeSize", {"bench", "copy", "--sizes", "1e12"}, {"--sizes", "at most 65536 MB"}},
      {"BenchCopyJsonInMissingFolder", {"bench", "copy", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      {"BenchJsonInMissingFolder", {"bench", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchNegativeDevice", {"bench", "--devices", "-1"}, {"--devices: Value -1 not in range 0 to 2147483647"}},
      {"BenchCopyNegativeDevice", {"bench", "copy", "--devices", "-1"}, {"--devices: Value -1 not in range 0 to 2147483647"}},
      {"BenchDeviceLetters", {"bench", "--devices", "0,one"}, {"--devices: Value one is not an integer"}},
      {"BenchEmptyDeviceItem", {"bench", "copy", "--devices", "0,,1"}, {"--devices: '0,,1' has an empty item"}},
      {"BenchCopyEmptySizesItem", {"bench", "copy", "--sizes", "64,,256"}, {"--sizes: '64,,256' has an empty item"}},
      {"BenchCommEmptyOpItem", {"bench", "comm", "--op", "all-gather,,all-reduce"}, {"--op: 'all-gather,,all-reduce' has an empty item"}},
      {"BenchRepeatedDevice", {"bench", "copy", "--devices", "0,0"}, {"--devices: ordinal 0 is listed twice"}},
      {"BenchIdleWaitNan", {"bench", "copy", "--idle-wait", "nan"}, {"--idle-wait"}},
      {"BenchItersZero", {"bench", "gemm", "-i", "0"}, {"--iters", "not in range 1 to 100000"}},
      {"BenchWarmupNegative", {"bench", "comm", "-w", "-1"}, {"--warmup"}},
      {"BenchCallsHuge", {"bench", "copy", "--calls", "99999999999"}, {"--calls"}},
      // gemm-ag: the planner and the bench suite (GemmAllGather::validate's rules, named after the option)
      {"PlanGemmAgNNotMultipleOf8", {"plan", "gemm-ag", "--n", "100"}, {"--n 100: n must be a multiple of 8"}},
      {"PlanGemmAgFp8ToFp32", {"plan", "gemm-ag", "--quant", "ptpc", "--out", "fp32"},
       {"--quant ptpc --out fp32: fp8 modes (ptpc) produce bf16 output"}},
      {"PlanGemmAgBadQuant", {"plan", "gemm-ag", "--quant", "fp4"}, {"--quant 'fp4'"}},
      {"PlanGemmAgBadMode", {"plan", "gemm-ag", "--mode", "fused"}, {"--mode 'fused'", "fused-lsa"}},
      {"PlanGemmAgMxRouteBadName", {"plan", "gemm-ag", "--quant", "mxfp8", "--mx-route", "fp8"}, {"--mx-route 'fp8'", "auto, native or bf16"}},
      {"PlanGemmAgMxRouteNotMxfp8", {"plan", "gemm-ag", "--mx-route", "bf16"}, {"--mx-route bf16: applies to --quant mxfp8 only"}},
      {"PlanGemmArMxRouteNotMxfp8", {"plan", "gemm-ar", "--quant", "ptpc", "--mx-route", "native"}, {"--mx-route native: applies to --quant mxfp8 only"}},
      {"PlanGemmAgWorldNine", {"plan", "gemm-ag", "--world", "9"}, {"--world 9: world must be in 1..8"}},
      {"PlanGemmAgMAboveMMax", {"plan", "gemm-ag", "-m", "128,4096", "--m-max", "1024"}, {"-m/--m 4096: above --m-max 1024"}},
      {"PlanGemmAgZeroM", {"plan", "gemm-ag", "-m", "0"}, {"--m", "not in range"}},
      {"PlanGemmAgEmptyMItem", {"plan", "gemm-ag", "--m", "1024,,2048"}, {"-m/--m: '1024,,2048' has an empty item"}},
      {"PlanGemmAgMLetters", {"plan", "gemm-ag", "--m", "1024,lots"}, {"-m/--m: Value lots is not an integer"}},
      {"PlanGemmAgKForBlockscale", {"plan", "gemm-ag", "--quant", "blockscale", "--k", "100"}, {"--k 100", "the per-rank GEMM"}},
      {"PlanGemmAgJsonInMissingFolder", {"plan", "gemm-ag", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchGemmAgWorldNine", {"bench", "gemm-ag", "--emulate-world", "9"}, {"--emulate-world", "not in range 1 to 8"}},
      {"BenchGemmAgDevicesAndEmulated", {"bench", "gemm-ag", "--devices", "0,1", "--emulate-world", "2"},
       {"--emulate-world and --devices: one or the other"}},
      {"BenchGemmAgOnlyNcclArmsEmulated", {"bench", "gemm-ag", "--emulate-world", "2", "--arms", "cublaslt+nccl"},
       {"--arms: none of the arms named runs at world 2"}},
      {"BenchGemmAgUnknownArm", {"bench", "gemm-ag", "--arms", "gemm-only,nccl"}, {"--arms: 'nccl'"}},
      {"BenchGemmAgNNotMultipleOf8", {"bench", "gemm-ag", "--emulate-world", "2", "-n", "100"}, {"--n 100"}},
      {"BenchGemmAgFp8ToFp32", {"bench", "gemm-ag", "--quant", "blockscale", "--out", "fp32"}, {"--quant blockscale --out fp32"}},
      {"BenchGemmAgJsonInMissingFolder", {"bench", "gemm-ag", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      // gemm-ar: the planner and the bench suite (GemmAllReduce::validate's rules, named after the option)
      {"PlanGemmArNNotMultipleOf8", {"plan", "gemm-ar", "--n", "100"}, {"--n 100: n must be a multiple of 8"}},
      {"PlanGemmArBadQuant", {"plan", "gemm-ar", "--quant", "fp4"}, {"--quant 'fp4'"}},
      {"PlanGemmArBadScaleLayout", {"plan", "gemm-ar", "--quant", "mxfp8", "--scale-layout", "tiled"}, {"--scale-layout 'tiled'"}},
      {"PlanGemmArBadMode", {"plan", "gemm-ar", "--mode", "fused-lsa"}, {"--mode 'fused-lsa'", "or fused"}},
      {"PlanGemmArWorldNine", {"plan", "gemm-ar", "--world", "9"}, {"--world 9: world must be in 1..8"}},
      {"PlanGemmArMAboveMMax", {"plan", "gemm-ar", "-m", "128,4096", "--m-max", "1024"}, {"-m/--m 4096: above --m-max 1024"}},
      {"PlanGemmArZeroM", {"plan", "gemm-ar", "-m", "0"}, {"--m", "not in range"}},
      {"PlanGemmArEmptyMItem", {"plan", "gemm-ar", "-m", "1024,"}, {"-m/--m: '1024,' has an empty item"}},
      {"PlanGemmArChunks17", {"plan", "gemm-ar", "--chunks", "17"}, {"--chunks 17: chunks must be in 0..16"}},
      {"PlanGemmArNegativeChunks", {"plan", "gemm-ar", "--chunks", "-1"}, {"--chunks -1: chunks must be in 0..16"}},
      {"PlanGemmArKForBlockscale", {"plan", "gemm-ar", "--quant", "blockscale", "--k", "100"},
       {"--k 100", "the per-rank GEMM [m_max, N, K_r]"}},
      {"PlanGemmArSmsZero", {"plan", "gemm-ar", "--sms", "0"}, {"--sms", "not in range 1 to 1024"}},
      {"PlanGemmArJsonInMissingFolder", {"plan", "gemm-ar", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchGemmArWorldNine", {"bench", "gemm-ar", "--emulate-world", "9"}, {"--emulate-world", "not in range 1 to 8"}},
      {"BenchGemmArDevicesAndEmulated", {"bench", "gemm-ar", "--devices", "0,1", "--emulate-world", "2"},
       {"--emulate-world and --devices: one or the other"}},
      {"BenchGemmArOnlyNcclBaselineEmulated", {"bench", "gemm-ar", "--emulate-world", "2", "--arms", "cublaslt+nccl-sym"},
       {"--arms: none of the arms named runs at world 2", "needs --devices"}},
      {"BenchGemmArUnknownArm", {"bench", "gemm-ar", "--arms", "gemm-only,nccl"}, {"--arms: 'nccl'"}},
      {"BenchGemmArEmptyArmItem", {"bench", "gemm-ar", "--arms", "gemm-only,,fused"}, {"--arms: 'gemm-only,,fused' has an empty item"}},
      {"BenchGemmArEmptyMItem", {"bench", "gemm-ar", "-m", ",128"}, {"-m/--m: ',128' has an empty item"}},
      {"BenchGemmArOnlySplitNccl", {"bench", "gemm-ar", "--emulate-world", "2", "--arms", "split-nccl"},
       {"--arms: none of the arms named runs at world 2", "no NCCL communicator"}},
      {"BenchGemmArNNotMultipleOf8", {"bench", "gemm-ar", "--emulate-world", "2", "-n", "100"}, {"--n 100"}},
      {"BenchGemmArChunks17", {"bench", "gemm-ar", "--chunks", "17"}, {"--chunks 17"}},
      {"BenchGemmArBadTimeout", {"bench", "gemm-ar", "--timeout", "nan"}, {"--timeout"}},
      {"BenchGemmArJsonInMissingFolder", {"bench", "gemm-ar", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      // gemm-rs: gemm-ar's shape options; M is the total rows, a multiple of the world (GemmReduceScatter::validate's
      // rules and that one, named after the option)
      {"PlanGemmRsMNotMultipleOfWorld", {"plan", "gemm-rs", "--world", "8", "-m", "128,1000,1001"},
       {"-m/--m 1001: M must be a multiple of the world (8)", "rank r receives rows [r M/W, (r+1) M/W)"}},
      {"PlanGemmRsMBelowTheWorld", {"plan", "gemm-rs", "--world", "2", "-m", "1"}, {"-m/--m 1: M must be a multiple of the world (2)"}},
      {"PlanGemmRsGemmArMode", {"plan", "gemm-rs", "--mode", "decode"},
       {"--mode 'decode': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused (decode is a gemm-ar mode)"}},
      {"PlanGemmRsBadMode", {"plan", "gemm-rs", "--mode", "fused-lsa"}, {"--mode 'fused-lsa'", "or fused"}},
      {"PlanGemmRsFusedBelowOneBand", {"plan", "gemm-rs", "--world", "2", "-m", "128", "--mode", "fused"},
       {"--mode fused -m/--m-max 128: mode fused needs m_max >= world x 128 = 256"}},
      {"PlanGemmRsNNotMultipleOf8", {"plan", "gemm-rs", "--n", "100"}, {"--n 100: n must be a multiple of 8"}},
      {"PlanGemmRsWorldNine", {"plan", "gemm-rs", "--world", "9"}, {"--world 9: world must be in 1..8"}},
      {"PlanGemmRsWorldZero", {"plan", "gemm-rs", "--world", "0"}, {"--world 0: world must be in 1..8"}},
      {"PlanGemmRsMAboveMMax", {"plan", "gemm-rs", "-m", "128,4096", "--m-max", "1024"}, {"-m/--m 4096: above --m-max 1024"}},
      {"PlanGemmRsChunks17", {"plan", "gemm-rs", "--chunks", "17"}, {"--chunks 17: chunks must be in 0..16"}},
      {"PlanGemmRsKForBlockscale", {"plan", "gemm-rs", "--quant", "blockscale", "--k", "100"},
       {"--k 100", "the per-rank GEMM [m_max, N, K_r]"}},
      {"PlanGemmRsMxRouteNotMxfp8", {"plan", "gemm-rs", "--mx-route", "native"}, {"--mx-route native: applies to --quant mxfp8 only"}},
      {"PlanGemmRsJsonInMissingFolder", {"plan", "gemm-rs", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchGemmRsMNotMultipleOfWorld", {"bench", "gemm-rs", "--emulate-world", "4", "-m", "1000,1002"},
       {"-m/--m 1002: M must be a multiple of the world (4)"}},
      {"BenchGemmRsWorldNine", {"bench", "gemm-rs", "--emulate-world", "9"}, {"--emulate-world", "not in range 1 to 8"}},
      {"BenchGemmRsDevicesAndEmulated", {"bench", "gemm-rs", "--devices", "0,1", "--emulate-world", "2"},
       {"--emulate-world and --devices: one or the other"}},
      {"BenchGemmRsOnlyNcclBaselineEmulated", {"bench", "gemm-rs", "--emulate-world", "2", "--arms", "cublaslt+nccl"},
       {"--arms: none of the arms named runs at world 2", "needs --devices"}},
      {"BenchGemmRsOnlyFusedBelowOneBand", {"bench", "gemm-rs", "--emulate-world", "2", "-m", "128", "--arms", "fused"},
       {"--arms: none of the arms named runs at world 2", "fused: not run (m_max 128 < world x 128 = 256"}},
      {"BenchGemmRsGemmArArm", {"bench", "gemm-rs", "--arms", "split-lsa,decode"}, {"--arms: 'decode' is not one of"}},
      {"BenchGemmRsNNotMultipleOf8", {"bench", "gemm-rs", "--emulate-world", "2", "-n", "100"}, {"--n 100"}},
      {"BenchGemmRsJsonInMissingFolder", {"bench", "gemm-rs", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      // ag-gemm: AllGatherGemm::validate's rules named after the option; fused-ce's quants
      {"PlanAgGemmNNotMultipleOf8", {"plan", "ag-gemm", "--n", "100"},
       {"--n 100 --out bf16: the gathered GEMM [world x m_max, N, K] = [8192, 100, 8192]: n must be a multiple of 8"}},
      {"PlanAgGemmKForBlockscale", {"plan", "ag-gemm", "--quant", "blockscale", "--k", "100"},
       {"--k 100 --quant blockscale: the gathered GEMM", "k must be a multiple of 128 for blockscale"}},
      {"PlanAgGemmMxfp8KNotMultipleOf128", {"plan", "ag-gemm", "--quant", "mxfp8", "--k", "2080"},
       {"--quant mxfp8 --k 2080: mxfp8 needs k a multiple of 128"}},
      {"PlanAgGemmPackedScales", {"plan", "ag-gemm", "--quant", "mxfp8", "--scale-layout", "packed"},
       {"--scale-layout packed --quant mxfp8: scale_layout must be raw", "interleaves the rows of several ranks"}},
      {"PlanAgGemmMnMajorScales", {"plan", "ag-gemm", "--quant", "blockscale", "--scale-layout", "mn-major"},
       {"--scale-layout mn-major --quant blockscale: scale_layout must be raw"}},
      {"PlanAgGemmFp8ToFp32", {"plan", "ag-gemm", "--quant", "ptpc", "--out", "fp32"},
       {"--quant ptpc --out fp32: fp8 modes (ptpc) produce bf16 output"}},
      {"PlanAgGemmBadOut", {"plan", "ag-gemm", "--out", "e4m3"}, {"--out 'e4m3': expected bf16 or fp32"}},
      {"PlanAgGemmBadQuant", {"plan", "ag-gemm", "--quant", "fp4"}, {"--quant 'fp4'"}},
      {"PlanAgGemmFusedMode", {"plan", "ag-gemm", "--mode", "fused-lsa"},
       {"--mode 'fused-lsa': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused-ce (AllGatherGemm's only "
        "fused mode is fused-ce)"}},
      {"PlanAgGemmFusedCeMxfp8", {"plan", "ag-gemm", "--mode", "fused-ce", "--quant", "mxfp8"},
       {"--mode fused-ce --quant mxfp8 --out bf16: mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output"}},
      {"PlanAgGemmFusedCeFp32", {"plan", "ag-gemm", "--mode", "fused-ce", "--out", "fp32", "--world", "4"},
       {"--mode fused-ce --quant bf16 --out fp32: mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output"}},
      {"PlanAgGemmGemmArMode", {"plan", "ag-gemm", "--mode", "decode"}, {"--mode 'decode': expected auto"}},
      {"PlanAgGemmWorldNine", {"plan", "ag-gemm", "--world", "9"}, {"--world 9: world must be in 1..8"}},
      {"PlanAgGemmMAboveMMax", {"plan", "ag-gemm", "-m", "128,4096", "--m-max", "1024"}, {"-m/--m 4096: above --m-max 1024"}},
      {"PlanAgGemmZeroM", {"plan", "ag-gemm", "-m", "0"}, {"--m", "not in range"}},
      {"PlanAgGemmEmptyMItem", {"plan", "ag-gemm", "-m", "128,,4096"}, {"-m/--m: '128,,4096' has an empty item"}},
      {"PlanAgGemmMxRouteNotMxfp8", {"plan", "ag-gemm", "--mx-route", "native"}, {"--mx-route native: applies to --quant mxfp8 only"}},
      {"PlanAgGemmRowParallelPreset", {"plan", "ag-gemm", "--preset", "llama3-70b.o_proj"},
       {"--preset llama3-70b.o_proj: a row-parallel GEMM", "`gemm-rs --preset llama3-70b.o_proj`"}},
      {"PlanAgGemmUnknownPreset", {"plan", "ag-gemm", "--preset", "llama3-70b.wq"},
       {"--preset llama3-70b.wq: no column-parallel or replicated GEMM of that name", "llama3-70b.gate_up_proj"}},
      {"PlanAgGemmModelPreset", {"plan", "ag-gemm", "--preset", "deepseek-v3.wkv_a"},
       {"(a model preset of `gemm-ar|gemm-rs|gemm-ag --preset`)"}},
      {"PlanAgGemmPresetAndN", {"plan", "ag-gemm", "--preset", "llama3-70b.qkv_proj", "-n", "1024"},
       {"-n/--n: --preset llama3-70b.qkv_proj sets N (the column shard) and K"}},
      {"PlanAgGemmPresetAndOut", {"plan", "ag-gemm", "--preset", "llama3-70b.qkv_proj", "--out", "fp32"},
       {"--out: --preset llama3-70b.qkv_proj sets the output dtype (bf16)"}},
      {"PlanAgGemmPresetUnshippedQuant", {"plan", "ag-gemm", "--preset", "llama3-70b.qkv_proj", "--quant", "blockscale"},
       {"llama3-70b.qkv_proj at world 2: quant blockscale is not one the model ships (bf16, ptpc)"}},
      {"PlanAgGemmPresetWorldThree", {"plan", "ag-gemm", "--preset", "llama3-70b.qkv_proj", "--world", "3"},
       {"llama3-70b.qkv_proj at world 3: 8 units"}},
      {"PlanAgGemmTwoPresets", {"plan", "ag-gemm", "--preset", "llama3-70b.qkv_proj,qwen3-32b.qkv_proj"},
       {"one preset per plan"}},
      {"PlanAgGemmNoFusedFlag", {"plan", "ag-gemm", "--no-fused"}, {"--no-fused"}},
      {"PlanAgGemmSmsZero", {"plan", "ag-gemm", "--sms", "0"}, {"--sms", "not in range 1 to 1024"}},
      {"PlanAgGemmJsonInMissingFolder", {"plan", "ag-gemm", "--json", nofolder}, {"--json '" + nofolder + "'", "does not exist"}},
      {"BenchAgGemmWorldNine", {"bench", "ag-gemm", "--emulate-world", "9"}, {"--emulate-world", "not in range 1 to 8"}},
      {"BenchAgGemmDevicesAndEmulated", {"bench", "ag-gemm", "--devices", "0,1", "--emulate-world", "2"},
       {"--emulate-world and --devices: one or the other"}},
      {"BenchAgGemmOnlyNcclArmsEmulated", {"bench", "ag-gemm", "--emulate-world", "2", "--arms", "cublaslt+nccl-sym,split-nccl"},
       {"--arms: none of the arms named runs at world 2", "needs --devices"}},
      {"BenchAgGemmCommOnlyArm", {"bench", "ag-gemm", "--arms", "split-lsa,comm-only"}, {"--arms: 'comm-only' is not one of"}},
      {"BenchAgGemmFusedArm", {"bench", "ag-gemm", "--arms", "fused-lsa"}, {"--arms: 'fused-lsa' is not one of"}},
      {"BenchAgGemmOnlyFusedCeMxfp8", {"bench", "ag-gemm", "--emulate-world", "2", "--quant", "mxfp8", "--arms", "fused-ce"},
       {"--arms: none of the arms named runs at world 2",
        "fused-ce: not run: fused-ce runs quant bf16, ptpc and blockscale with bf16 output, not mxfp8 -> bf16"}},
      {"BenchAgGemmOnlyFusedCeFp32", {"bench", "ag-gemm", "--emulate-world", "2", "--out", "fp32", "--arms", "fused-ce"},
       {"--arms: none of the arms named runs at world 2", "not bf16 -> fp32"}},
      {"BenchAgGemmOnlyFusedCeWorld1", {"bench", "ag-gemm", "--arms", "fused-ce"},
       {"--arms: none of the arms named runs at world 1", "fused-ce: not run at world 1 (nothing to pull)"}},
      {"BenchAgGemmOnlyFusedCeEmulatedFour", {"bench", "ag-gemm", "--emulate-world", "4", "--arms", "fused-ce"},
       {"--arms: none of the arms named runs at world 4", "fused-ce: not timed in the emulated world"}},
      {"BenchAgGemmNNotMultipleOf8", {"bench", "ag-gemm", "--emulate-world", "2", "-n", "100"}, {"--n 100"}},
      {"BenchAgGemmMxfp8KNotMultipleOf128", {"bench", "ag-gemm", "--quant", "mxfp8", "-k", "2080"},
       {"--quant mxfp8 --k 2080: mxfp8 needs k a multiple of 128"}},
      {"BenchAgGemmFp8ToFp32", {"bench", "ag-gemm", "--quant", "blockscale", "--out", "fp32"}, {"--quant blockscale --out fp32"}},
      {"BenchAgGemmRowParallelPreset", {"bench", "ag-gemm", "--preset", "qwen3-32b.qkv_proj,qwen3-32b.down_proj"},
       {"--preset qwen3-32b.down_proj: a row-parallel GEMM"}},
      {"BenchAgGemmPresetsAndJson", {"bench", "ag-gemm", "--preset", "llama3-70b.qkv_proj,qwen3-32b.qkv_proj", "--json", "x.json"},
       {"--json: one preset per run"}},
      {"BenchAgGemmJsonInMissingFolder", {"bench", "ag-gemm", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      // decode: the layer presets, worlds, quants and M, and one GPU
      {"PlanDecodeUnknownPreset", {"plan", "decode", "--preset", "llama3-8b"},
       {"--preset llama3-8b: no such layer (known: llama3-70b, qwen3-32b, deepseek-v3)"}},
      {"PlanDecodeWorldThree", {"plan", "decode", "--preset", "llama3-70b", "--tp", "3"},
       {"--tp 3: llama3-70b.qkv_proj at world 3: 8 units"}},
      {"PlanDecodeTpNine", {"plan", "decode", "--tp", "9"}, {"--tp", "not in range 1 to 8"}},
      {"BenchDecodeUnshippedQuant", {"bench", "decode", "--preset", "llama3-70b", "--quant", "blockscale"},
       {"--quant blockscale: no chosen preset ships it", "--preset llama3-70b: ships none of --quant's modes"}},
      {"BenchDecodeMAbove256", {"bench", "decode", "-m", "1,512"}, {"--m", "not in range 1 to 256"}},
      {"BenchDecodeTwoDevices", {"bench", "decode", "--devices", "0,1"},
       {"--devices: the decode bench runs on one GPU"}},
      {"BenchDecodeJsonInMissingFolder", {"bench", "decode", "--json", nofolder}, {"--json '" + nofolder + "'"}},
      // unknown subcommands
      {"UnknownSubcommand", {"nosuchcmd"}, {"weave: unknown subcommand 'nosuchcmd' (expected one of: info, plan, bench)"}},
      {"UnknownPlanTopic", {"plan", "nosuch"}, {"weave plan: unknown subcommand 'nosuch' (expected one of: ", "gemm", "comm"}},
      {"UnknownBenchSuite", {"bench", "nosuch"}, {"weave bench: unknown subcommand 'nosuch' (expected one of: ", "copy",
                                                  "gemm", "comm"}},
  };
  // An algorithm the op or transport lacks (a transport compiled out is a report instead, exit 1).
#if WEAVE_TEST_EXPECT_CE
  cases.push_back({"PlanCommAlgorithmTheTransportLacks", {"plan", "comm", "--algorithm", "ll", "--transport", "ce"},
                   {"--algorithm ll --transport ce --op all-reduce: algorithm 'll' is not implemented", "ll: lsa only"}});
#endif
#if WEAVE_TEST_EXPECT_LSA
  cases.push_back({"PlanCommAlgorithmTheOpLacks",
                   {"plan", "comm", "--op", "reduce-scatter", "--algorithm", "two-shot", "--transport", "lsa"},
                   {"--algorithm two-shot --transport lsa --op reduce-scatter: algorithm 'two-shot' is not implemented"}});
#endif
  return cases;
}

class CliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliBadInput, ExitsTwoNamingTheOptionBeforeAnyGpuWork) {
  const BadInput& c = GetParam();
  const CliRun r = run_weave(c.args);
  EXPECT_EQ(r.rc, 2) << r.out;
  for (const std::string& s : c.says) EXPECT_NE(r.out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << r.out;
  // Before any GPU work: no GPU probe answer, no idle gate, no table.
  const std::string no_gpu = weave::no_gpu_reason();
  if (!no_gpu.empty()) EXPECT_EQ(r.out.find(no_gpu), std::string::npos) << "the GPU was probed first:\n" << r.out;
  for (const char* gate : {"weave bench: idle gate", "weave bench: GPUs idle", "weave bench: GPU cuda:", "running suite"})
    EXPECT_EQ(r.out.find(gate), std::string::npos) << "the idle gate or a suite ran first:\n" << r.out;
  EXPECT_EQ(r.out.find("waves"), std::string::npos) << "a plan was printed first:\n" << r.out;
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
  // One short message, without the build machine's source paths.
  EXPECT_EQ(r.out.find(WEAVE_TEST_SOURCE_DIR), std::string::npos) << r.out;
  EXPECT_LT(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Weave, CliBadInput, ::testing::ValuesIn(bad_inputs()),
                         [](const ::testing::TestParamInfo<BadInput>& i) { return std::string(i.param.name); });

// Good input still works (the planners need no GPU).
TEST(Cli, PlansRunWithoutAGpu) {
  CliRun r = run_weave({"plan", "gemm", "-m", "4096", "-n", "5120", "-k", "2048", "--quant", "blockscale"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("plan: sm90_gemm_e4m3_blockscale"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--tile", "128x128", "--grid", "64",
                 "--split-k", "1"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("grid 64 (override)"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm", "-m", "4096", "-n", "7168", "-k", "2048", "--quant", "ptpc", "--cluster", "2"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("_c2 tile 128x128x128 stages 6 cluster 2 grid 132"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2-CTA clusters (override)"), std::string::npos) << r.out;
  r = run_weave({"plan", "comm", "--op", "all-reduce", "--bytes", "64M", "--world", "8"});
  EXPECT_NE(r.out.find("collective: all-reduce, 64.00 MiB"), std::string::npos) << r.out;
#if WEAVE_TEST_EXPECT_NCCL_TRANSPORT || WEAVE_TEST_EXPECT_CE || WEAVE_TEST_EXPECT_LSA
  EXPECT_EQ(r.rc, 0) << r.out;
#else
  EXPECT_EQ(r.rc, 1) << "every transport is compiled out: the plan must be refused\n" << r.out;
#endif
  // A problem the tiled kernels refuse but the decode GEMV takes is planned (the broken rules listed).
  r = run_weave({"plan", "gemm", "-m", "16", "-n", "100", "-k", "4096"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("(the decode GEMV takes this problem)"), std::string::npos) << r.out;
  // Lists split on single commas; a list given twice is one list.
  r = run_weave({"plan", "gemm-ag", "-m", "128,1024", "-m", "4096"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("m_max 4096"), std::string::npos) << r.out;
  for (const char* row : {"\n    128 ", "\n   1024 ", "\n   4096 "}) EXPECT_NE(r.out.find(row), std::string::npos) << row << r.out;
}

// `weave plan gemm-ag`: one row per M with the planner's choice and reason; no GPU needed.
TEST(Cli, PlanGemmAgPrintsOneRowPerM) {
  CliRun r = run_weave({"plan", "gemm-ag", "-m", "128,4096", "--world", "8"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-ag: n=2048 k=7168 bf16 -> fp32, world 8, mode auto, sms 132, m_max 4096"), std::string::npos)
      << r.out;
  for (const char* col : {"tiles", "waves", "grid", "chunks", "bytes/peer", "window", "ksplit", "gemv", "gemm_us",
                          "comm_us", "split_us", "fused_us", "mode", "reason"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << " missing:\n" << r.out;
  // The planner's tiles (bf16 -> fp32): m = 128: 64 tiles of 64x64 on 132 CTAs, too little GEMM to
  // hide a gather under; m = 4096: 256 tiles of 128x256 in 1.94 waves.
  EXPECT_NE(r.out.find("fused kernel: sm90_gemm_bf16_fp32_allgather_{128x128x64,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    128 64x64       64   0.48    64 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("split-lsa  0.484848 waves of 64x64 tiles"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 4096 128x256    256   1.94   132     16"), std::string::npos) << r.out;
  // --no-fused: auto never picks the fused kernel; world 1 gathers nothing.
  r = run_weave({"plan", "gemm-ag", "-m", "4096", "--world", "8", "--no-fused"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("fused-lsa  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused kernel not available"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-ag", "-m", "1024", "--world", "1"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-only  world 1: nothing to gather"), std::string::npos) << r.out;
  // DeepSeek's wkv_a (5 tiles of K 7168): split-lsa's GEMM splits K 7 ways as weave::Gemm does,
  // the decode row runs its GEMV; the fused mode keeps its tile.
  r = run_weave({"plan", "gemm-ag", "--preset", "deepseek-v3.wkv_a", "-m", "1,32", "--m-max", "1024", "--quant",
                 "blockscale"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("MiB      1    1 "), std::string::npos) << r.out;  // window, ksplit 1, gemv
  EXPECT_NE(r.out.find("MiB      7    0 "), std::string::npos) << r.out;  // ksplit 7
  EXPECT_NE(r.out.find("the GEMM splits K 7 ways as weave::Gemm does (64x128, 5 tiles on 132 CTAs"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the GEMM is weave::Gemm's decode GEMV"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-ag", "--preset", "deepseek-v3.wkv_a", "-m", "32", "--m-max", "1024", "--quant",
                 "blockscale", "--mode", "fused-lsa"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("splits K"), std::string::npos) << r.out;
  // An explicit mode the op would refuse is a report (exit 1), not a usage error.
  r = run_weave({"plan", "gemm-ag", "--mode", "fused-lsa", "--no-fused"});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("mode fused-lsa: the op would refuse it"), std::string::npos) << r.out;
  // fp8 inputs default to bf16 output.
  r = run_weave({"plan", "gemm-ag", "--quant", "mxfp8", "--scale-layout", "packed", "-m", "256"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mxfp8 (packed scales) -> bf16"), std::string::npos) << r.out;
}

// `weave plan gemm-ar`: one row per M with the planner's choice and reason; no GPU needed.
TEST(Cli, PlanGemmArPrintsOneRowPerM) {
  CliRun r = run_weave({"plan", "gemm-ar", "-m", "128,8192", "--world", "8", "--quant", "blockscale"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-ar: n=7168 k=2048 (K_r, per rank) blockscale (raw scales) -> bf16, world 8, mode auto, sms 132, "
                       "m_max 8192, chunks planner's"),
            std::string::npos)
      << r.out;
  for (const char* col : {"tiles", "waves", "grid", "band_blocks", "chunks", "chunk_blocks", "rounds", "bytes_rs",
                          "bytes_ag", "window", "gemm_us", "comm_us", "split_us", "fused_us", "mode", "reason"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << " missing:\n" << r.out;
  // m = 128: 112 tiles of 64x128 on 132 CTAs, too little GEMM for the rounds; m = 8192: the
  // planner's 256x128, 13.6 waves, a band of 4 row blocks per rank in 4 chunks, 7/8 of 112 MiB on
  // each leg.
  EXPECT_NE(r.out.find("split-lsa  0.848485 waves of 64x128 tiles"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   8192 256x128   1792  13.58   132           4      4            1      5   98.00 MiB   98.00 MiB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fused      13.5758 waves, 4 chunks per band"), std::string::npos) << r.out;
  // --no-fused: auto never picks the fused kernel; world 1 reduces nothing.
  r = run_weave({"plan", "gemm-ar", "-m", "8192", "--world", "8", "--no-fused"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("fused      "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused kernel not available"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-ar", "-m", "1024", "--world", "1"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-only  world 1: nothing to reduce"), std::string::npos) << r.out;
  // An explicit mode the op would refuse is a report (exit 1), not a usage error.
  r = run_weave({"plan", "gemm-ar", "--mode", "fused", "--no-fused"});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("mode fused: the op would refuse it"), std::string::npos) << r.out;
  // --chunks, --exact-own and the mxfp8 scale layout reach the header.
  r = run_weave({"plan", "gemm-ar", "--quant", "mxfp8", "--scale-layout", "packed", "-m", "4096", "--chunks", "3",
                 "--exact-own"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mxfp8 (packed scales) -> bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks 3, exact own term"), std::string::npos) << r.out;
  // Rows the decode GEMV runs (decode, decode-fused) show no tile, tiled schedule or fused time.
  for (const char* mode : {"auto", "decode-fused"}) {
    r = run_weave({"plan", "gemm-ar", "-m", "1,64", "--world", "2", "--mode", mode});
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("      1 gemv         -      -     -           -      -            -      -     7.0 KiB"),
              std::string::npos) << mode << "\n" << r.out;
    // m 64: 64x128 (weave::Gemm's 64x64 has no fused instance yet).
    if (std::string(mode) == "auto") EXPECT_NE(r.out.find("     64 64x128 "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# gemv rows"), std::string::npos) << r.out;
  }
}

// --calibration: auto takes the table's measured best (the reason says so); a table for another
// op shape, or with an explicit mode, is a usage error naming what differs.
TEST(Cli, PlanGemmArFollowsACalibrationTable) {
  const weave::test::ScopedTextFile table("weave-cal", "weave-calibration 1\nop gemm-ar\nquant blockscale\nn 7168\nk 2048\nworld 2\n"
                                               "where test\nm 4096 split-lsa\nm 1 decode\n");
  const std::string& path = table.path;
  CliRun r = run_weave({"plan", "gemm-ar", "-m", "1,4096", "-n", "7168", "-k", "2048", "--quant", "blockscale",
                        "--calibration", path});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("split-lsa  calibration " + path + " (test): measured fastest near m = 4096"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("decode     calibration"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-ar", "-m", "1", "-n", "7168", "-k", "1024", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is for another op shape: quant blockscale (this op: bf16), k 2048 (this op: 1024)"),
            std::string::npos)
      << r.out;
  r = run_weave({"plan", "gemm-ar", "--mode", "fused", "--quant", "blockscale", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("only --mode auto consults a calibration"), std::string::npos) << r.out;
}

// AllGatherGemm's --calibration: auto takes fused-ce or split-lsa where the table measured it
// fastest, the model elsewhere; the window column grows by fused-ce's landed words; an explicit
// mode or another op's table is a usage error.
TEST(Cli, PlanAgGemmFollowsACalibrationTable) {
  const weave::test::ScopedTextFile table("weave-agm-cal", "weave-calibration 1\nop ag-gemm\nquant bf16\nout bf16\n"
                                                           "n 7168\nk 2048\nworld 2\nwhere test\nm 64 fused-ce\n"
                                                           "m 1024 split-lsa\n");
  const std::string& path = table.path;
  CliRun r = run_weave({"plan", "ag-gemm", "-m", "64,1024,8192", "-n", "7168", "-k", "2048", "--m-max", "8192",
                        "--calibration", path, "--json", path + ".json"});
  EXPECT_EQ(r.rc, 0) << r.out;
  const bool ce = weave::comm::transport_compiled_in(weave::Transport::kCe);
  EXPECT_NE(r.out.find(std::string(ce ? "fused-ce   " : "split-lsa  ") +
                       (ce ? "calibration " + path + " (test): measured fastest near m = 64" : "the gather")),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("split-lsa  calibration " + path + " (test): measured fastest near m = 1024"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("has no row within 2x of m = 8192; the model"), std::string::npos) << r.out;
  std::ifstream f(path + ".json");
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path + ".json");
  EXPECT_EQ(doc.find("\"mode\": \"fused-ce\"") != std::string::npos, ce) << doc;
  EXPECT_NE(doc.find("\"mode\": \"split-lsa\""), std::string::npos) << doc;
  r = run_weave({"plan", "ag-gemm", "--mode", "split-lsa", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("only --mode auto consults a calibration"), std::string::npos) << r.out;
  r = run_weave({"plan", "ag-gemm", "-k", "4096", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is for another op shape"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("k 2048 (this op: 4096)"), std::string::npos) << r.out;
}

// The benches' --calibration (the auto arm consults the table): a table for another op shape, or
// no table at all, is refused by name before the GPU probe (so this runs on any machine).
TEST(Cli, BenchCalibrationIsCheckedBeforeAnyGpuWork) {
  const weave::test::ScopedTextFile table(
      "weave-bench-cal", "weave-calibration 1\nop gemm-ar\nquant bf16\nn 7168\nk 2048\nworld 2\nwhere test\nm 4096 split-lsa\n");
  const std::string& path = table.path;
  CliRun r = run_weave({"bench", "gemm-ar", "--emulate-world", "2", "-k", "1024", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is for another op shape"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("k 2048 (this op: 1024)"), std::string::npos) << r.out;
  r = run_weave({"bench", "gemm-ag", "--emulate-world", "2", "--calibration", path});  // a gemm-ar table
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--calibration"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gemm-ar"), std::string::npos) << r.out;
  r = run_weave({"bench", "gemm-rs", "--emulate-world", "2", "--calibration", path});  // a gemm-ar table
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("op gemm-ar (this op: gemm-rs)"), std::string::npos) << r.out;
  r = run_weave({"bench", "ag-gemm", "--emulate-world", "2", "--calibration", path});  // a gemm-ar table
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("op gemm-ar (this op: ag-gemm)"), std::string::npos) << r.out;
  std::filesystem::remove(path);
  r = run_weave({"bench", "gemm-ar", "--emulate-world", "2", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(path), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(weave::no_gpu_reason().empty() ? "\x01" : weave::no_gpu_reason()), std::string::npos)
      << "refused only after the GPU probe:\n" << r.out;
}

TEST(Cli, PlanGemmArWritesJson) {
  const std::string path = (std::filesystem::temp_directory_path() / ("weave-plan-gemm-ar-" + std::to_string(::getpid()) + ".json")).string();
  const CliRun r = run_weave({"plan", "gemm-ar", "-m", "1,4096", "--world", "2", "--json", path});
  EXPECT_EQ(r.rc, 0) << r.out;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "--json " << path << " was not written";
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"topic\": \"gemm-ar\"", "\"k_per_rank\": 2048", "\"world\": 2", "\"fused_available\"",
                          "\"band_blocks\"", "\"chunk_blocks\"", "\"rounds\"", "\"bytes_rs\"", "\"bytes_ag\"",
                          "\"window_bytes\"", "\"model_fused_us\"", "\"reason\""})
    EXPECT_NE(doc.find(key), std::string::npos) << key << " missing:\n" << doc;
  size_t objects = 0;  // objects open a line ("{" then a newline; a kernel name may hold a "{")
  for (size_t at = doc.find("{\n"); at != std::string::npos; at = doc.find("{\n", at + 1)) ++objects;
  EXPECT_EQ(objects, 4u) << "the document, its rates and two rows:\n" << doc;
  // m 1 runs on the decode GEMV: its row names the route and carries no tile schedule (the tiled
  // row at 4096 does; one block_m and one model_fused_us in the document).
  EXPECT_NE(doc.find("\"route\": \"gemv\""), std::string::npos) << doc;
  EXPECT_NE(doc.find("\"route\": \"tiles\""), std::string::npos) << doc;
  for (const char* key : {"\"block_m\"", "\"band_blocks\"", "\"model_fused_us\""})
    EXPECT_EQ(doc.find(key), doc.rfind(key)) << key << " in both rows:\n" << doc;
  std::filesystem::remove(path);
}

// `weave plan gemm-rs`: one row per M (the total rows) with the planner's choice and reason, rows per
// rank and the bytes this rank sends; no GPU needed.
TEST(Cli, PlanGemmRsPrintsOneRowPerM) {
  CliRun r = run_weave({"plan", "gemm-rs", "--world", "2", "-n", "7168", "-k", "2048", "-m", "128,1000,4096"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-rs: n=7168 k=2048 (K_r, per rank) bf16 -> bf16, world 2, mode auto, sms 132, m_max 4096, "
                       "chunks planner's"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("reduce-scatter call"), std::string::npos) << r.out;
  for (const char* col : {"tiles", "waves", "grid", "rows/rank", "band_blocks", "chunks", "chunk_blocks", "rounds",
                          "bytes_rs", "window", "gemm_us", "comm_us", "split_us", "fused_us", "mode", "reason"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << " missing:\n" << r.out;
  EXPECT_EQ(r.out.find("bytes_ag"), std::string::npos) << "no gather leg:\n" << r.out;
  // m = 128 and 1000: multiples of the world but not of world x 128, so auto says why it splits;
  // m = 4096: the planner's 128x256 (bf16), 16 row blocks per band of 2048 rows, half of the 56
  // MiB partial sent, fused. (m = 1000: 128x256; weave::Gemm's 128x160 has no fused instance yet.)
  EXPECT_NE(r.out.find("split-lsa  m = 128 is not a multiple of world x 128 = 256 (the fused bands are whole tiles)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("split-lsa  m = 1000 is not a multiple of world x 128 = 256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   1000 128x256    224   1.70   132       500 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   4096 128x256    896   6.79   132      2048          16 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   28.00 MiB "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused      6.78788 waves"), std::string::npos) << r.out;
  // --no-fused: auto never picks the fused kernel; world 1 reduces nothing.
  r = run_weave({"plan", "gemm-rs", "-m", "8192", "--world", "8", "--no-fused"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("fused      "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused kernel not available"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-rs", "-m", "1000", "--world", "1"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-only  world 1: nothing to reduce"), std::string::npos) << r.out;
  // An explicit mode the op would refuse is a report (exit 1), not a usage error.
  r = run_weave({"plan", "gemm-rs", "--mode", "fused", "--no-fused"});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("mode fused: the op would refuse it"), std::string::npos) << r.out;
  // --chunks, --exact-own and the mxfp8 scale layout reach the header.
  r = run_weave({"plan", "gemm-rs", "--quant", "mxfp8", "--scale-layout", "packed", "-m", "4096", "--chunks", "3",
                 "--exact-own"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mxfp8 (packed scales) -> bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunks 3, exact own term"), std::string::npos) << r.out;
}

// Mode fused at an M that is a multiple of the world but not of world x 128: planned (the other
// M still run fused), the row saying why the op cannot run that M.
TEST(Cli, PlanGemmRsFusedModeSaysWhyAnMCannotRun) {
  const CliRun r = run_weave({"plan", "gemm-rs", "--world", "2", "--mode", "fused", "-m", "1000,1024"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("fused      mode fused requested (cannot run m = 1000: m = 1000 is not a multiple of world x 128 = "
                       "256 (the fused bands are whole tiles))"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("cannot run m = 1024"), std::string::npos) << r.out;
}

// A gemm-rs calibration table: auto takes its measured best where M allows (fused only at
// multiples of world x 128); a gemm-ar table is refused naming the op.
TEST(Cli, PlanGemmRsFollowsACalibrationTable) {
  const weave::test::ScopedTextFile table("weave-rs-cal", "weave-calibration 1\nop gemm-rs\nquant bf16\nn 7168\nk 2048\nworld 2\n"
                                                  "where test\nm 1024 fused\nm 4096 split-lsa\n");
  const std::string& path = table.path;
  CliRun r = run_weave({"plan", "gemm-rs", "--world", "2", "-m", "1024,4096", "--calibration", path});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("fused      calibration " + path + " (test): measured fastest near m = 1024"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("split-lsa  calibration " + path + " (test): measured fastest near m = 4096"), std::string::npos)
      << r.out;
  r = run_weave({"plan", "gemm-ar", "--world", "2", "-m", "1024", "--calibration", path});
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("is for another op shape: op gemm-rs (this op: gemm-ar)"), std::string::npos) << r.out;
}

TEST(Cli, PlanGemmRsWritesJson) {
  const std::string path = (std::filesystem::temp_directory_path() / ("weave-plan-gemm-rs-" + std::to_string(::getpid()) + ".json")).string();
  const CliRun r = run_weave({"plan", "gemm-rs", "-m", "1000,4096", "--world", "2", "--json", path});
  EXPECT_EQ(r.rc, 0) << r.out;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "--json " << path << " was not written";
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"topic\": \"gemm-rs\"", "\"k_per_rank\": 2048", "\"world\": 2", "\"rows_per_rank\": 500",
                          "\"rows_per_rank\": 2048", "\"band_blocks\"", "\"bytes_rs\"", "\"window_bytes\"",
                          "\"model_fused_us\"", "\"reason\""})
    EXPECT_NE(doc.find(key), std::string::npos) << key << " missing:\n" << doc;
  EXPECT_EQ(doc.find("bytes_ag"), std::string::npos) << doc;
  std::filesystem::remove(path);
}

// Both gemm-rs subcommands say that M is the total rows and must be a multiple of the world.
TEST(Cli, GemmRsHelpStatesTheMRule) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plan", "gemm-rs", "--help"}, {"bench", "gemm-rs", "--help"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("total rows"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("must be a multiple of the world W"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("W x 128"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rounded up to a multiple of"), std::string::npos) << r.out;
  }
  const CliRun bench = run_weave({"bench", "--help"});
  EXPECT_NE(bench.out.find("gemm-rs: GemmReduceScatter modes per M"), std::string::npos) << bench.out;
}

// Every fused suite offers the weave-gemm arm (weave::Gemm of the rows its gemm-only arm computes,
// in the emulated world planned for the rank's SM share) and says what the closing ratio is.
TEST(Cli, FusedSuitesHoldGemmOnlyToWeaveGemm) {
  for (const char* suite : {"gemm-ar", "gemm-rs", "gemm-ag", "ag-gemm"}) {
    const CliRun r = run_weave({"bench", suite, "--help"});
    EXPECT_EQ(r.rc, 0) << r.out;
    for (const char* says : {"weave-gemm", "weave::Gemm of", "gemm-only / weave-gemm", "planned for the rank's SM share"})
      EXPECT_NE(r.out.find(says), std::string::npos) << suite << ": " << says << " missing:\n" << r.out;
    const CliRun bad = run_weave({"bench", suite, "--arms", "weave-gem"});
    EXPECT_EQ(bad.rc, 2) << bad.out;
    EXPECT_NE(bad.out.find("weave-gemm"), std::string::npos) << suite << ": the accepted arms name it:\n" << bad.out;
  }
}

// `weave plan ag-gemm`: one row per m (rows per rank) with the gathered GEMM's rows, the bytes each
// peer receives, the window, the planner's choice and reason, and fused-ce's modelled time beside
// split's where fused-ce can run (auto takes it only from a calibration table).
TEST(Cli, PlanAgGemmPrintsOneRowPerM) {
  CliRun r = run_weave({"plan", "ag-gemm", "--world", "2", "-m", "1,128,4096"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ag-gemm: n=7168 k=8192 bf16 -> bf16, world 2, mode auto, sms 132, m_max 4096\n"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("fused mode: none ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused kernel: sm90_gemm_bf16_bf16_agmrows_{128x128x64,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-gather call"), std::string::npos) << r.out;
  for (const char* col : {"tiles", "waves", "grid", "rows", "bytes/peer", "window", "gemm_us", "comm_us", "split_us",
                          "fused_us", "mode", "reason"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << " missing:\n" << r.out;
  // m = 4096 at W = 2: 8192 gathered rows, weave::Gemm's 128x256 tiles (1792 in 13.6 waves), 4096 x 8192
  // bf16 = 64 MiB to the peer; m = 1: 2 rows, the decode GEMV.
  EXPECT_NE(r.out.find("   4096 128x256   1792  13.58   132    8192    64.00 MiB "), std::string::npos) << r.out;
  // (56 bands of the bf16 GEMV's stream path at split 2: 112 CTAs.)
  EXPECT_NE(r.out.find("      1 gemv         0   0.00   112       2     16.0 KiB "), std::string::npos) << r.out;
  // split_us (GEMM + gather) then fused_us (the pulls under the GEMM): without a table auto still
  // takes split-lsa.
  EXPECT_NE(r.out.find("    1696.6    1556.6  split-lsa  the gather of 67108864 bytes per peer, then the GEMM (auto takes "
                       "fused-ce only from a calibration table"),
            std::string::npos)
      << r.out;
  // fp8: A travels as e4m3 plus its scales (ptpc: 4 bytes a row); an explicit mode is planned as asked.
  r = run_weave({"plan", "ag-gemm", "--world", "4", "--quant", "ptpc", "-m", "1000", "--mode", "split-ce"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("   1000 128x128   1792  13.58   132    4000     7.82 MiB "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("split-ce   mode split-ce requested"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("agm.sa (A's scales)"), std::string::npos) << r.out;
  // World 1 gathers nothing: no fused time.
  r = run_weave({"plan", "ag-gemm", "-m", "1000", "--world", "1"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("        -  gemm-only  world 1: nothing to gather"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused mode: none (world 1: nothing to gather"), std::string::npos) << r.out;
  // mxfp8: fused-ce cannot run it, so no fused time either.
  r = run_weave({"plan", "ag-gemm", "--world", "2", "--quant", "mxfp8", "-m", "128"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("fused mode: none (fused-ce runs quant bf16, ptpc and blockscale with bf16 output, not mxfp8 -> "
                       "bf16"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("         -  split-lsa  the gather of"), std::string::npos) << r.out;
}

// `weave plan ag-gemm --mode fused-ce`: the planner's tile at every m (the GEMV's m too: a 64x64
// tile for 8 rows), the chunks pulled per peer, its landed words in the window and no split gather's regions.
TEST(Cli, PlanAgGemmFusedCePlansItsTileAndChunks) {
  CliRun r = run_weave({"plan", "ag-gemm", "--world", "8", "--mode", "fused-ce", "-k", "4096", "-m", "1,4096"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ag-gemm: n=7168 k=4096 bf16 -> bf16, world 8, mode fused-ce, sms 132, m_max 4096\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fused-ce's landed words (world x chunks)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("split all-gather"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("      1 64x64      112   0.85   112       8 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   4096 128x256   7168  54.30   132   32768    32.00 MiB "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("    3653.3    3037.1  fused-ce   mode fused-ce requested; pulls of 4 chunks of 1024 rows per peer "
                       "under the GEMM; GEMM the fused-ce GEMM (128x256"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("would refuse"), std::string::npos) << r.out;
  // ptpc and blockscale run it too (e4m3 rows plus their scales), each at its planner's tile.
  for (const char* q : {"ptpc", "blockscale"}) {
    r = run_weave({"plan", "ag-gemm", "--world", "2", "--mode", "fused-ce", "--quant", q, "-m", "1000"});
    EXPECT_EQ(r.rc, 0) << q << "\n" << r.out;
    EXPECT_NE(r.out.find(std::string(q) == "ptpc" ? "   1000 128x128 " : "   1000 256x128 "), std::string::npos)
        << q << "\n" << r.out;
    EXPECT_NE(r.out.find("  fused-ce   mode fused-ce requested; pulls of 4 chunks of 256 rows"), std::string::npos)
        << q << "\n" << r.out;
  }
}

TEST(Cli, PlanAgGemmWritesJson) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("weave-plan-ag-gemm-" + std::to_string(::getpid()) + ".json")).string();
  const CliRun r = run_weave({"plan", "ag-gemm", "-m", "128,4096", "--world", "2", "--quant", "blockscale", "--json", path});
  EXPECT_EQ(r.rc, 0) << r.out;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "--json " << path << " was not written";
  const std::string doc((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* key : {"\"topic\": \"ag-gemm\"", "\"k\": 8192", "\"world\": 2", "\"quant\": \"blockscale\"",
                          "\"rows\": 256", "\"rows\": 8192", "\"bytes_per_peer\"", "\"window_bytes\"",
                          "\"model_split_us\"", "\"reason\"", "\"fused_kernel\": \"sm90_gemm_e4m3_blockscale"})
    EXPECT_NE(doc.find(key), std::string::npos) << key << " missing:\n" << doc;
  // blockscale at W 2: fused-ce's time in every row, beside split's.
  std::size_t at = 0, fused_rows = 0;
  while ((at = doc.find("\"model_fused_us\"", at)) != std::string::npos) ++fused_rows, ++at;
  EXPECT_EQ(fused_rows, 2u) << doc;
  EXPECT_EQ(doc.find("\"fused_mode\""), std::string::npos) << doc;
  size_t objects = 0;  // objects open a line ("{" then a newline; a kernel name may hold a "{")
  for (size_t at = doc.find("{\n"); at != std::string::npos; at = doc.find("{\n", at + 1)) ++objects;
  EXPECT_EQ(objects, 4u) << "the document, its rates and two rows:\n" << doc;
  // mxfp8: fused-ce cannot run it, so no fused time and the document says why.
  const CliRun mx = run_weave({"plan", "ag-gemm", "-m", "128", "--world", "2", "--quant", "mxfp8", "--json", path});
  EXPECT_EQ(mx.rc, 0) << mx.out;
  std::ifstream g(path);
  const std::string mx_doc((std::istreambuf_iterator<char>(g)), std::istreambuf_iterator<char>());
  EXPECT_EQ(mx_doc.find("model_fused_us"), std::string::npos) << mx_doc;
  EXPECT_NE(mx_doc.find("\"fused_mode\": \"none: fused-ce runs quant bf16, ptpc and blockscale"), std::string::npos)
      << mx_doc;
  std::filesystem::remove(path);
}

// Both ag-gemm subcommands explain the op (the input gathered, then one GEMM), its modes (fused-ce,
// which auto takes only from a calibration table, so no --no-fused); the bench lists its arms and
// baselines.
TEST(Cli, AgGemmHelpExplainsTheOpModesAndArms) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plan", "ag-gemm", "--help"}, {"bench", "ag-gemm", "--help"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 0) << r.out;
    for (const char* says : {"[A_0; ...; A_{W-1}] B^T", "[W m, N]", "gemm-only", "split-nccl", "split-lsa", "split-ce",
                             "fused-ce", "auto", "gemm-ag", "--preset", "column-parallel"})
      EXPECT_NE(r.out.find(says), std::string::npos) << says << " missing:\n" << r.out;
    EXPECT_EQ(r.out.find("\n  --no-fused"), std::string::npos) << "auto takes fused-ce only from a table:\n" << r.out;
    EXPECT_NE(r.out.find("\n  --calibration"), std::string::npos) << r.out;
  }
  const CliRun plan = run_weave({"plan", "ag-gemm", "--help"});
  EXPECT_NE(plan.out.find("--scale-layout must be raw"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("Without --calibration auto never takes fused-ce"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("with --calibration the mode the table measured fastest near m: split-lsa or fused-ce"),
            std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("auto | gemm-only | split-nccl | split-lsa | split-ce | fused-ce"), std::string::npos) << plan.out;
  const CliRun bench = run_weave({"bench", "ag-gemm", "--help"});
  for (const char* says : {"cublaslt ", "cublaslt+nccl ", "cublaslt+nccl-sym", "weave-gemm  weave::Gemm", "ncclAllGather", "NaN-poisoned",
                           "No comm-only arm", "TFLOPS (2*W*m*N*K per rank / time)", "--emulate-world", "--devices",
                           "  fused-ce    W > 1, bf16 / ptpc / blockscale with bf16 out", "where split-lsa's plan ran the same tile unsplit",
                           "\n  --calibrate", "--calibrate\nrecords split-lsa or fused-ce per m"})
    EXPECT_NE(bench.out.find(says), std::string::npos) << says << " missing:\n" << bench.out;
  const CliRun all = run_weave({"bench", "--help"});
  EXPECT_NE(all.out.find("ag-gemm: AllGatherGemm modes per m rows per rank"), std::string::npos) << all.out;
  const CliRun topics = run_weave({"plan", "--help"});
  EXPECT_NE(topics.out.find("ag-gemm"), std::string::npos) << topics.out;
}

TEST(Cli, ValidBenchInputReachesTheGpuProbe) {
  if (weave::no_gpu_reason().empty()) GTEST_SKIP() << "a Hopper GPU is visible: this would run the benchmark";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"bench"}, {"bench", "gemm", "-m", "128", "-n", "128", "-k", "128"},
        {"bench", "comm", "-b", "8K", "-e", "64M"}, {"bench", "copy", "--sizes", "64"},
        {"bench", "gemm-ag", "-m", "128"}, {"bench", "gemm-ag", "--emulate-world", "4", "-m", "1024,4096"},
        {"bench", "gemm-ar", "-m", "128"}, {"bench", "gemm-ar", "--emulate-world", "2", "-m", "1024", "--exact-own"},
        {"bench", "gemm-rs"}, {"bench", "gemm-rs", "--emulate-world", "4", "-m", "1000,4096"},
        {"bench", "gemm-rs", "--emulate-world", "3"}, {"bench", "ag-gemm"},
        {"bench", "ag-gemm", "--emulate-world", "4", "-m", "1024,4096", "--quant", "ptpc"},
        {"bench", "ag-gemm", "--emulate-world", "2", "--quant", "blockscale", "--arms", "split-lsa,fused-ce"},
        {"bench", "ag-gemm", "--devices", "0,1", "--arms", "split-nccl,cublaslt+nccl,cublaslt+nccl-sym"},
        {"bench", "ag-gemm", "--preset", "llama3-70b.qkv_proj,deepseek-v3.qkv_a_proj", "--emulate-world", "2"},
        {"bench", "decode"}, {"bench", "decode", "--preset", "deepseek-v3", "--tp", "1,8", "-m", "1,64"},
        {"bench", "decode", "--quant", "ptpc", "--devices", "0"},
        // the weave-gemm arm (weave::Gemm of the same rows) in every fused suite, at world 1 and emulated
        {"bench", "gemm-ar", "--arms", "gemm-only,weave-gemm"}, {"bench", "gemm-rs", "--emulate-world", "2", "--arms", "weave-gemm"},
        {"bench", "gemm-ag", "--arms", "weave-gemm,split-lsa"}, {"bench", "ag-gemm", "--emulate-world", "2", "--arms", "weave-gemm"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(weave::no_gpu_reason()), std::string::npos) << r.out;
  }
}

// `weave plan ag-gemm --preset LAYER.GEMM`: the column shard of a decoder layer's GEMM (replicated:
// whole), the model's default quant, bf16 out, the default m list.
TEST(Cli, PlanAgGemmTakesTheColumnGemmsOfTheLayerTable) {
  CliRun r = run_weave({"plan", "ag-gemm", "--preset", "llama3-70b.gate_up_proj", "--world", "8"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("preset llama3-70b.gate_up_proj (column GEMM of one decoder layer of Llama-3-70B"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("at world 8 per rank M x 7168 x 8192"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ag-gemm: n=7168 k=8192"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" bf16 -> bf16, world 8"), std::string::npos) << r.out;
  r = run_weave({"plan", "ag-gemm", "--preset", "deepseek-v3.qkv_a_proj", "--world", "8", "-m", "512"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ag-gemm: n=2112 k=7168"), std::string::npos) << "replicated: N whole\n" << r.out;
  EXPECT_NE(r.out.find("blockscale"), std::string::npos) << "the model's first quant\n" << r.out;
  r = run_weave({"plan", "ag-gemm", "--preset", "qwen3-32b.qkv_proj", "--world", "4", "--quant", "ptpc"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("ag-gemm: n=2560 k=5120"), std::string::npos) << r.out;
}

// `weave plan decode`: every GEMM of the layer with its shard, the HBM floor, and a plan per M.
TEST(Cli, PlanDecodePrintsEveryGemmOfTheLayerPerM) {
  const CliRun r = run_weave({"plan", "decode", "--preset", "llama3-70b", "--tp", "8", "-m", "1,32", "--hbm-gbps", "3000"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("llama3-70b at tp 8, bf16"), std::string::npos) << r.out;
  for (const char* g : {"qkv_proj       column          1280x8192", "o_proj         row             8192x1024",
                        "gate_up_proj   column          7168x8192", "down_proj      row             8192x3584"})
    EXPECT_NE(r.out.find(g), std::string::npos) << g << "\n" << r.out;
  // 2 x (1280 + 7168) x 8192 + 2 x 8192 x 4608 bytes = 213.9 MB; at 3000 GB/s 71.3 us.
  EXPECT_NE(r.out.find("213.9 MB of weights per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HBM floor at 3000 GB/s: 71.3 us per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n      1  qkv_proj gemv split"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n     32  qkv_proj "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n      2  "), std::string::npos) << "only the M given:\n" << r.out;
  // deepseek-v3 names the GEMM it leaves out.
  const CliRun ds = run_weave({"plan", "decode", "--preset", "deepseek-v3"});
  EXPECT_EQ(ds.rc, 0) << ds.out;
  EXPECT_NE(ds.out.find("not in the chain: kv_b_proj"), std::string::npos) << ds.out;
  EXPECT_NE(ds.out.find("deepseek-v3 at tp 8, blockscale"), std::string::npos) << ds.out;
}

// --help shows the limits the options enforce (the kernels' and the planner's), not the type's.
TEST(Cli, HelpRangesAreTheRealLimits) {
  CliRun r = run_weave({"plan", "gemm", "--help"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("-m INT:INT in [1 - 2147483647]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--sms INT:INT in [1 - 1024]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("2305843009213693951"), std::string::npos) << r.out;
  r = run_weave({"bench", "--help"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("--devices INT in [0 - 2147483647],..."), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("1797693134862315708"), std::string::npos) << r.out;
  r = run_weave({"plan", "gemm-ar", "--help"});
  EXPECT_NE(r.out.find("-m,--m INT in [1 - 1048576],...=128,1024,4096,8192"), std::string::npos) << r.out;
}

TEST(Cli, VersionIsTheLibrarys) {
  const CliRun r = run_weave({"--version"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, std::string("weave ") + WEAVE_VERSION_STRING + "\n");
}

TEST(Cli, HelpTextsExplainWithoutIssueNumbers) {
  const std::regex issue("issue", std::regex::icase);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"info", "--help"}, {"plan", "--help"}, {"plan", "gemm", "--help"},
        {"plan", "comm", "--help"}, {"bench", "--help"}, {"bench", "copy", "--help"}, {"bench", "gemm", "--help"},
        {"bench", "comm", "--help"}, {"plan", "gemm-ag", "--help"}, {"bench", "gemm-ag", "--help"},
        {"plan", "gemm-ar", "--help"}, {"bench", "gemm-ar", "--help"}, {"plan", "gemm-rs", "--help"},
        {"bench", "gemm-rs", "--help"}, {"plan", "ag-gemm", "--help"}, {"bench", "ag-gemm", "--help"},
        {"plan", "decode", "--help"}, {"bench", "decode", "--help"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_GT(r.out.size(), 100u) << r.out;
    EXPECT_FALSE(std::regex_search(r.out, issue)) << "weave " << args[0] << " ...:\n" << r.out;
  }
}

}  // namespace

// `weave bench gemm --check-targets`: the evaluation (cli/gemm_targets) is what decides the exit.
TEST(GemmTargets, RequestedTargetWithoutRowsIsMissedNotSkipped) {
  using namespace weave::cli;
  const auto& t = gemm_targets();
  // Before: a target with no rows was skipped, so a weave that built nothing passed.
  auto r = evaluate_gemm_targets(t, {"ptpc->bf16"}, {});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_FALSE(r[0].met);
  EXPECT_EQ(r[0].shapes, 0u);
  EXPECT_NE(r[0].why.find("no weave row"), std::string::npos);
  // Met and missed on the median and on the per-shape bound.
  r = evaluate_gemm_targets(t, {"bf16->bf16"}, {{"bf16->bf16", "ratio", 0.98}, {"bf16->bf16", "ratio", 1.02},
                                                {"bf16->bf16", "ratio", 0.99}});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].met) << r[0].why;
  r = evaluate_gemm_targets(t, {"bf16->bf16"}, {{"bf16->bf16", "ratio", 0.98}, {"bf16->bf16", "ratio", 1.2},
                                                {"bf16->bf16", "ratio", 0.99}});
  EXPECT_FALSE(r[0].met);
  EXPECT_NE(r[0].why.find("max 1.2 > 1.1"), std::string::npos) << r[0].why;
  r = evaluate_gemm_targets(t, {"ptpc->fp32"}, {{"ptpc->fp32", "ratio", 1.05}, {"ptpc->fp32", "ratio", 1.06}});
  EXPECT_FALSE(r[0].met);
  EXPECT_NE(r[0].why.find("median"), std::string::npos) << r[0].why;
  // mxfp8 has two targets; quants not requested are not evaluated; other quants' rows do not count.
  r = evaluate_gemm_targets(t, {"mxfp8->bf16"}, {{"mxfp8->bf16", "ratio", 1.2}, {"blockscale->bf16", "ratio", 0.5}});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(r[0].met);
  EXPECT_FALSE(r[1].met);  // ratio_vs_weave_blockscale: no rows
  EXPECT_TRUE(evaluate_gemm_targets(t, {}, {{"bf16->bf16", "ratio", 9.0}}).empty());
}

// ---- Model presets: `weave plan --presets`, `--preset NAME` on plan and bench gemm-ar / gemm-ag.
// (A block of its own: the presets' cases run through the same bad-input checks as the rest.)
namespace {

std::vector<BadInput> preset_bad_inputs() {
  const std::string two_json = (std::filesystem::temp_directory_path() / "weave-presets.json").string();
  return {
      {"PlanGemmArPresetUnknown", {"plan", "gemm-ar", "--preset", "llama3-70b.qkv"},
       {"preset 'llama3-70b.qkv': no such preset (known: deepseek-v3.o_proj,"}},
      {"PlanGemmArPresetEmptyName", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj,"}, {"--preset", "an empty name"}},
      {"PlanGemmArPresetWithN", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj", "-n", "4096"},
       {"-n/--n: --preset llama3-70b.o_proj sets N and K (K_r = K / world)"}},
      {"PlanGemmArPresetWithK", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj", "--k", "1024"},
       {"-k/--k: --preset llama3-70b.o_proj sets N and K"}},
      {"PlanGemmAgPresetWithOut", {"plan", "gemm-ag", "--preset", "deepseek-v4-pro.wkv_gate", "--out", "bf16"},
       {"--out: --preset deepseek-v4-pro.wkv_gate sets the output dtype (fp32)"}},
      {"PlanGemmArPresetOfAGatherLayer", {"plan", "gemm-ar", "--preset", "deepseek-v3.wkv_a"},
       {"--preset deepseek-v3.wkv_a: a gemm-ag layer, not gemm-ar"}},
      {"PlanGemmAgPresetOfAReduceLayer", {"plan", "gemm-ag", "--preset", "qwen3-32b.o_proj"},
       {"--preset qwen3-32b.o_proj: a gemm-ar layer, not gemm-ag"}},
      {"PlanGemmArPresetWorldThree", {"plan", "gemm-ar", "--preset", "deepseek-v3.o_proj", "--world", "3"},
       {"deepseek-v3.o_proj at world 3: K = 16384 is not divisible by 3"}},
      {"PlanGemmArPresetWorldNine", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj", "--world", "9"},
       {"llama3-70b.o_proj at world 9: world must be in 1..8"}},
      {"PlanGemmArPresetQuantNotShipped", {"plan", "gemm-ar", "--preset", "llama3-70b.down_proj", "--quant", "blockscale"},
       {"llama3-70b.down_proj at world 2: quant blockscale is not one the model ships (bf16, ptpc)"}},
      {"PlanGemmArTwoPresets", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj,qwen3-32b.o_proj"},
       {"one preset per plan"}},
      {"PlanGemmArPresetMAboveMMax", {"plan", "gemm-ar", "--preset", "llama3-70b.o_proj", "--m-max", "1024"},
       {"-m/--m 8192: above --m-max 1024"}},
      {"BenchGemmArPresetWithK", {"bench", "gemm-ar", "--preset", "qwen3-32b.o_proj", "-k", "1024"},
       {"-k/--k: --preset qwen3-32b.o_proj sets N and K"}},
      {"BenchGemmArSecondPresetUnknown", {"bench", "gemm-ar", "--preset", "qwen3-32b.o_proj,nope"},
       {"preset 'nope': no such preset"}},
      {"BenchGemmArPresetsWithJson", {"bench", "gemm-ar", "--preset", "qwen3-32b.o_proj,llama3-70b.o_proj", "--json", two_json},
       {"--json: one preset per run when writing JSON"}},
      {"BenchGemmArPresetsWithCalibrate",
       {"bench", "gemm-ar", "--preset", "qwen3-32b.o_proj,llama3-70b.o_proj", "--calibrate", two_json},
       {"--calibrate/--calibration: a table is for one shape"}},
      {"BenchGemmAgPresetOfAReduceLayer", {"bench", "gemm-ag", "--preset", "llama3-70b.o_proj"},
       {"--preset llama3-70b.o_proj: a gemm-ar layer, not gemm-ag"}},
      {"BenchGemmArPresetEmulatedWorldThree", {"bench", "gemm-ar", "--preset", "deepseek-v3.o_proj", "--emulate-world", "3"},
       {"deepseek-v3.o_proj at world 3: K = 16384 is not divisible by 3"}},
      {"BenchGemmAgPresetWithN", {"bench", "gemm-ag", "--preset", "deepseek-v3.wkv_a", "--n", "512"},
       {"-n/--n: --preset deepseek-v3.wkv_a sets N and K"}},
      // gemm-rs takes the row-parallel (gemm-ar) layers
      {"PlanGemmRsPresetOfAGatherLayer", {"plan", "gemm-rs", "--preset", "deepseek-v3.wkv_a"},
       {"--preset deepseek-v3.wkv_a: a gemm-ag layer; gemm-rs takes the gemm-ar layers (use `gemm-ag --preset"}},
      {"PlanGemmRsPresetWithK", {"plan", "gemm-rs", "--preset", "llama3-70b.o_proj", "-k", "1024"},
       {"-k/--k: --preset llama3-70b.o_proj sets N and K (K_r = K / world)"}},
      {"PlanGemmRsPresetWorldThree", {"plan", "gemm-rs", "--preset", "deepseek-v3.o_proj", "--world", "3"},
       {"deepseek-v3.o_proj at world 3: K = 16384 is not divisible by 3"}},
      {"PlanGemmRsPresetTypedMNotMultiple", {"plan", "gemm-rs", "--preset", "llama3-70b.o_proj", "--world", "8", "-m", "1000,100"},
       {"--preset llama3-70b.o_proj at world 8", "-m/--m 100: M must be a multiple of the world (8)"}},
      {"BenchGemmRsPresetOfAGatherLayer", {"bench", "gemm-rs", "--preset", "deepseek-v4-pro.wkv_gate"},
       {"--preset deepseek-v4-pro.wkv_gate: a gemm-ag layer; gemm-rs takes the gemm-ar layers"}},
      {"BenchGemmRsPresetsWithJson", {"bench", "gemm-rs", "--preset", "qwen3-32b.o_proj,llama3-70b.o_proj", "--json", two_json},
       {"--json: one preset per run when writing JSON"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Presets, CliBadInput, ::testing::ValuesIn(preset_bad_inputs()),
                         [](const ::testing::TestParamInfo<BadInput>& i) { return std::string(i.param.name); });

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at < s.size();) {
    const size_t nl = s.find('\n', at);
    out.push_back(s.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return out;
}

// The plan's row for m: starts with m right-aligned in 7 columns and ends with a resolved mode and
// a reason ("split-lsa  0.42 waves ...").
bool has_planned_row(const std::string& out, std::int64_t m) {
  static const std::regex row(
      R"(^ *(\d+) .* (gemm-only|split-nccl|split-lsa|split-ce|fused|fused-rs|fused-ce|fused-lsa|decode) +\S.*$)");
  for (const std::string& line : lines_of(out)) {
    std::smatch match;
    if (std::regex_match(line, match, row) && match[1] == std::to_string(m)) return true;
  }
  return false;
}

TEST(CliPresets, PlanPresetsListsEveryPresetWithItsPerRankShapes) {
  const CliRun r = run_weave({"plan", "--presets"});
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const weave::ModelPreset& p : weave::model_presets()) {
    const std::string name(p.name);
    const auto at = r.out.find(name + " ");
    ASSERT_NE(at, std::string::npos) << name << " missing:\n" << r.out;
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find(std::string(weave::to_string(p.op))), std::string::npos) << line;
    if (p.op == weave::PresetOp::kGemmAllReduce) {
      const std::string w1248 = "K_r " + std::to_string(p.k) + " / K_r " + std::to_string(p.k / 2) + " / K_r " +
                                std::to_string(p.k / 4) + " / K_r " + std::to_string(p.k / 8);
      EXPECT_NE(line.find(w1248), std::string::npos) << line;
    } else {
      EXPECT_NE(line.find("Mx" + std::to_string(p.n) + "x" + std::to_string(p.k)), std::string::npos) << line;
    }
    EXPECT_NE(r.out.find(std::string(p.source)), std::string::npos) << name << "'s source missing:\n" << r.out;
  }
  EXPECT_NE(r.out.find("# gemm-rs takes the gemm-ar layers"), std::string::npos) << r.out;
  // The decoder layers of `weave plan|bench decode`, each GEMM with its split and tp-8 shard.
  for (const weave::LayerPreset& l : weave::layer_presets()) {
    EXPECT_NE(r.out.find(std::string(l.name) + ": " + std::string(l.summary)), std::string::npos) << l.name << r.out;
    for (const weave::LayerGemm& g : l.gemms) EXPECT_NE(r.out.find(std::string(g.source)), std::string::npos) << g.name;
  }
  EXPECT_NE(r.out.find("    qkv_proj       column      10240x8192   tp8 1280x8192"), std::string::npos) << r.out;
  // A flag of `weave plan`, not a topic: `weave plan` alone still asks for a topic.
  const CliRun bare = run_weave({"plan"});
  EXPECT_EQ(bare.rc, 2) << bare.out;
}

// Every preset planned at W = 2, 4, 8 through `weave plan gemm-ar|gemm-ag --preset`: the shard in the
// header, one planned row (mode and reason) per default M of the preset.
TEST(CliPresets, EveryPresetPlansAtWorldTwoFourEight) {
  for (const weave::ModelPreset& p : weave::model_presets())
    for (const int w : {2, 4, 8}) {
      const std::string name(p.name), op(weave::to_string(p.op));
      const CliRun r = run_weave({"plan", op, "--preset", name, "--world", std::to_string(w)});
      SCOPED_TRACE(name + " world " + std::to_string(w));
      ASSERT_EQ(r.rc, 0) << r.out;
      EXPECT_NE(r.out.find("preset " + name + " ("), std::string::npos) << r.out;
      const std::int64_t k = p.op == weave::PresetOp::kGemmAllReduce ? p.k / w : p.k;
      const std::string quant(weave::to_string(p.quants.front()));
      EXPECT_NE(r.out.find(op + ": n=" + std::to_string(p.n) + " k=" + std::to_string(k) + " "), std::string::npos)
          << r.out;
      EXPECT_NE(r.out.find(" " + quant), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("world " + std::to_string(w) + ","), std::string::npos) << r.out;
      for (const std::int64_t m : p.ms) EXPECT_TRUE(has_planned_row(r.out, m)) << "no row for m " << m << ":\n" << r.out;
    }
}

// Without -m, the default totals are rounded up per world: a multiple of W, from 1024 on of W x 128.
TEST(Cli, PlanGemmRsDefaultMsAreMultiplesOfTheWorld) {
  CliRun r = run_weave({"plan", "gemm-rs", "--world", "8"});
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const std::int64_t m : {128, 1000, 1024, 4096, 8192}) EXPECT_TRUE(has_planned_row(r.out, m)) << m << r.out;
  r = run_weave({"plan", "gemm-rs", "--world", "3"});
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const std::int64_t m : {129, 1002, 1152, 4224, 8448}) EXPECT_TRUE(has_planned_row(r.out, m)) << m << r.out;
  EXPECT_NE(r.out.find("m_max 8448"), std::string::npos) << r.out;
}

// gemm-rs takes every row-parallel (gemm-ar) preset with the same K_r shard, its default M list
// rounded up to a multiple of the world (W = 6: 16 -> 18, 128 -> 132, 1024 -> 1026, ...).
TEST(CliPresets, EveryRowParallelPresetPlansAsGemmRs) {
  for (const weave::ModelPreset& p : weave::model_presets()) {
    if (p.op != weave::PresetOp::kGemmAllReduce) continue;
    for (const int w : {2, 4, 6, 8}) {
      const std::string name(p.name);
      SCOPED_TRACE(name + " world " + std::to_string(w));
      const CliRun r = run_weave({"plan", "gemm-rs", "--preset", name, "--world", std::to_string(w)});
      if (!weave::preset_shard_violation(p, w, p.quants.front()).empty()) {
        EXPECT_EQ(r.rc, 2) << r.out;  // as gemm-ar: the shard rules, named
        EXPECT_NE(r.out.find(name + " at world " + std::to_string(w)), std::string::npos) << r.out;
        continue;
      }
      ASSERT_EQ(r.rc, 0) << r.out;
      EXPECT_NE(r.out.find("preset " + name + " ("), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("gemm-rs: n=" + std::to_string(p.n) + " k=" + std::to_string(p.k / w) + " "),
                std::string::npos)
          << r.out;
      for (const std::int64_t m : p.ms) {
        const std::int64_t rounded = (m + w - 1) / w * w;
        EXPECT_TRUE(has_planned_row(r.out, rounded)) << "no row for m " << rounded << ":\n" << r.out;
      }
    }
  }
}

// -m and --quant (a shipped one) still apply under a preset; the row count follows -m.
TEST(CliPresets, MAndQuantStillApplyUnderAPreset) {
  CliRun r = run_weave({"plan", "gemm-ar", "--preset", "qwen3-32b.down_proj", "--quant", "blockscale", "--world", "8",
                        "-m", "64,2048"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-ar: n=5120 k=3200 (K_r, per rank) blockscale"), std::string::npos) << r.out;
  EXPECT_TRUE(has_planned_row(r.out, 64)) << r.out;
  EXPECT_TRUE(has_planned_row(r.out, 2048)) << r.out;
  EXPECT_FALSE(has_planned_row(r.out, 8192)) << "the preset's own M list ran too:\n" << r.out;
  r = run_weave({"plan", "gemm-ag", "--preset", "deepseek-v4-pro.wkv_gate", "--world", "8", "-m", "2048"});
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("gemm-ag: n=2048 k=7168 bf16 -> fp32, world 8"), std::string::npos) << r.out;
}

TEST(CliPresets, ValidPresetBenchReachesTheGpuProbe) {
  if (weave::no_gpu_reason().empty()) GTEST_SKIP() << "a Hopper GPU is visible: this would run the benchmark";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"bench", "gemm-ar", "--preset", "llama3-70b.o_proj,qwen3-32b.down_proj"},
        {"bench", "gemm-ar", "--preset", "deepseek-v3.o_proj", "--emulate-world", "8", "-m", "1024"},
        {"bench", "gemm-ag", "--preset", "deepseek-v4-pro.wkv_gate", "--emulate-world", "2"},
        {"bench", "gemm-rs", "--preset", "llama3-70b.o_proj,deepseek-v3.down_proj", "--emulate-world", "4"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(weave::no_gpu_reason()), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("# preset"), std::string::npos) << "a run's header came before the GPU probe:\n" << r.out;
  }
}

TEST(CliPresets, HelpTextsNameThePresetOption) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plan", "--help"}, {"plan", "gemm-ar", "--help"}, {"plan", "gemm-ag", "--help"},
        {"bench", "gemm-ar", "--help"}, {"bench", "gemm-ag", "--help"}, {"plan", "gemm-rs", "--help"},
        {"bench", "gemm-rs", "--help"}}) {
    const CliRun r = run_weave(args);
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(args.size() == 2 ? "--presets" : "--preset"), std::string::npos) << r.out;
  }
}

}  // namespace
