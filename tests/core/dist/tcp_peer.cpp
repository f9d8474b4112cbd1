// The other process of the TCP world tests (tcp_test.cpp): joins as rank
// `rank` and runs the same collectives as the test's rank 0.
//   dist_tcp_peer HOST PORT SIZE RANK MODE     MODE: collectives | fail | die | outlive
// die: one all_reduce, then this process kills itself (SIGKILL) while the others wait in their
// all_gather; outlive: one all_reduce, then an all_gather that must fail naming the rank that
// died (exit status 3 when it does).
// Exit status 0 when every check passed, 1 otherwise (the reason on stderr).
#include <ATen/ATen.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/world.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: dist_tcp_peer HOST PORT SIZE RANK collectives|fail|die|outlive\n");
    return 2;
  }
  const std::string host = argv[1], mode = argv[5];
  const int port = std::atoi(argv[2]), size = std::atoi(argv[3]), rank = std::atoi(argv[4]);
  try {
    h3::dist::WorldOptions opts;
    opts.timeout = std::chrono::seconds(30);
    auto g = h3::dist::join_tcp(host, port, size, rank, opts);
    if (mode == "fail") {
      // What a process does when its work fails: tell the peers, then leave.
      g->report_failure("peer process " + std::to_string(rank) + " could not load its shard");
      return 0;
    }
    at::Tensor t = at::full({1000}, static_cast<float>(rank + 1));
    g->all_reduce(t);
    const float want = size * (size + 1) / 2.0f;
    if (!at::equal(t, at::full({1000}, want))) throw std::runtime_error("all_reduce gave a wrong sum");
    if (mode == "die") {
      // A moment for the others to read all this rank sent, then gone without a word.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      raise(SIGKILL);
    }
    if (mode == "outlive") {
      try {
        g->all_gather(at::arange(rank * 5, at::kLong));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dist_tcp_peer rank %d: %s\n", rank, e.what());
        return std::string(e.what()).find("rank " + std::to_string(size - 1) + " is gone") !=
                       std::string::npos
                   ? 3
                   : 1;
      }
      std::fprintf(stderr, "dist_tcp_peer rank %d: the all_gather outlived the last rank\n", rank);
      return 1;
    }
    auto all = g->all_gather(at::arange(rank * 5, at::kLong));
    for (int r = 0; r < size; ++r) {
      if (!at::equal(all[r], at::arange(r * 5, at::kLong)))
        throw std::runtime_error("all_gather: wrong part");
    }
    if (g->broadcast_string("", 0) != "hello from rank 0")
      throw std::runtime_error("broadcast_string: wrong text");
    g->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_tcp_peer rank %d: %s\n", rank, e.what());
    return 1;
  }
}
