// The GPU-machine scripts' pass/fail decision, run on the CPU: scripts/gpu_all.sh with stand-ins
// for the weave binary and the GPU test binaries (WEAVE_PREBUILT), each exiting as a case says.
// The run must exit non-zero when any test binary fails, a repeat fails, a bench fails, a plot
// fails or a negative control passes, and its summary must say which (a failed plot beside the
// tests' and benches' own verdicts, never instead of them); every script must parse (bash -n).
// Also scripts/sass_wgmma_gaps.sh's count over a stand-in cuobjdump's SASS.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct ScriptRun {
  int rc = -1;
  std::string out;
};

ScriptRun run_shell(const std::string& command) {
  ScriptRun r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p)) r.out += buf;
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return r;
}

void write_script(const fs::path& path, const std::string& body) {
  std::ofstream(path) << "#!/usr/bin/env bash\n" << body;
  ::chmod(path.c_str(), 0755);
}

class GpuAllScript : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weave-gpu-all-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "bin");
    // weave: `info` and `plan` succeed; the copy negative control exits FAKE_NEGATIVE (it must
    // exit 1: the injected fault caught); every other bench writes its --json file and exits FAKE_BENCH
    // (with --arms gemm-only,weave-gemm it first prints one ratio line, FAKE_LEG_RATIO).
    // `plan --presets` lists one preset per fused op (the table's name and op columns).
    write_script(dir_ / "bin" / "weave", R"(case "$1" in
  plan) [ "$2" = --presets ] && printf 'preset op N K\nm.o_proj gemm-ar 7168 2048\nm.down gemm-ar 7168 4096\nm.wkv gemm-ag 576 7168\n'; exit 0 ;;
  info) exit 0 ;;
esac
prev=
for a in "$@"; do
  [ "$a" = --inject-skip ] && exit "${FAKE_NEGATIVE:-1}"
  [ "$prev" = --json ] && echo '{"suite": "fake", "rows": []}' >"$a"
  prev=$a
done
echo "fake bench $*"; [ -n "${WEAVE_GEMM_PDL:-}" ] && echo "fake bench under WEAVE_GEMM_PDL=$WEAVE_GEMM_PDL"
case " $* " in *" gemm-only,weave-gemm "*)
  echo "m=64: gemm-only / weave-gemm = ${FAKE_LEG_RATIO:-1.000}, stand-in" ;; esac
sleep "${FAKE_BENCH_SECONDS:-0}"
exit "${FAKE_BENCH:-0}"
)");
    // The plots' interpreter (PLOT_PYTHON): `plot_bench.py FILE... --out DIR` writes one PNG per
    // file into DIR and exits FAKE_PLOT.
    write_script(dir_ / "bin" / "fake_python", R"(echo "fake plot $*"; shift; out=.; files=()
while [ $# -gt 0 ]; do case $1 in --out) out=$2; shift 2 ;; *) files+=("$1"); shift ;; esac; done
for f in "${files[@]}"; do : >"$out/$(basename "$f" .json).png"; done
exit "${FAKE_PLOT:-0}"
)");
    // The GPU test binaries: a repeated run prints FAKE_REPEAT_FAILS failed case runs.
    write_script(dir_ / "bin" / "weave_tests_gpu", R"(for a in "$@"; do
  case $a in --gtest_repeat=*)
    n=${FAKE_REPEAT_FAILS:-0}; for i in $(seq 1 "$n"); do echo "[  FAILED  ] EmulatedWorld.Case$i"; done
    [ "$n" = 0 ]; exit $? ;;
  esac
done
echo "[  PASSED  ] 3 tests."; exit "${FAKE_GPU:-0}"
)");
    write_script(dir_ / "bin" / "weave_tests_multi_gpu", "echo \"[  PASSED  ] 2 tests.\"; exit \"${FAKE_MULTI:-0}\"\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  ScriptRun gpu_all(const std::string& env, const std::string& mode = "full") {
    return run_shell("cd " + std::string(WEAVE_TEST_SOURCE_DIR) + " && env " + env + " TMPDIR=" + dir_.string() +
                     " WEAVE_PREBUILT=" + (dir_ / "bin").string() +
                     " PLOT_PYTHON=" + (dir_ / "bin" / "fake_python").string() + " OUT=" + (dir_ / "out").string() +
                     " TEST_TIMEOUT=30 BENCH_TIMEOUT=30 bash scripts/gpu_all.sh " + mode);
  }

  fs::path dir_;
};

TEST_F(GpuAllScript, ExitsZeroWhenEveryStepPassed) {
  const ScriptRun r = gpu_all("FAKE_BENCH=0");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("RESULT: ok"), std::string::npos) << r.out;
  std::ifstream summary(dir_ / "out" / "summary.txt");
  const std::string text((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("RESULT: ok"), std::string::npos) << text;
  // The fused part: every fused op's suite in the emulated world, gemm-rs short (its M a multiple of W x 128).
  for (const char* part : {"bench gemm_ag_emu2: exit 0", "bench gemm_ar_emu2: exit 0",
                           "fake bench bench gemm-rs --emulate-world 2 -m 1024,4096 -i 5", "bench gemm_rs_emu2: exit 0",
                           "fake bench bench ag-gemm --emulate-world 2 -m 1024,4096 -i 5", "bench ag_gemm_emu2: exit 0"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " missing:\n" << r.out;
}

TEST_F(GpuAllScript, ExitsOneNamingEachFailedStep) {
  struct Case {
    const char* env;
    const char* mode;
    const char* says;
  };
  for (const Case& c : {Case{"FAKE_GPU=1", "tests", "tests gpu: exit 1, must exit 0"},
                        Case{"FAKE_MULTI=3", "tests", "tests multi_gpu: exit 3, must exit 0"},
                        Case{"FAKE_REPEAT_FAILS=2", "fused", "failed case runs: 2 failed, must be none"},
                        Case{"FAKE_NEGATIVE=0", "full", "bench copy --inject-skip: negative control exit 0, must exit 1"},
                        Case{"FAKE_BENCH=1", "gemm", "bench gemm: exit 1, must exit 0"},
                        Case{"FAKE_BENCH=1", "quick", "bench default: exit 1, must exit 0"}}) {
    const ScriptRun r = gpu_all(c.env, c.mode);
    EXPECT_EQ(r.rc, 1) << c.env << " " << c.mode << ":\n" << r.out;
    EXPECT_NE(r.out.find("RESULT: FAILED"), std::string::npos) << c.env << ":\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.env << ":\n" << r.out;
  }
}

// DECODE_PDL_VARIANTS: the decode suite on the tiled kernels once per listed WEAVE_GEMM_PDL value,
// each its own bench (and verdict); none without the list.
TEST_F(GpuAllScript, GemmModeRunsTheDecodeSuiteOncePerListedPdlVariant) {
  const ScriptRun r = gpu_all("FAKE_BENCH=0 DECODE_PDL_VARIANTS='ring,start l2:16,late'", "gemm");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* part : {"fake bench bench decode --decode-route tiles --tp 2,8 -m 8,16,32 --quant bf16,ptpc",
                           "fake bench under WEAVE_GEMM_PDL=ring,start", "bench decode_pdl_ring_start: exit 0",
                           "fake bench under WEAVE_GEMM_PDL=l2:16,late", "bench decode_pdl_l2_16_late: exit 0"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " missing:\n" << r.out;
  const ScriptRun plain = gpu_all("FAKE_BENCH=0", "gemm");
  EXPECT_EQ(plain.rc, 0) << plain.out;
  EXPECT_EQ(plain.out.find("decode_pdl_"), std::string::npos) << plain.out;
}

// multi (a machine of 2+ GPUs): the multi-GPU tests, the comm suite and every fused preset over
// every GPU (--devices), not the one-GPU tests; a failing multi-GPU test binary or preset bench
// fails the run.
TEST_F(GpuAllScript, MultiRunsTheMultiGpuTestsCommAndEveryPreset) {
  const ScriptRun ok = gpu_all("FAKE_BENCH=0 DEVICES=0,1", "multi");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  for (const char* part : {"tests multi_gpu (exit 0", "bench comm: exit 0", "GPUs: 0,1",
                           "fake bench bench gemm-ar --preset m.o_proj --devices 0,1",
                           "fake bench bench gemm-ar --preset m.down --devices 0,1",
                           "fake bench bench gemm-ag --preset m.wkv --devices 0,1",
                           // gemm-rs over the row-parallel (gemm-ar) presets, with its own M list
                           "fake bench bench gemm-rs --preset m.o_proj --devices 0,1 -m 128,1000,4096,8192 -i 5",
                           "fake bench bench gemm-rs --preset m.down --devices 0,1", "bench gemm_rs_m.down: exit 0",
                           // ag-gemm over a column GEMM of the decoder layer table, bf16 and ptpc
                           "fake bench bench ag-gemm --preset llama3-70b.gate_up_proj --quant bf16 --devices 0,1 "
                           "-m 128,1024,4096 -i 5",
                           "fake bench bench ag-gemm --preset llama3-70b.gate_up_proj --quant ptpc --devices 0,1",
                           "bench ag_gemm_ptpc: exit 0"})
    EXPECT_NE(ok.out.find(part), std::string::npos) << part << " missing:\n" << ok.out;
  EXPECT_EQ(ok.out.find("gemm-rs --preset m.wkv"), std::string::npos) << "gemm-rs takes no gemm-ag layer:\n" << ok.out;
  const ScriptRun rs_args = gpu_all("FAKE_BENCH=0 DEVICES=0,1 GEMM_RS_ARGS='-m 256 -i 3'", "multi");
  EXPECT_NE(rs_args.out.find("fake bench bench gemm-rs --preset m.o_proj --devices 0,1 -m 256 -i 3"), std::string::npos)
      << rs_args.out;
  EXPECT_EQ(ok.out.find("tests gpu ("), std::string::npos) << "multi runs no one-GPU tests:\n" << ok.out;
  const ScriptRun bad = gpu_all("FAKE_MULTI=1", "multi");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("tests multi_gpu: exit 1, must exit 0"), std::string::npos) << bad.out;
  const ScriptRun bench = gpu_all("FAKE_BENCH=1", "multi");
  EXPECT_EQ(bench.rc, 1) << bench.out;
  EXPECT_NE(bench.out.find("bench gemm_ar_m.o_proj: exit 1, must exit 0"), std::string::npos) << bench.out;
  // MULTI_PART: one half per device call.
  const ScriptRun tests_only = gpu_all("FAKE_BENCH=1 MULTI_PART=tests", "multi");
  EXPECT_EQ(tests_only.rc, 0) << "no bench runs, so the failing fake bench is not reached:\n" << tests_only.out;
  EXPECT_NE(tests_only.out.find("tests multi_gpu (exit 0"), std::string::npos) << tests_only.out;
  EXPECT_EQ(tests_only.out.find("fake bench"), std::string::npos) << tests_only.out;
  const ScriptRun bench_only = gpu_all("FAKE_BENCH=0 FAKE_MULTI=1 MULTI_PART=bench DEVICES=0,1", "multi");
  EXPECT_EQ(bench_only.rc, 0) << "no test binary runs, so the failing fake one is not reached:\n" << bench_only.out;
  EXPECT_EQ(bench_only.out.find("tests multi_gpu"), std::string::npos) << bench_only.out;
  EXPECT_NE(bench_only.out.find("bench comm: exit 0"), std::string::npos) << bench_only.out;
  // bench-ar / bench-rest: the bench half in two calls; together every bench of `bench`, once.
  const ScriptRun ar_part = gpu_all("FAKE_BENCH=0 FAKE_MULTI=1 MULTI_PART=bench-ar DEVICES=0,1", "multi");
  const ScriptRun rest_part = gpu_all("FAKE_BENCH=0 FAKE_MULTI=1 MULTI_PART=bench-rest DEVICES=0,1", "multi");
  for (const ScriptRun* part : {&ar_part, &rest_part}) {
    EXPECT_EQ(part->rc, 0) << part->out;
    EXPECT_EQ(part->out.find("tests multi_gpu"), std::string::npos) << part->out;
  }
  for (const char* in_ar : {"bench comm: exit 0", "fake bench bench gemm-ar --preset m.o_proj --devices 0,1",
                            "fake bench bench gemm-ar --preset m.down --devices 0,1"}) {
    EXPECT_NE(ar_part.out.find(in_ar), std::string::npos) << in_ar << " missing:\n" << ar_part.out;
    EXPECT_EQ(rest_part.out.find(in_ar), std::string::npos) << in_ar << " ran twice:\n" << rest_part.out;
  }
  for (const char* in_rest : {"fake bench bench gemm-rs --preset m.o_proj --devices 0,1",
                              "fake bench bench gemm-ag --preset m.wkv --devices 0,1",
                              "fake bench bench ag-gemm --preset llama3-70b.gate_up_proj --quant ptpc --devices 0,1"}) {
    EXPECT_NE(rest_part.out.find(in_rest), std::string::npos) << in_rest << " missing:\n" << rest_part.out;
    EXPECT_EQ(ar_part.out.find(in_rest), std::string::npos) << in_rest << " ran twice:\n" << ar_part.out;
  }
  const ScriptRun ar_fails = gpu_all("FAKE_BENCH=1 MULTI_PART=bench-ar", "multi");
  EXPECT_EQ(ar_fails.rc, 1) << ar_fails.out;
  const ScriptRun wrong = gpu_all("MULTI_PART=half", "multi");
  EXPECT_EQ(wrong.rc, 2) << wrong.out;
  EXPECT_NE(wrong.out.find("MULTI_PART='half': expected all, tests, bench, bench-ar or bench-rest"), std::string::npos)
      << wrong.out;
}

// leg (issue 41 item 1): every preset of each fused op (gemm-rs over the gemm-ar layers, ag-gemm in
// bf16 and ptpc) with the arms gemm-only and weave-gemm, emulated W = 2 and world 1, no test binary;
// every ratio in leg_ratios.txt and the count past LEG_TOLERANCE in the summary. A ratio past it is
// not a failure; a failed bench is.
TEST_F(GpuAllScript, LegModeRunsEveryPresetAtBothWorldsAndCountsTheRatios) {
  const ScriptRun r = gpu_all("FAKE_BENCH=0 FAKE_LEG_RATIO=1.050", "leg");
  EXPECT_EQ(r.rc, 0) << "a ratio past the tolerance is a finding, not a failure:\n" << r.out;
  for (const char* part :
       {"fake bench bench gemm-ar --preset m.o_proj --emulate-world 2 --arms gemm-only,weave-gemm -m 64,256,1024,4096 "
        "-i 5 --no-idle-gate",
        "fake bench bench gemm-ar --preset m.o_proj --arms gemm-only,weave-gemm -m 64,256,1024,4096",
        "fake bench bench gemm-rs --preset m.down --emulate-world 2 --arms gemm-only,weave-gemm",
        "fake bench bench gemm-ag --preset m.wkv --arms gemm-only,weave-gemm",
        "fake bench bench ag-gemm --preset llama3-70b.gate_up_proj --quant ptpc --emulate-world 2 --arms "
        "gemm-only,weave-gemm",
        "bench leg_ag_gemm_llama3-70b.gate_up_proj_w1_bf16: exit 0",
        // 2 gemm-ar + 2 gemm-rs + 1 gemm-ag presets and ag-gemm's 2 quants, each at W = 2 and 1.
        "leg: 14 ratios (gemm-only / weave-gemm), 14 past 1.02 (max 1.050: leg_gemm_ar_m.o_proj_w2 m 64)"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " missing:\n" << r.out;
  EXPECT_EQ(r.out.find("gemm-rs --preset m.wkv"), std::string::npos) << "gemm-rs takes no gemm-ag layer:\n" << r.out;
  EXPECT_EQ(r.out.find("tests gpu ("), std::string::npos) << "leg runs benches only:\n" << r.out;
  std::ifstream ratios(dir_ / "out" / "leg_ratios.txt");
  int lines = 0;
  for (std::string line; std::getline(ratios, line);) ++lines;
  EXPECT_EQ(lines, 14);
  const ScriptRun fine = gpu_all("FAKE_BENCH=0 LEG_WORLDS=1", "leg");
  EXPECT_EQ(fine.rc, 0) << fine.out;
  EXPECT_NE(fine.out.find("leg: 7 ratios (gemm-only / weave-gemm), 0 past 1.02"), std::string::npos) << fine.out;
  EXPECT_EQ(fine.out.find("--emulate-world"), std::string::npos) << "LEG_WORLDS=1: world 1 only:\n" << fine.out;
  const ScriptRun bad = gpu_all("FAKE_BENCH=1", "leg");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("bench leg_gemm_ar_m.o_proj_w2: exit 1, must exit 0"), std::string::npos) << bad.out;
}

// GPU_ALL_BUDGET: a run that would pass a device call's limit ends inside it with its summary: a
// step is cut to what is left less the summary's 30 s, a step with under 10 s left is not run, and
// either fails the run.
TEST_F(GpuAllScript, ABudgetEndsTheRunInTimeWithItsSummary) {
  const auto t = std::chrono::steady_clock::now();
  const ScriptRun r = gpu_all("FAKE_BENCH=0 FAKE_BENCH_SECONDS=100 GPU_ALL_BUDGET=50 MULTI_PART=bench-ar DEVICES=0,1",
                              "multi");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_LT(seconds, 50.0) << r.out;
  EXPECT_NE(r.out.find("bench comm: exit 124"), std::string::npos) << "comm cut to the 20 s left:\n" << r.out;
  EXPECT_NE(r.out.find("not run (GPU_ALL_BUDGET=50 spent): weave bench gemm-ar"), std::string::npos) << r.out;
  std::ifstream summary(dir_ / "out" / "summary.txt");
  const std::string text((std::istreambuf_iterator<char>(summary)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("RESULT: FAILED"), std::string::npos) << text;
  // Time enough: the budget changes nothing.
  const ScriptRun roomy = gpu_all("FAKE_BENCH=0 GPU_ALL_BUDGET=600 MULTI_PART=bench-ar DEVICES=0,1", "multi");
  EXPECT_EQ(roomy.rc, 0) << roomy.out;
  EXPECT_EQ(roomy.out.find("not run"), std::string::npos) << roomy.out;
}

// multi renders its benches' JSON after them (one PNG per file here: eight, so packed into
// plots.tgz); a plot that fails is a RESULT line of its own: the run fails naming it, and the
// tests' and benches' verdicts stay as they were (a failing test binary is still named, passing
// steps are not).
TEST_F(GpuAllScript, MultiPlotsItsBenchesAndAPlotFailureIsALineOfItsOwn) {
  const ScriptRun ok = gpu_all("FAKE_BENCH=0 DEVICES=0,1", "multi");
  EXPECT_EQ(ok.rc, 0) << ok.out;
  // The interpreter's command line, from the plot log packed with the others.
  const ScriptRun log = run_shell("tar -xzOf " + (dir_ / "out" / "logs.tgz").string() + " ./plots.log");
  EXPECT_NE(log.out.find("fake plot scripts/plot_bench.py "), std::string::npos) << log.out;
  for (const char* json : {"bench_comm.json", "bench_gemm_ar_m.down.json", "bench_gemm_ag_m.wkv.json",
                           "bench_gemm_rs_m.o_proj.json", "bench_ag_gemm_ptpc.json", " --out "})
    EXPECT_NE(log.out.find(json), std::string::npos) << json << " not passed to the plots:\n" << log.out;
  EXPECT_NE(ok.out.find("plots: exit 0, 8 PNG(s) from 8 bench JSON file(s)"), std::string::npos) << ok.out;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "plots.tgz")) << ok.out;
  EXPECT_NE(ok.out.find("RESULT: ok"), std::string::npos) << ok.out;

  const ScriptRun plot = gpu_all("FAKE_BENCH=0 FAKE_PLOT=1", "multi");
  EXPECT_EQ(plot.rc, 1) << plot.out;
  EXPECT_NE(plot.out.find("RESULT: FAILED (1)"), std::string::npos) << "the plot alone:\n" << plot.out;
  EXPECT_NE(plot.out.find("plots (scripts/plot_bench.py): exit 1, must exit 0"), std::string::npos) << plot.out;
  EXPECT_NE(plot.out.find("tests multi_gpu (exit 0"), std::string::npos) << plot.out;

  const ScriptRun both = gpu_all("FAKE_BENCH=0 FAKE_PLOT=1 FAKE_MULTI=1", "multi");
  EXPECT_EQ(both.rc, 1) << both.out;
  EXPECT_NE(both.out.find("RESULT: FAILED"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("tests multi_gpu: exit 1, must exit 0"), std::string::npos) << both.out;
  EXPECT_NE(both.out.find("plots (scripts/plot_bench.py): exit 1, must exit 0"), std::string::npos) << both.out;

  // No JSON (every bench failed before writing one): nothing to plot, said, not a plot failure.
  write_script(dir_ / "bin" / "weave", "case \"$1\" in plan|info) exit 0 ;; esac; exit 1\n");
  const ScriptRun none = gpu_all("", "multi");
  EXPECT_NE(none.out.find("plots: no bench JSON to render"), std::string::npos) << none.out;
  EXPECT_EQ(none.out.find("plots (scripts/plot_bench.py)"), std::string::npos) << none.out;
}

// scripts/sass_wgmma_gaps.sh over a stand-in cuobjdump's SASS: a kernel whose gap between two
// wgmmas holds a load and then a multiply counts as the stall pattern; loads alone, a multiply
// before the load, or anything after the group's wait are listed or ignored but never counted;
// --check fails only where one is; a failing cuobjdump is an error, not an empty count.
TEST(SassWgmmaGaps, CountsOnlyALoadThenAMultiplyBetweenOneGroupsWgmmas) {
  const fs::path dir = fs::temp_directory_path() / ("weave-sass-gaps-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_script(dir / "cuobjdump", R"(cat <<'SASS'
		Function : k_stall
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR28], RZ, !UPT ;
        /*0030*/                   LDS R4, [R6+0x34000] ;
        /*0040*/                   FMUL R4, R7, R4 ;
        /*0050*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR24], R24 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
		Function : k_loads_only
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR28], RZ, !UPT ;
        /*0030*/                   LDS R4, [R6+0x34000] ;
        /*0040*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR24], R24 ;
        /*0050*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0060*/                   FMUL R4, R7, R4 ;
		Function : k_multiply_first
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR28], RZ, !UPT ;
        /*0030*/                   FMUL R4, R7, R5 ;
        /*0040*/                   LDS R5, [R6+0x34000] ;
        /*0050*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR24], R24 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
		Function : k_clean
        /*0010*/                   WARPGROUP.ARRIVE ;
        /*0020*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR28], RZ, !UPT ;
        /*0030*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR24], R24 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   LDS R4, [R6+0x34000] ;
        /*0060*/                   FFMA R8, R24, R4, R8 ;
SASS
)");
  // `CUOBJDUMP=dir/tool sass_wgmma_gaps.sh [flags] BINARY [filter]`; the stand-in's own file serves as BINARY.
  auto gaps = [&](const std::string& tool, const std::string& flags, const std::string& filter = "") {
    return run_shell("CUOBJDUMP=" + (dir / tool).string() + " bash " + std::string(WEAVE_TEST_SOURCE_DIR) +
                     "/scripts/sass_wgmma_gaps.sh " + flags + " " + (dir / "cuobjdump").string() + " " + filter);
  };
  const ScriptRun all = gaps("cuobjdump", "");
  EXPECT_EQ(all.rc, 0) << all.out;
  EXPECT_NE(all.out.find("3 kernel(s) with instructions between their wgmmas, 1 with a load and then an FMUL/FFMA"),
            std::string::npos)
      << all.out;
  EXPECT_NE(all.out.find("k_stall: [ LDS FMUL ]"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("k_multiply_first: [ FMUL LDS ]"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("k_clean"), std::string::npos) << all.out;
  // The name filter keeps only the kernels it names.
  const ScriptRun one = gaps("cuobjdump", "", "k_loads");
  EXPECT_NE(one.out.find("1 kernel(s) with instructions between their wgmmas, 0 with"), std::string::npos) << one.out;
  // --check fails where a kernel has the pattern, and only there.
  EXPECT_EQ(gaps("cuobjdump", "--check").rc, 1);
  EXPECT_EQ(gaps("cuobjdump", "--check", "k_multiply_first").rc, 0);
  // A cuobjdump that fails (e.g. no nvdisasm beside it): exit 2 naming it, never a clean count.
  write_script(dir / "cuobjdump_fails", "echo 'cuobjdump fatal   : Could not find executable file nvdisasm' >&2; exit 1\n");
  const ScriptRun failed = gaps("cuobjdump_fails", "--check");
  EXPECT_EQ(failed.rc, 2) << failed.out;
  EXPECT_NE(failed.out.find("nothing was checked"), std::string::npos) << failed.out;
  EXPECT_EQ(failed.out.find("kernel(s)"), std::string::npos) << failed.out;
  // No binary: usage, exit 2.
  const ScriptRun bad = run_shell("bash " + std::string(WEAVE_TEST_SOURCE_DIR) + "/scripts/sass_wgmma_gaps.sh " +
                                  (dir / "missing").string());
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("usage:"), std::string::npos) << bad.out;
  fs::remove_all(dir);
}

TEST(GpuScripts, EveryScriptParses) {
  for (const auto& e : fs::directory_iterator(fs::path(WEAVE_TEST_SOURCE_DIR) / "scripts")) {
    if (e.path().extension() != ".sh") continue;
    const ScriptRun r = run_shell("bash -n " + e.path().string());
    EXPECT_EQ(r.rc, 0) << e.path() << ":\n" << r.out;
  }
}

}  // namespace
