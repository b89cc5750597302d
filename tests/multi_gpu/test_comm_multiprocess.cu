// One process per GPU, bootstrapped from an ncclUniqueId that rank 0 writes to a file (the
// launcher path of Communicator::create). The parent test re-executes this binary once per rank
// (fork + exec, so no child inherits a CUDA context) running CommMultiProcessChild.Run, which
// self-tests a collective per transport and checks that a configuration mismatch raises on every
// rank. The parent waits with a deadline and kills children that overrun it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm_support.hpp"

extern char** environ;

using namespace weave;
using namespace weave::test;

TEST(CommMultiProcess, BootstrapFromAUniqueIdFileOneProcessPerGpu) {
  WEAVE_REQUIRE_GPUS(2);
  const int world = 2;
  const std::string id_file = "/tmp/weave_mp_id." + std::to_string(::getpid());
  std::remove(id_file.c_str());
  // Everything the child needs is built before fork(): this process may already run NCCL and
  // CUDA threads, so the child calls nothing but execve (async-signal-safe).
  std::vector<std::vector<std::string>> envs(world);
  for (int r = 0; r < world; ++r) {
    for (char** e = environ; *e; ++e) envs[r].push_back(*e);
    envs[r].push_back("WEAVE_MP_RANK=" + std::to_string(r));
    envs[r].push_back("WEAVE_MP_WORLD=" + std::to_string(world));
    envs[r].push_back("WEAVE_MP_ID_FILE=" + id_file);
  }
  std::vector<std::vector<char*>> envps(world);
  for (int r = 0; r < world; ++r) {
    for (auto& s : envs[r]) envps[r].push_back(s.data());
    envps[r].push_back(nullptr);
  }
  char exe[] = "/proc/self/exe";
  char filter[] = "--gtest_filter=CommMultiProcessChild.Run";
  char* argv[] = {exe, filter, nullptr};
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execve(exe, argv, envps[r].data());
      std::_Exit(127);
    }
    children.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::vector<int> status(world, -1);
  int running = world;
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      const pid_t done = ::waitpid(children[r], &st, WNOHANG);
      if (done == children[r]) {
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r)
        if (status[r] == -1) ::kill(children[r], SIGKILL);
      ADD_FAILURE() << "multi-process ranks did not finish within 120 s (killed)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::remove(id_file.c_str());
  for (int r = 0; r < world; ++r) EXPECT_EQ(status[r], 0) << "rank " << r << " (see its gtest output above)";
}

TEST(CommMultiProcessChild, Run) {
  const char* rank_env = std::getenv("WEAVE_MP_RANK");
  if (!rank_env) GTEST_SKIP() << "runs only as a child of CommMultiProcess.BootstrapFromAUniqueIdFileOneProcessPerGpu";
  const int rank = std::atoi(rank_env), world = std::atoi(std::getenv("WEAVE_MP_WORLD"));
  const ncclUniqueId id = unique_id_via_file(std::getenv("WEAVE_MP_ID_FILE"), rank, 60);
  auto comm = Communicator::create(id, rank, world, rank);
  ASSERT_EQ(comm->rank(), rank);
  ASSERT_EQ(comm->world_size(), world);
  EXPECT_EQ(comm->lsa_team_size(), world) << "one NVLink domain across processes";
  struct Case {
    CollectiveOp op;
    Transport t;
    Algorithm a;
  };
  for (const Case& cs : {Case{CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush},
                         Case{CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush},
                         Case{CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot},
                         Case{CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency},
                         Case{CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kOneShot},
                         Case{CollectiveOp::kReduceScatter, Transport::kNccl, Algorithm::kNcclDefault}}) {
    const CollectiveConfig cfg = collective_config(cs.op, cs.t, cs.a, DType::kF32, 100003);
    Collective op(*comm, cfg);
    const SelfTestReport rep = op.self_test();
    EXPECT_TRUE(rep.ok) << rep.detail;
    EXPECT_TRUE(op.self_test(cfg.max_count).ok);
  }
  // A rank-dependent configuration raises kMismatch on every rank, and the communicator survives.
  CollectiveConfig cfg;
  cfg.op = CollectiveOp::kAllReduce;
  cfg.transport = Transport::kLsa;
  cfg.max_count = rank == 0 ? 1000 : 2000;
  try {
    Collective op(*comm, cfg);
    ADD_FAILURE() << "mismatched max_count accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kMismatch) << e.what();
  }
  cfg.max_count = 1000;
  Collective ok(*comm, cfg);
  EXPECT_TRUE(ok.self_test().ok);
}
