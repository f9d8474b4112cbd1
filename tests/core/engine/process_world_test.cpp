// Ranks in other processes (docs/distributed.md): `h3 worker`s joined through rank 0's door.
// Every test starts its workers as child processes of the `h3` binary and asserts each
// process's exit status. Rank 0 is this test process (the Engine API) or `h3 generate`.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <thread>

#include "../../free_port.h"
#include "common/error.h"
#include "dist/door.h"
#include "engine_test_util.h"

namespace h3 {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The collective timeout of a world that should serve: long enough that a loaded machine never
// reaches it (a lost peer is found at once, by its closed connection, not by this timeout).
constexpr auto kServingTimeout = std::chrono::seconds(60);
// The timeout of a world that never forms (a rank absent or refused): each such test waits for it.
constexpr auto kFormingFailsTimeout = std::chrono::seconds(4);

GenerationRequest small_request() {
  GenerationRequest r;
  r.prompt = "two processes, one clip";
  r.width = 80;
  r.height = 48;
  r.num_frames = 30;  // two latent chunks: a decode that a kill can interrupt
  r.steps = 4;
  r.seed = 5;
  return r;
}

using h3test_net::free_port;

std::string write_token(const fs::path& p, const std::string& token, mode_t mode = 0600) {
  std::ofstream(p) << token << "\n";
  chmod(p.c_str(), mode);
  return p.string();
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A child process of the `h3` binary; its stdout and stderr go to `log`.
struct Child {
  pid_t pid = -1;
  fs::path log;

  static Child start(const std::vector<std::string>& args, const fs::path& log,
                     const std::string& wrap = "") {
    Child c;
    c.log = log;
    std::vector<std::string> argv;
    if (!wrap.empty()) {  // e.g. "ip netns exec NS"
      std::istringstream ss(wrap);
      for (std::string w; ss >> w;) argv.push_back(w);
    }
    argv.push_back(H3_BIN);
    argv.insert(argv.end(), args.begin(), args.end());
    c.pid = fork();
    if (c.pid == 0) {
      FILE* f = std::fopen(log.c_str(), "w");
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
      std::vector<char*> raw;
      for (auto& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      execvp(raw[0], raw.data());
      _exit(127);
    }
    return c;
  }
  // The exit status as waitpid reports it, waiting at most `bound` (then SIGKILL: -1).
  int wait(std::chrono::seconds bound = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + bound;
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    pid = -1;
    return -1;
  }
  std::string output() const { return read_file(log); }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

bool exited_with(int status, int code) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

struct World {
  explicit World(std::chrono::seconds t = kServingTimeout) : timeout(t) {}
  std::chrono::seconds timeout;
  test::TempDir dir{"procworld"};
  int port = free_port();
  std::string token = write_token(dir / "token", "a shared secret of this test world");

  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  std::vector<std::string> worker_args(int rank = 1, int world = 2,
                                       const std::string& token_file = "") const {
    return {"worker",
            "--rendezvous",
            address(),
            "--world-size",
            std::to_string(world),
            "--rank",
            std::to_string(rank),
            "--token-file",
            token_file.empty() ? token : token_file,
            "--timeout",
            std::to_string(timeout.count())};
  }
  Child worker(const std::string& name, int rank = 1, const std::string& token_file = "") {
    return Child::start(worker_args(rank, 2, token_file), dir / (name + ".log"));
  }
  EngineOptions rank0(int world = 2) const {
    EngineOptions o;
    o.model_dir = default_model_dir();
    o.rendezvous = address();
    o.world_size = world;
    o.token_file = token;
    o.timeout = timeout;
    return o;
  }
};

at::Tensor generate_frames(Engine& e, const ProgressFn& progress = {}) {
  test::CollectSink sink;
  CancelToken cancel;
  e.generate(small_request(), sink, progress, cancel);
  return sink.all();
}

at::Tensor thread_rank_frames() {
  static const at::Tensor frames = [] {
    auto e = test::open_tiny(2);
    return generate_frames(*e);
  }();
  return frames;
}

TEST(ProcessWorld, AWorkerProcessGivesTheFramesOfTwoThreadRanksAndExitsZeroAtStop) {
  World w;
  Child worker = w.worker("w1");
  at::Tensor frames;
  {
    auto e = Engine::open(w.rank0());
    frames = generate_frames(*e);
    // A second request on the same world.
    EXPECT_TRUE(at::equal(generate_frames(*e), frames));
  }  // rank 0 closes: it tells the worker to stop
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("rank 0 said stop"));
  EXPECT_TRUE(at::equal(frames, thread_rank_frames())) << "process ranks and thread ranks disagree";
}

TEST(ProcessWorld, H3GenerateAsRankZeroWritesTheSameClipAsThreadRanks) {
  World w;
  const std::vector<std::string> common{"--prompt", "a clip",   "--width", "80",      "--height",
                                        "48",       "--frames", "30",      "--steps", "3",
                                        "--seed",   "9",        "--quiet"};
  auto args = [&](std::vector<std::string> extra, const fs::path& out) {
    std::vector<std::string> a{"generate", "--out", out.string()};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Child threads = Child::start(args({"--ranks", "2"}, w.dir / "threads.y4m"), w.dir / "threads.log");
  ASSERT_TRUE(exited_with(threads.wait(), 0)) << threads.output();
  Child worker = Child::start(w.worker_args(), w.dir / "worker.log");  // before rank 0: it waits
  Child rank0 = Child::start(
      args({"--rendezvous", w.address(), "--world-size", "2", "--token-file", w.token, "--timeout", "20"},
           w.dir / "procs.y4m"),
      w.dir / "rank0.log");
  EXPECT_TRUE(exited_with(rank0.wait(), 0)) << rank0.output();
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  const std::string a = read_file(w.dir / "threads.y4m"), b = read_file(w.dir / "procs.y4m");
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "the clips differ (" << a.size() << " and " << b.size() << " bytes)";
}

// A worker SIGKILLed in `phase`: the request fails with a clear error naming the lost peer
// (no hang), and after the worker is restarted the next request on the same engine works.
void kill_worker_during(Phase phase) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  bool killed = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    generate_frames(*e, [&](const Progress& p) {
      if (!killed && p.phase == phase && (phase != Phase::kDenoising || p.step >= 1)) {
        kill(worker.pid, SIGKILL);
        killed = true;
      }
    });
    ADD_FAILURE() << "the request survived its worker's death";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kDistributed) << err.what();
    EXPECT_THAT(err.what(), HasSubstr("rank")) << err.what();
    std::printf("rank 0's error: %s\n", err.what());
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("request failed %.2f s after it started (timeout %lld s)\n", waited,
              static_cast<long long>(w.timeout.count()));
  ASSERT_TRUE(killed);
  const int st = worker.wait();
  EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  Child again = w.worker("again");
  EXPECT_TRUE(at::equal(generate_frames(*e), thread_rank_frames()));
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

// After a lost worker, only the restarted one loads: rank 0 keeps its shards (the same rank of a
// world of the same size), so the next request reports no loading and gives the same frames.
TEST(ProcessWorld, RankZeroKeepsItsShardsWhenTheWorldFormsAgain) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  const at::Tensor frames = generate_frames(*e);
  bool killed = false;
  EXPECT_THROW(generate_frames(*e,
                               [&](const Progress& p) {
                                 if (!killed && p.phase == Phase::kDenoising && p.step >= 1) {
                                   kill(worker.pid, SIGKILL);
                                   killed = true;
                                 }
                               }),
               Error);
  ASSERT_TRUE(killed);
  worker.wait();

  Child again = w.worker("again");
  int loading_reports = 0;
  const at::Tensor next = generate_frames(*e, [&](const Progress& p) {
    if (p.phase == Phase::kLoading) ++loading_reports;
  });
  EXPECT_EQ(loading_reports, 0) << "rank 0 loaded its parts again";
  EXPECT_TRUE(at::equal(next, frames));
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

TEST(ProcessWorld, AWorkerKilledMidDenoiseFailsTheRequestAndARestartedOneServesTheNext) {
  kill_worker_during(Phase::kDenoising);
}

TEST(ProcessWorld, AWorkerKilledMidDecodeFailsTheRequestAndARestartedOneServesTheNext) {
  kill_worker_during(Phase::kDecoding);
}

// A worker that dies while the world is idle: the next request's own broadcast finds it out
// before any of the request ran, so rank 0 forms the world again with the restarted worker and
// serves the request instead of failing it.
TEST(ProcessWorld, AWorkerKilledWhileIdleIsReplacedWithoutFailingTheNextRequest) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  const at::Tensor frames = generate_frames(*e);
  kill(worker.pid, SIGKILL);
  const int st = worker.wait();
  EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  Child again = w.worker("again");
  at::Tensor next;
  try {
    next = generate_frames(*e);
  } catch (const Error& err) {
    FAIL() << "the request after an idle worker's death failed: " << err.what();
  }
  EXPECT_TRUE(at::equal(next, frames));
  EXPECT_TRUE(at::equal(generate_frames(*e), frames));  // and the world serves on
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

TEST(ProcessWorld, RankZeroNamesTheRankThatNeverArrived) {
  World w{kFormingFailsTimeout};
  try {
    Engine::open(w.rank0());
    FAIL() << "opened without its worker";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
    EXPECT_THAT(e.what(), HasSubstr("rank 1 never arrived at the rendezvous " + w.address()));
  }
}

TEST(ProcessWorld, AWorkerWhoseRankZeroNeverAppearsExitsOneNamingTheAddress) {
  World w{kFormingFailsTimeout};
  Child worker = w.worker("alone");
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("rank 0 never appeared at " + w.address()));
}

TEST(ProcessWorld, AWrongTokenIsRefusedOnBothSides) {
  World w{kFormingFailsTimeout};
  const std::string wrong = write_token(w.dir / "wrong", "not the secret of this world");
  Child worker = w.worker("wrong", 1, wrong);
  try {
    Engine::open(w.rank0());
    FAIL() << "opened with a worker that has the wrong token";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 never arrived"));
    EXPECT_THAT(e.what(), HasSubstr("refused rank 1: wrong token"));
  }
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("refused this worker: wrong token"));
}

TEST(ProcessWorld, ATokenFileOthersCanReadIsRefused) {
  World w{kFormingFailsTimeout};
  const std::string open_file = write_token(w.dir / "readable", "a shared secret of this test world", 0640);
  Child worker = w.worker("readable", 1, open_file);
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("chmod 600 " + open_file));
  EngineOptions o = w.rank0();
  o.token_file = open_file;
  try {
    Engine::open(o);
    FAIL() << "rank 0 took a token file others can read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("chmod 600"));
  }
}

TEST(ProcessWorld, AWorkerWithDifferentSettingsIsRefusedWithWhatDiffers) {
  World w{kFormingFailsTimeout};
  // The same model, with a transformer config that differs by one byte (still valid JSON).
  const fs::path other = w.dir / "other-model";
  fs::copy(default_model_dir(), other, fs::copy_options::recursive);
  std::ofstream(other / "transformer" / "config.json", std::ios::app) << "\n";
  std::vector<std::string> args = w.worker_args();
  args.push_back("--model");
  args.push_back(other.string());
  Child worker = Child::start(args, w.dir / "other.log");
  try {
    Engine::open(w.rank0());
    FAIL() << "opened with a worker of another model";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("differ from rank 0's: transformer/config.json"));
  }
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("transformer/config.json (rank 0: "));
}

// A worker must compute in rank 0's compute dtype: one left at its device's default (fp32) is
// refused naming compute-dtype, one given --compute-dtype bf16 joins and the world's clip is
// that of two bf16 thread ranks.
TEST(ProcessWorld, AWorkerComputesInRankZerosComputeDtypeOrIsRefusedNamingIt) {
  World refused{kFormingFailsTimeout};
  EngineOptions bf16_rank0 = refused.rank0();
  bf16_rank0.compute_dtype = "bf16";
  Child fp32 = refused.worker("fp32");
  try {
    Engine::open(bf16_rank0);
    FAIL() << "opened with a worker computing in fp32 under a bf16 rank 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("compute-dtype (rank 0: bf16, rank 1: fp32)"));
  }
  EXPECT_TRUE(exited_with(fp32.wait(), 1)) << fp32.output();
  EXPECT_THAT(fp32.output(), HasSubstr("compute-dtype (rank 0: bf16, rank 1: fp32)"));

  World w;  // a world that serves: the long timeout
  EngineOptions o = w.rank0();
  o.compute_dtype = "bf16";
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--compute-dtype", "bf16"});
  Child bf16 = Child::start(args, w.dir / "bf16.log");
  at::Tensor frames;
  {
    auto e = Engine::open(o);
    frames = generate_frames(*e);
  }
  EXPECT_TRUE(exited_with(bf16.wait(), 0)) << bf16.output();
  EXPECT_FALSE(at::equal(frames, thread_rank_frames())) << "the bf16 world gave the fp32 clip";
  EngineOptions threads;
  threads.model_dir = default_model_dir();
  threads.ranks = 2;
  threads.compute_dtype = "bf16";
  EXPECT_TRUE(at::equal(frames, generate_frames(*Engine::open(threads))))
      << "bf16 process ranks and bf16 thread ranks disagree";
}

TEST(ProcessWorld, AWorkerWithAnUnknownComputeDtypeExitsOneNamingTheFlag) {
  World w{kFormingFailsTimeout};
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--compute-dtype", "fp16"});
  Child worker = Child::start(args, w.dir / "fp16.log");
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("compute-dtype = \"fp16\": must be \"fp32\" or \"bf16\""));
}

// Two hosts: rank 0 and the worker each in a network namespace of their own, joined by a veth
// pair that the test makes (needs root and `ip`; skipped with the reason otherwise).
TEST(ProcessWorld, TwoHostsInNetworkNamespaces) {
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string a = "h3a" + tag, b = "h3b" + tag;
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  if (sh("command -v ip") != 0) GTEST_SKIP() << "no `ip` command (iproute2) on this machine";
  if (sh("ip netns add " + a) != 0) {
    GTEST_SKIP() << "cannot create network namespaces here (needs root and CAP_SYS_ADMIN)";
  }
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
  }};
  const bool made =
      sh("ip netns add " + b) == 0 &&
      sh("ip link add va" + tag + " netns " + a + " type veth peer name vb" + tag + " netns " + b) == 0 &&
      sh("ip -n " + a + " addr add 10.231.7.1/24 dev va" + tag) == 0 &&
      sh("ip -n " + b + " addr add 10.231.7.2/24 dev vb" + tag) == 0 &&
      sh("ip -n " + a + " link set va" + tag + " up") == 0 &&
      sh("ip -n " + b + " link set vb" + tag + " up") == 0 && sh("ip -n " + a + " link set lo up") == 0 &&
      sh("ip -n " + b + " link set lo up") == 0;
  if (!made) GTEST_SKIP() << "could not make the veth pair between two namespaces";
  World w;
  const std::string addr = "10.231.7.1:" + std::to_string(w.port);
  Child worker = Child::start({"worker", "--rendezvous", addr, "--world-size", "2", "--rank", "1",
                               "--token-file", w.token, "--timeout", "20"},
                              w.dir / "hostb.log", "ip netns exec " + b);
  Child rank0 = Child::start({"generate",
                              "--prompt",
                              "two hosts",
                              "--width",
                              "80",
                              "--height",
                              "48",
                              "--frames",
                              "30",
                              "--steps",
                              "3",
                              "--seed",
                              "9",
                              "--quiet",
                              "--out",
                              w.dir / "hosts.y4m",
                              "--rendezvous",
                              addr,
                              "--world-size",
                              "2",
                              "--token-file",
                              w.token,
                              "--timeout",
                              "20"},
                             w.dir / "hosta.log", "ip netns exec " + a);
  EXPECT_TRUE(exited_with(rank0.wait(), 0)) << rank0.output();
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  EXPECT_GT(fs::file_size(w.dir / "hosts.y4m"), 1000u);
}

}  // namespace
}  // namespace h3
