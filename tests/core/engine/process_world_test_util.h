// What the process-world tests share: `h3` children (a worker, `h3 generate`), a world's
// folder, token and address, and the frames two thread ranks give for the same request.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../free_port.h"
#include "engine_test_util.h"
#include "h3/error.h"

namespace h3::process_world_test {
namespace fs = std::filesystem;

// The collective timeout of a world that should serve: long enough that a loaded machine never
// reaches it (a lost peer is found at once, by its closed connection, not by this timeout).
constexpr auto kServingTimeout = std::chrono::seconds(60);
// The timeout of a world that never forms (a rank absent or refused): each such test waits for it.
constexpr auto kFormingFailsTimeout = std::chrono::seconds(4);

inline GenerationRequest small_request() {
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

inline std::string write_token(const fs::path& p, const std::string& token, mode_t mode = 0600) {
  std::ofstream(p) << token << "\n";
  chmod(p.c_str(), mode);
  return p.string();
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A child process of the `h3` binary; its stdout and stderr go to `log`.
struct Child {
  pid_t pid = -1;
  fs::path log;

  Child() = default;
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)), log(std::move(o.log)) {}
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      stop();
      pid = std::exchange(o.pid, -1);
      log = std::move(o.log);
    }
    return *this;
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

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
  void stop() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pid = -1;
  }
  ~Child() { stop(); }
};

inline bool exited_with(int status, int code) {
  return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == code;
}

// Waits until `file` contains `text` (at most `bound`): whether it did.
inline bool wait_for_text(const fs::path& file, const std::string& text, std::chrono::seconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(file);
    if (std::string(std::istreambuf_iterator<char>(in), {}).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A world's folder, token and address. `timeout`: rank 0's (its collectives and its formation);
// `worker_timeout`: the workers' (their collectives, and how long they wait for rank 0 to appear).
struct World {
  explicit World(std::chrono::seconds t = kServingTimeout, std::chrono::seconds w = kServingTimeout)
      : timeout(t), worker_timeout(w) {}
  std::chrono::seconds timeout, worker_timeout;
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
            std::to_string(worker_timeout.count())};
  }
  Child worker(const std::string& name, int rank = 1, const std::string& token_file = "",
               const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = worker_args(rank, 2, token_file);
    args.insert(args.end(), extra.begin(), extra.end());
    return Child::start(args, dir / (name + ".log"));
  }
  // A worker started and waiting for rank 0's door: what a failure test then opens rank 0 against
  // (so that a slow start of the worker is not mistaken for the failure the test waits for).
  Child waiting_worker(const std::string& name, int rank = 1, const std::string& token_file = "",
                       const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = worker_args(rank, 2, token_file);
    args.insert(args.end(), extra.begin(), extra.end());
    Child c = Child::start(args, dir / (name + ".log"));
    EXPECT_TRUE(wait_for_text(dir / (name + ".log"), "waiting for rank 0", std::chrono::seconds(120)))
        << read_file(dir / (name + ".log"));
    return c;
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

inline at::Tensor generate_frames(Engine& e, const ProgressFn& progress = {}) {
  test::CollectSink sink;
  StreamControl cancel;
  e.generate(small_request(), sink, progress, cancel);
  return sink.all();
}

// The frames of two thread ranks for small_request(): a process world's ranks give the same bits
// at any intra-op thread count (and take, like the thread ranks, half of this host's cores each).
inline at::Tensor thread_rank_frames() {
  static const at::Tensor frames = [] {
    auto e = test::open_tiny(2);
    return generate_frames(*e);
  }();
  return frames;
}

}  // namespace h3::process_world_test
