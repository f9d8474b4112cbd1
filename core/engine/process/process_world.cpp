#include "engine/process/process_world.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>

#include "common/cpu_kernels.h"
#include "dist/world.h"
#include "dit/transformer.h"
#include "engine/engine.h"
#include "engine/model/compute_dtype.h"
#include "engine/process/world_settings.h"
#include "h3/error.h"

namespace h3 {
namespace engine_detail {

dist::DoorOptions door_options(const ModelInfo& model, const DoorSettings& s) {
  dist::DoorOptions d;
  d.address = dist::parse_address(s.rendezvous, "rendezvous");
  d.world_size = s.world_size;
  d.token = dist::read_token_file(s.token_file);
  d.settings = world_settings(model, s.world_size, s.device, s.compute_dtype, s.sp);
  d.world.timeout = s.timeout;
  d.world.backend = s.device == "cuda" ? dist::Backend::kNccl : dist::Backend::kGloo;
  d.world.cuda_device = s.cuda_device;
  return d;
}

ProcessWorld::ProcessWorld(const dist::DoorOptions& door, RankServer& server, JobChannel& channel)
    : door_(std::make_unique<dist::DoorServer>(door)), server_(server), channel_(channel) {}

void ProcessWorld::run() {
  // Gloo writes to the workers with writev, which raises SIGPIPE when a worker died mid-request,
  // and the host process (the element's application) would end by it. Blocked in this thread,
  // and so in the threads Gloo starts from it, the write fails with EPIPE instead and the request
  // fails naming the lost rank. (A signal blocked here leaves the host's own disposition alone.)
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  for (;;) {
    std::unique_ptr<dist::Group> g;
    std::exception_ptr err;
    try {
      g = door_->form();
    } catch (...) {
      err = std::current_exception();
    }
    if (g) {
      const RankServer::Ended how = server_.run(*g);
      g.reset();  // a broken group's ranks are gone: its close waits at most the timeout
      if (how == RankServer::Ended::kStopped) return;
    } else {
      server_.health().mark_broken(message_of(err));
      channel_.report_ready(err);  // to the opener, or to the request that asked for the formation
    }
    if (!channel_.slot().wait_for_rejoin()) return;
  }
}

void ProcessWorld::form_again(const ProgressFn& progress) {
  server_.health().clear_broken();
  channel_.rearm_ready_report();
  channel_.slot().request_rejoin();
  const std::exception_ptr err = channel_.pump(progress, nullptr, nullptr);
  if (err) {
    server_.health().mark_broken(message_of(err));
    std::rethrow_exception(err);
  }
  // The request goes to the world formed again only once its rank 0 waits for it: the order in
  // which a stale job once ran (the slot makes it harmless; this makes the order the same in
  // every run, so the process-world tests exercise it each time).
  channel_.slot().wait_until_taking();
}

}  // namespace engine_detail

void run_worker(const WorkerOptions& o) {
  using engine_detail::RankServer;
  if (o.device != "cpu" && o.device != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, "device = \"" + o.device + "\": must be cpu or cuda:K");
  }
  if (o.timeout.count() <= 0) throw Error(ErrorKind::kInvalidArgument, "timeout must be positive");
  const ModelInfo model = read_model(o.model_dir, o.ref2va);
  dit::check_layout(model.dit, o.world_size, o.sp);
  engine_detail::RankSetup setup;
  setup.device = o.device;
  setup.compute_dtype = engine_detail::resolve_compute_dtype(o.compute_dtype, o.device);
  if (o.device == "cpu") check_cpu_kernels();  // refuses a forced kernel this CPU cannot run
  setup.sp = o.sp;
  setup.thread_ranks = false;
  setup.cuda_index = o.cuda_device;
  setup.max_memory = o.max_memory;
  setup.cpu_threads = o.threads;
  setup.announce_threads = [rank = o.rank, asked = o.threads > 0](
                               int threads, const engine_detail::UsableCores& cores, int sharing) {
    std::fprintf(stderr, "h3 worker: rank %d: %s\n", rank,
                 engine_detail::describe_rank_threads(threads, cores, sharing, asked).c_str());
  };
  engine_detail::DoorSettings door;
  door.rendezvous = o.rendezvous;
  door.world_size = o.world_size;
  door.token_file = o.token_file;
  door.device = o.device;
  door.compute_dtype = setup.compute_dtype;
  door.sp = o.sp;
  door.timeout = o.timeout;
  door.cuda_device = o.cuda_device;
  const dist::DoorOptions door_opts = engine_detail::door_options(model, door);
  std::fprintf(stderr, "h3 worker: rank %d: waiting for rank 0 at %s\n", o.rank, o.rendezvous.c_str());
  dist::DoorClient client(door_opts, o.rank);
  engine_detail::JobChannel unused;  // a worker is never rank 0: it hands nothing to a caller
  RankServer server(model, setup, unused);
  const std::string me = "h3 worker: rank " + std::to_string(o.rank) + ": ";
  bool formed = false;  // this worker was part of a world at least once
  for (;;) {
    // Rank 0's store answered (the client waited at most the timeout for it); rank 0 opens its
    // door at open and, after a lost rank, at its next request, however long that takes: a
    // restarted worker waits for it as long as rank 0's store is there (and says so each minute).
    std::unique_ptr<dist::Group> g = client.join(std::chrono::milliseconds(0));
    if (!g && formed) return;  // rank 0 closed while this rank waited for its next world
    if (!g) {
      throw Error(ErrorKind::kDistributed,
                  "rank " + std::to_string(o.rank) + ": rank 0 at " + o.rendezvous +
                      " closed before this worker was part of a world" +
                      (client.rank0_served() ? std::string()
                                             : " (rank 0 never formed one: another rank did not arrive?)"));
    }
    formed = true;
    std::fprintf(stderr, "%sjoined a world of %d ranks at %s\n", me.c_str(), o.world_size,
                 o.rendezvous.c_str());
    std::exception_ptr own_load_error;
    const RankServer::Ended how = server.run(*g, &own_load_error);
    if (how == RankServer::Ended::kStopped) {
      client.leave();  // rank 0 need not wait for this rank at its door
      return;
    }
    if (own_load_error) std::rethrow_exception(own_load_error);
    std::fprintf(stderr, "%sthe world broke (%s); waiting for rank 0 to form it again\n", me.c_str(),
                 server.health().broken_reason().c_str());
    server.health().clear_broken();
  }
}

}  // namespace h3
