// The CLI's option parsers and range rules (tools/cli/args.hpp), called directly: every accepted
// spelling, every rejected one, and that each error names the option and the rule.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/ag_gemm_options.hpp"
#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "support/expect_error.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/version.hpp"

using namespace weave;
using namespace weave::cli;
using weave::test::error_of;

namespace {

TEST(CliArgs, SizesAcceptDigitsWithAnOptionalBinarySuffix) {
  EXPECT_EQ(parse_size("--bytes", "1"), 1u);
  EXPECT_EQ(parse_size("--bytes", "4096"), 4096u);
  EXPECT_EQ(parse_size("--bytes", "8K"), 8u << 10);
  EXPECT_EQ(parse_size("--bytes", "8k"), 8u << 10);
  EXPECT_EQ(parse_size("--bytes", "64M"), 64u << 20);
  EXPECT_EQ(parse_size("--bytes", "1G"), std::uint64_t{1} << 30);
  EXPECT_EQ(parse_size("--bytes", "1024G"), kMaxSizeBytes);
  EXPECT_EQ(parse_size("--bytes", "007"), 7u);
}

TEST(CliArgs, SizesRefuseSignsJunkZeroAndOverflowNamingTheOption) {
  for (const char* bad : {"-1", "-5", "+5", "", "K", " 5", "5 ", "5KB", "5T", "1.5M", "0x10", "8Kjunk", "abc"}) {
    const std::string msg = error_of([&] { parse_size("-e/--maxbytes", bad); });
    EXPECT_NE(msg.find("-e/--maxbytes '" + std::string(bad) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("digits with an optional K, M or G suffix"), std::string::npos) << bad << ": " << msg;
  }
  EXPECT_NE(error_of([] { parse_size("--bytes", "0"); }).find("at least 1 byte"), std::string::npos);
  EXPECT_NE(error_of([] { parse_size("--bytes", "0K"); }).find("at least 1 byte"), std::string::npos);
  // Too large, including values that overflow 64 bits before or after the suffix.
  for (const char* big : {"1025G", "1099511627777", "18446744073709551615", "99999999999999999999999", "17179869184G"})
    EXPECT_NE(error_of([&] { parse_size("--bytes", big); }).find("at most 1024.00 GiB"), std::string::npos) << big;
}

TEST(CliArgs, HumanBytes) {
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(4096), "4.0 KiB");
  EXPECT_EQ(human_bytes(64u << 20), "64.00 MiB");
  EXPECT_EQ(human_bytes(std::uint64_t{3} << 30), "3.00 GiB");
}

TEST(CliArgs, TilesParseStrictly) {
  const Tile t = parse_tile("--tile", "128x256");
  EXPECT_EQ(t.block_m, 128);
  EXPECT_EQ(t.block_n, 256);
  EXPECT_EQ(parse_tile("--tile", "1x1024").block_n, 1024);
  for (const char* bad : {"128x256junk", "0x0", "0x128", "128x0", "128", "128x", "x128", "128X256", "-128x256",
                          "128x-256", "128x256x64", " 128x256", "128 x256", "1025x128", "99999999999x1", ""}) {
    const std::string msg = error_of([&] { parse_tile("--tile", bad); });
    EXPECT_NE(msg.find("--tile '" + std::string(bad) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("BMxBN"), std::string::npos) << msg;
  }
}

TEST(CliArgs, ShapesParseStrictly) {
  const Shape3 s = parse_shape("--shapes", "4096x5120x2048");
  EXPECT_EQ(s.m, 4096);
  EXPECT_EQ(s.n, 5120);
  EXPECT_EQ(s.k, 2048);
  EXPECT_EQ(parse_shape("--shapes", "2147483647x1x1").m, 2147483647);
  for (const char* bad : {"0x1x1", "1x0x1", "1x1x0", "1x1", "1x1x1x1", "1x1x1junk", "-1x1x1", "1x1x-1", "2147483648x1x1",
                          "1xx1", "x1x1", "1x1x", "", "1 x1x1"}) {
    const std::string msg = error_of([&] { parse_shape("--shapes", bad); });
    EXPECT_NE(msg.find("--shapes '" + std::string(bad) + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MxNxK"), std::string::npos) << msg;
  }
}

class CliOutputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("weave_cli_args_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::permissions(dir_ / "ro", std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
};

TEST_F(CliOutputFile, AcceptsANewOrWritableFileAndCreatesNothing) {
  check_output_file("--json", "");
  const std::string fresh = (dir_ / "out.json").string();
  check_output_file("--json", fresh);
  EXPECT_FALSE(std::filesystem::exists(fresh)) << "the check must not create the file";
  std::ofstream(dir_ / "old.json") << "{}";
  check_output_file("--json", (dir_ / "old.json").string());
}

TEST_F(CliOutputFile, RefusesMissingFoldersAndDirectories) {
  const std::string missing = (dir_ / "no" / "such" / "x.json").string();
  std::string msg = error_of([&] { check_output_file("--json", missing); });
  EXPECT_NE(msg.find("--json '" + missing + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { check_output_file("--json", dir_.string()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST_F(CliOutputFile, RefusesReadOnlyPlaces) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop root, so the read-only cases cannot fail";
  std::filesystem::create_directories(dir_ / "ro");
  std::ofstream(dir_ / "ro" / "old.json") << "{}";
  std::filesystem::permissions(dir_ / "ro" / "old.json", std::filesystem::perms::owner_read);
  std::filesystem::permissions(dir_ / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  EXPECT_NE(error_of([&] { check_output_file("--json", (dir_ / "ro" / "new.json").string()); }).find("not writable"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file("--json", (dir_ / "ro" / "old.json").string()); }).find("not writable"),
            std::string::npos);
}

TEST(CliArgs, DeviceListsAreNonNegativeAndDistinct) {
  check_device_list("--devices", {});
  check_device_list("--devices", {0, 1, 7});
  EXPECT_NE(error_of([] { check_device_list("--devices", {0, -1}); }).find("--devices: CUDA ordinals are >= 0 (got -1)"),
            std::string::npos);
  EXPECT_NE(error_of([] { check_device_list("--devices", {1, 0, 1}); }).find("--devices: ordinal 1 is listed twice"),
            std::string::npos);
}

TEST(CliArgs, FiniteRangeRefusesNanAndInfinityThatCliRangeLetsThrough) {
  const CLI::Validator v = finite_range(0.0, 3600.0);
  for (std::string ok : {"0", "30", "3600", "1e3"}) EXPECT_EQ(v(ok), "") << ok;
  for (std::string bad : {"nan", "NaN", "inf", "-inf", "-1", "3600.5", "abc", ""}) EXPECT_NE(v(bad), "") << bad;
}

TEST(CliArgs, DigitsOnlyRefusesWhatCliWouldWrap) {
  const CLI::Validator v = digits_only();
  for (std::string ok : {"0", "1", "18446744073709551615"}) EXPECT_EQ(v(ok), "") << ok;
  for (std::string bad : {"-1", "+1", "18446744073709551616", "1e3", "0x10", ""}) EXPECT_NE(v(bad), "") << bad;
}

TEST(CliArgs, IntRangeCallsNonIntegersWhatTheyAre) {
  const CLI::Validator v = int_range(-3, 1024);
  for (std::string ok : {"-3", "0", "7", "1024", "0007"}) EXPECT_EQ(v(ok), "") << ok;
  for (std::string bad : {"abc", "1.5", "1e3", "0x10", "+5", "", "-", "--1", "5 "})
    EXPECT_EQ(v(bad), "Value " + bad + " is not an integer") << bad;
  for (std::string bad : {"-4", "1025", "99999999999999999999", "-9223372036854775809"})
    EXPECT_EQ(v(bad), "Value " + bad + " not in range -3 to 1024") << bad;
  EXPECT_EQ(v.get_description(), "INT in [-3 - 1024]");
  const CLI::Validator full = int_range(INT64_MIN, INT64_MAX);
  for (std::string ok : {"-9223372036854775808", "9223372036854775807"}) EXPECT_EQ(full(ok), "") << ok;
  EXPECT_NE(full("9223372036854775808"), "");
}

TEST(CliArgs, ListsRefuseEmptyItemsAndCheckEachItem) {
  EXPECT_EQ(split_list("-m", {"1,2", "3"}), (std::vector<std::string>{"1", "2", "3"}));
  for (std::string bad : {"1,,2", ",1", "1,", ""}) {
    try {
      split_list("-m/--m", {bad});
      ADD_FAILURE() << bad;
    } catch (const CLI::ValidationError& e) {
      EXPECT_NE(std::string(e.what()).find("-m/--m: '" + bad + "' has an empty item"), std::string::npos) << e.what();
    }
  }
  CLI::App app{"test"};
  std::vector<std::int64_t> ms{128, 4096};
  CLI::Option* opt = add_list_option(app, "-m,--m", ms, "rows", int_range(1, 1024));
  EXPECT_EQ(opt->get_default_str(), "128,4096");
  app.parse("-m 1,2 -m 3", false);
  EXPECT_EQ(ms, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_THROW(app.parse("-m 1,2048", false), CLI::ValidationError);
  EXPECT_THROW(app.parse("-m 1,x", false), CLI::ValidationError);
}

// A command shaped like weave's: top level with subcommands, one of which has subcommands.
struct FakeCli {
  CLI::App app{"test"};
  CLI::App* plan = nullptr;
  CLI::App* bench = nullptr;
  int m = 0;
  FakeCli() {
    app.require_subcommand(1);
    app.add_subcommand("info", "");
    plan = app.add_subcommand("plan", "");
    plan->require_subcommand(1);
    plan->add_subcommand("gemm", "")->add_option("-m", m);
    plan->add_subcommand("comm", "");
    bench = app.add_subcommand("bench", "");
    bench->fallthrough();
    bench->add_subcommand("copy", "");
  }
  // The unknown-subcommand sentence after a failed parse; "" if it parsed or the error is another.
  std::string parse(std::vector<std::string> args) {
    std::reverse(args.begin(), args.end());
    try {
      app.parse(args);
    } catch (const CLI::ParseError&) {
      return unknown_subcommand_message(app);
    }
    return "";
  }
};

TEST(CliArgs, UnknownSubcommandsAreNamedWithTheValidOnes) {
  EXPECT_EQ(FakeCli().parse({"nosuchcmd"}), "weave: unknown subcommand 'nosuchcmd' (expected one of: info, plan, bench)");
  EXPECT_EQ(FakeCli().parse({"plan", "nosuch"}), "weave plan: unknown subcommand 'nosuch' (expected one of: gemm, comm)");
  EXPECT_EQ(FakeCli().parse({"bench", "nosuch"}), "weave bench: unknown subcommand 'nosuch' (expected one of: copy)");
  // Not an unknown subcommand: an unknown option, a missing subcommand, an extra word after a leaf.
  EXPECT_EQ(FakeCli().parse({"--nosuch"}), "");
  EXPECT_EQ(FakeCli().parse({}), "");
  EXPECT_EQ(FakeCli().parse({"plan"}), "");
  EXPECT_EQ(FakeCli().parse({"plan", "gemm", "-m", "4", "extra"}), "");
}

// The fused ops' shared option rules (gemm-ag and gemm-ar): a validate() report split at "; ",
// each rule named after its option, and a part no option claims kept with the rule before it.
TEST(FusedOptions, RulesAreNamedAfterTheirOptions) {
  auto option_of = [](const std::string& rule) -> std::string {
    if (starts_with(rule, "n must ")) return "--n 100";
    if (starts_with(rule, "the per-rank GEMM ")) return "--n 100 --k 64";
    return "";
  };
  EXPECT_EQ(name_rules("", option_of), "");
  EXPECT_EQ(name_rules("n must be a multiple of 8", option_of), "--n 100: n must be a multiple of 8");
  EXPECT_EQ(name_rules("the per-rank GEMM [1, 100, 64]: a; b; n must be even", option_of),
            "--n 100 --k 64: the per-rank GEMM [1, 100, 64]: a; b; --n 100: n must be even");
  EXPECT_EQ(name_rules("no option claims this; nor this", option_of), "no option claims this; nor this");
}

TEST(FusedOptions, QuantLayoutAndMMaxNameTheOption) {
  EXPECT_EQ(quant_option("blockscale"), ScaleMode::kBlockscale);
  EXPECT_EQ(scale_layout_option("packed"), ScaleLayout::kPacked);
  EXPECT_NE(error_of([] { quant_option("fp4"); }).find("--quant 'fp4': expected bf16, ptpc, blockscale or mxfp8"),
            std::string::npos);
  EXPECT_NE(error_of([] { scale_layout_option("x"); }).find("--scale-layout 'x': expected raw, packed or mn-major"),
            std::string::npos);
  EXPECT_EQ(m_max_option({128, 4096}, 0, "rows"), 4096);
  EXPECT_EQ(m_max_option({128}, 1024, "rows"), 1024);
  EXPECT_NE(error_of([] { m_max_option({}, 0, "rows"); }).find("-m/--m: give at least one M"), std::string::npos);
  EXPECT_NE(error_of([] { m_max_option({128, 4096}, 1024, "rows per rank"); })
                .find("-m/--m 4096: above --m-max 1024 (the op's window holds at most --m-max rows per rank)"),
            std::string::npos);
}

// gemm-rs: M is the total rows and each rank receives M / world of them.
TEST(FusedOptions, MNotAMultipleOfTheWorldIsRefusedNamingMAndTheRule) {
  m_multiple_of_world_option({128, 1000, 4096}, 8);
  m_multiple_of_world_option({3, 5}, 1);
  const std::string msg = error_of([] { m_multiple_of_world_option({128, 1001, 4096, 6}, 4); });
  EXPECT_NE(msg.find("-m/--m 1001,6: M must be a multiple of the world (4)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank r receives rows [r M/W, (r+1) M/W)"), std::string::npos) << msg;
}

TEST(FusedOptions, MsRoundUpToAMultipleAscendingWithoutDuplicates) {
  const std::vector<std::int64_t> preset = {16, 128, 1024, 4096, 8192};
  EXPECT_EQ(round_up_ms(preset, 8), preset);
  EXPECT_EQ(round_up_ms(preset, 6), (std::vector<std::int64_t>{18, 132, 1026, 4098, 8196}));
  EXPECT_EQ(round_up_ms(std::vector<std::int64_t>{5, 1, 2, 4}, 4), (std::vector<std::int64_t>{4, 8}));
}

// ag-gemm (AllGatherGemm): the options turned into the op's config; every rule of its validate()
// named after the options that set it, and what it has not (another op's mode, a row-parallel
// preset) refused by name.
TEST(AgGemmOptions, DefaultsAreAColumnParallelShardInBf16) {
  const AgGemmOptions o;
  const AllGatherGemmConfig c = ag_gemm_config(o, 8);
  EXPECT_EQ(c.n, 7168);
  EXPECT_EQ(c.k, 8192);
  EXPECT_EQ(c.m_max, 4096);  // the largest default m
  EXPECT_EQ(c.quant, ScaleMode::kBF16);
  EXPECT_EQ(c.out_dtype, DType::kBF16);
  EXPECT_EQ(c.mode, AllGatherGemmMode::kAuto);
  EXPECT_EQ(c.scale_layout, ScaleLayout::kRaw);
  EXPECT_EQ(ag_gemm_shapes(o, 2).size(), 1u);
  AgGemmOptions fp8 = o;
  fp8.quant = "mxfp8";
  fp8.mode = "split-ce";
  fp8.mx_route = "bf16";
  fp8.m_max = 8192;
  const AllGatherGemmConfig m = ag_gemm_config(fp8, 4);
  EXPECT_EQ(m.mode, AllGatherGemmMode::kSplitCe);
  EXPECT_EQ(m.mx_route, MxRoute::kBf16);
  EXPECT_EQ(m.m_max, 8192);
  // fused-ce: its quants (bf16, ptpc, blockscale) with bf16 out, at any world validate() takes.
  for (const char* q : {"bf16", "ptpc", "blockscale"}) {
    AgGemmOptions f = o;
    f.quant = q;
    f.mode = "fused-ce";
    const AllGatherGemmConfig fc = ag_gemm_config(f, 8);
    EXPECT_EQ(fc.mode, AllGatherGemmMode::kFusedCe) << q;
    EXPECT_EQ(to_string(fc.quant), q);
    EXPECT_EQ(ag_gemm_config(f, 2).mode, AllGatherGemmMode::kFusedCe) << q;
  }
}

// `weave plan ag-gemm --mode fused-ce` as CLI11 parses it (the plan's options: --scale-layout and --mode).
TEST(AgGemmOptions, ModeFusedCeParsesFromThePlanCommandLine) {
  CLI::App app{"test"};
  AgGemmOptions o;
  add_ag_gemm_options(app, o, /*with_layout=*/true, /*with_mode=*/true);
  app.parse("--mode fused-ce --quant blockscale -m 128,4096 --scale-layout raw", false);
  EXPECT_EQ(o.mode, "fused-ce");
  const AllGatherGemmConfig c = ag_gemm_config(o, 4);
  EXPECT_EQ(c.mode, AllGatherGemmMode::kFusedCe);
  EXPECT_EQ(c.quant, ScaleMode::kBlockscale);
  EXPECT_EQ(c.m_max, 4096);
  // The --help line lists it with its rule.
  EXPECT_NE(app.help().find("fused-ce (fused-ce: bf16, ptpc, blockscale with bf16 out"), std::string::npos) << app.help();
}

TEST(AgGemmOptions, EveryBrokenRuleNamesItsOption) {
  struct Case {
    void (*tweak)(AgGemmOptions&);
    int world;
    const char* says;
  };
  const Case cases[] = {
      {[](AgGemmOptions& o) { o.n = 100; }, 2,
       "--n 100 --out bf16: the gathered GEMM [world x m_max, N, K] = [8192, 100, 8192]: n must be a multiple of 8"},
      {[](AgGemmOptions& o) { o.k = 100, o.quant = "blockscale"; }, 2, "--k 100 --quant blockscale: the gathered GEMM"},
      {[](AgGemmOptions& o) { o.k = 2080, o.quant = "mxfp8"; }, 2, "--quant mxfp8 --k 2080: mxfp8 needs k a multiple of 128"},
      {[](AgGemmOptions& o) { o.quant = "blockscale", o.layout = "mn-major"; }, 2,
       "--scale-layout mn-major --quant blockscale: scale_layout must be raw"},
      {[](AgGemmOptions& o) { o.quant = "ptpc", o.out = "fp32"; }, 2, "--quant ptpc --out fp32: fp8 modes (ptpc) produce bf16"},
      {[](AgGemmOptions& o) { o.out = "e4m3"; }, 2, "--out 'e4m3': expected bf16 or fp32"},
      {[](AgGemmOptions& o) { o.mode = "fused-lsa"; }, 2,
       "--mode 'fused-lsa': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused-ce (AllGatherGemm's "
       "only fused mode is fused-ce)"},
      {[](AgGemmOptions& o) { o.mode = "decode"; }, 2,
       "--mode 'decode': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused-ce"},
      // fused-ce's GEMM reads A's scales as they land: no mxfp8 (its scales need a pre-pass), no fp32 out.
      {[](AgGemmOptions& o) { o.mode = "fused-ce", o.quant = "mxfp8"; }, 2,
       "--mode fused-ce --quant mxfp8 --out bf16: mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output"},
      {[](AgGemmOptions& o) { o.mode = "fused-ce", o.out = "fp32"; }, 4,
       "--mode fused-ce --quant bf16 --out fp32: mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output"},
      {[](AgGemmOptions& o) { o.mx_route = "native"; }, 2, "--mx-route native: applies to --quant mxfp8 only"},
      {[](AgGemmOptions& o) { o.ms = {128, 4096}, o.m_max = 1024; }, 2, "-m/--m 4096: above --m-max 1024"},
      {[](AgGemmOptions&) {}, 9, "--world 9: world must be in 1..8"},
      {[](AgGemmOptions&) {}, 0, "--world 0: world must be in 1..8"},
  };
  for (const Case& c : cases) {
    AgGemmOptions o;
    c.tweak(o);
    const std::string msg = error_of([&] { ag_gemm_config(o, c.world); });
    EXPECT_NE(msg.find(c.says), std::string::npos) << "wanted '" << c.says << "' in: " << msg;
    EXPECT_NE(error_of([&] { ag_gemm_shapes(o, c.world); }).find(c.says), std::string::npos) << c.says;
  }
}

// --preset: the column-parallel and replicated GEMMs of the decoder layer table, sharded by world.
TEST(AgGemmOptions, APresetIsAColumnOrReplicatedGemmOfTheLayerTable) {
  AgGemmOptions o;
  o.preset = "llama3-70b.gate_up_proj,deepseek-v3.qkv_a_proj";
  o.many_presets = true;
  const std::vector<AgGemmOptions> shapes = ag_gemm_shapes(o, 8);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].n, 2 * 28672 / 8);
  EXPECT_EQ(shapes[0].k, 8192);
  EXPECT_EQ(shapes[0].quant, "bf16");
  EXPECT_EQ(shapes[0].out, "bf16");
  EXPECT_EQ(shapes[0].preset, "llama3-70b.gate_up_proj");
  EXPECT_EQ(shapes[0].ms, o.ms) << "the default m list (rows per rank) stays";
  EXPECT_EQ(shapes[1].n, 1536 + 512 + 64) << "replicated: every rank the whole N";
  EXPECT_EQ(shapes[1].quant, "blockscale");
  EXPECT_EQ(ag_gemm_config(shapes[1], 8).quant, ScaleMode::kBlockscale);

  AgGemmOptions row;
  row.preset = "llama3-70b.down_proj";
  const std::string r = error_of([&] { ag_gemm_shapes(row, 2); });
  EXPECT_NE(r.find("--preset llama3-70b.down_proj: a row-parallel GEMM"), std::string::npos) << r;
  EXPECT_NE(r.find("`gemm-rs --preset llama3-70b.down_proj`"), std::string::npos) << r;
  AgGemmOptions unknown;
  unknown.preset = "llama3-70b";
  EXPECT_NE(error_of([&] { ag_gemm_shapes(unknown, 2); }).find("no column-parallel or replicated GEMM"), std::string::npos);
  AgGemmOptions two;
  two.preset = "llama3-70b.qkv_proj,qwen3-32b.qkv_proj";  // a plan takes one
  EXPECT_NE(error_of([&] { ag_gemm_shapes(two, 2); }).find("one preset per plan"), std::string::npos);
  AgGemmOptions unshipped;
  unshipped.preset = "qwen3-32b.gate_up_proj";
  unshipped.quant = "mxfp8";
  // Without CLI11 parsing nothing is "typed": the quant is the model's default; the refusal of a
  // typed --quant the model does not ship is CliBadInput's PlanAgGemmPresetUnshippedQuant.
  EXPECT_EQ(ag_gemm_shapes(unshipped, 2)[0].quant, "bf16");
}

TEST(AgGemmOptions, RulesOfTheGatheredGemmNameWhatTheyAreAbout) {
  AllGatherGemmConfig c;
  c.n = 100;
  c.k = 64;
  c.m_max = 512;
  EXPECT_EQ(name_ag_gemm_rules("", c, 2), "");
  EXPECT_EQ(name_ag_gemm_rules("the gathered GEMM [world x m_max, N, K] = [1024, 100, 64]: k must be even", c, 2),
            "--k 64 --quant bf16: the gathered GEMM [world x m_max, N, K] = [1024, 100, 64]: k must be even");
  EXPECT_EQ(name_ag_gemm_rules("the gathered GEMM [world x m_max, N, K] = [1024, 100, 64]: m, n and k must each be < 2^31",
                               c, 2),
            "--world 2 --m-max 512 --n 100 --k 64 --quant bf16: the gathered GEMM [world x m_max, N, K] = [1024, 100, "
            "64]: m, n and k must each be < 2^31");
  EXPECT_EQ(name_ag_gemm_rules("the gathered A and the output (world x m_max rows) are over 1 TiB", c, 4),
            "--world 4 --m-max 512 --n 100 --k 64: the gathered A and the output (world x m_max rows) are over 1 TiB");
}

// Errors carry the source location from the project root, not the build machine's folders.
TEST(ErrorLocation, IsRelativeToTheProjectRoot) {
  try {
    gemm_plan(GemmProblem{.m = 0, .n = 128, .k = 128}, 132);
    FAIL() << "gemm_plan accepted m = 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.location().rfind("src/gemm/planner.cpp:", 0), 0u) << e.location();
    const std::string what = e.what();
    EXPECT_NE(what.find("(src/gemm/planner.cpp:"), std::string::npos) << what;
    EXPECT_EQ(what.find("/src/gemm/"), std::string::npos) << "an absolute or ../ path: " << what;
  }
}

TEST(Version, HeaderAndLibraryAgree) {
  EXPECT_STREQ(weave::version(), WEAVE_VERSION_STRING);
  EXPECT_EQ(std::to_string(WEAVE_VERSION_MAJOR) + "." + std::to_string(WEAVE_VERSION_MINOR) + "." +
                std::to_string(WEAVE_VERSION_PATCH),
            WEAVE_VERSION_STRING);
}

}  // namespace
