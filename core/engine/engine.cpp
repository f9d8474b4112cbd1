// The engine's front: Engine::open checks the options and starts the ranks (threads here, or
// rank 0 of a process world), and each request is planned, checked against memory and handed
// to rank 0 through the job channel. The parts: job_channel.h (caller <-> rank 0),
// rank_server.h (what every rank runs), process_world.h (the door and forming again), the
// stages stage_*.cpp. Design and the agreement points: docs/engine.md.
#include "engine/engine.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "common/cpu_kernels.h"
#include "common/device.h"
#include "dist/world.h"
#include "dit/frames.h"
#include "engine/model/compute_dtype.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "engine/process/job.h"
#include "engine/process/job_channel.h"
#include "engine/process/process_world.h"
#include "engine/process/rank_server.h"
#include "engine/scheduler/stream_budget.h"
#include "engine/stages/stage_conditioning.h"
#include "h3/error.h"
#include "h3_config.h"
#include "text/unicode.h"

namespace h3 {

using engine_detail::Clock;
using engine_detail::DispatchedJob;
using engine_detail::Job;
using engine_detail::JobChannel;
using engine_detail::ProcessWorld;
using engine_detail::RankServer;

struct Engine::Impl {
  EngineOptions opts;
  std::string compute_dtype;  // opts.compute_dtype resolved for opts.device: "fp32" or "bf16"
  ModelInfo model;

  JobChannel channel;
  // This process's ranks: rank 0 of a process world, or every thread rank (each run() keeps
  // its rank's parts on its own stack, so the threads share the server safely).
  std::optional<RankServer> ranks;
  std::unique_ptr<ProcessWorld> processes;  // a process world's rank 0 side; null for thread ranks
  std::thread world;                        // the ranks' threads, or the process world's loop
  std::mutex form_mutex;                    // one caller forms a broken process world again
  // The requests in flight hold their memory estimates here (the weights are not in it).
  std::unique_ptr<StreamBudget> budget;
  std::atomic<int> requests{0};  // run() calls in flight

  // This process's ranks as the memory guard counts them.
  MemoryShape memory_shape() const {
    if (processes) {
      // Rank 0's rank thread runs the threads it chose when its world formed.
      const int chosen = ranks->cpu_threads();
      return memory_shape_of(1, opts.world_size, opts.sp, compute_dtype, opts.device,
                             chosen > 0 ? chosen : at::get_num_threads());
    }
    const int threads =
        opts.ranks == 1 ? at::get_num_threads() : engine_detail::cpu_threads_per_thread_rank(opts.ranks);
    return memory_shape_of(opts.ranks, opts.ranks, opts.sp, compute_dtype, opts.device, threads);
  }

  // The request's share of the memory beside the requests in flight, or kOutOfMemory with the numbers.
  StreamBudget::Reservation admit(const ClipPlan& p) {
    return budget->admit(estimate_request_memory(model, p, memory_shape()).peak(), request_text(p));
  }

  // Starts a job on every rank and pumps its events on the calling thread. Many callers may be
  // here at once: each job is a session of the ranks (engine/scheduler/session.h).
  void run(const Job& j, StreamControl& c, const at::Tensor& latents, const ProgressFn& progress,
           ChunkSink& sink, const GenerateExtras* extras) {
    struct InFlight {
      std::atomic<int>& n;
      explicit InFlight(std::atomic<int>& count) : n(count) { ++n; }
      ~InFlight() { --n; }
    } in_flight(requests);
    ensure_world(progress);
    JobChannel::Outcome o = dispatch(j, c, latents, progress, sink, extras);
    // A worker that died while the world idled is found out by the job's own admission, before
    // any of the request ran: form the world again (a restarted worker joins) and send the
    // request once more instead of failing it.
    if (o.error && processes && o.undelivered) {
      ensure_world(progress);
      o = dispatch(j, c, latents, progress, sink, extras);
    }
    if (o.error) std::rethrow_exception(o.error);
  }

  // A thread world whose ranks lost each other refuses; a process world forms again, once for
  // all the callers that find it broken.
  void ensure_world(const ProgressFn& progress) {
    std::lock_guard<std::mutex> forming(form_mutex);
    const std::string why = ranks->health().broken_reason();
    if (why.empty()) return;
    if (!processes) {
      throw Error(ErrorKind::kDistributed, "the engine's ranks lost each other in an earlier request (" +
                                               why + "): close and reopen the engine");
    }
    processes->form_again(progress);
  }

  JobChannel::Outcome dispatch(const Job& j, StreamControl& c, const at::Tensor& latents,
                               const ProgressFn& progress, ChunkSink& sink, const GenerateExtras* extras) {
    DispatchedJob d;
    d.job = j;
    d.cancel = &c;
    d.decode_latents = latents;
    d.start = Clock::now();
    JobChannel::Outcome o = channel.dispatch(std::move(d), progress, sink, extras);
    if (o.offered) return o;
    // Rank 0 stopped serving since run() looked: its world broke while it idled.
    o.undelivered = static_cast<bool>(processes);
    const std::string why = ranks->health().broken_reason();
    o.error = std::make_exception_ptr(
        Error(ErrorKind::kDistributed, "the ranks lost each other before the request reached them" +
                                           (why.empty() ? std::string() : " (" + why + ")")));
    return o;
  }

  void shutdown() {
    channel.slot().close();
    if (world.joinable()) world.join();
  }
};

// ---------------------------------------------------------------------------------------------

std::string default_model_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("H3_MODEL_DIR"); env && *env) return env;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(H3_DEFAULT_MODEL_DIR) / "model_index.json", ec))
    return H3_DEFAULT_MODEL_DIR;
#ifdef H3_BUILD_MODEL_DIR
  if (fs::is_regular_file(fs::path(H3_BUILD_MODEL_DIR) / "model_index.json", ec)) return H3_BUILD_MODEL_DIR;
#endif
  return H3_DEFAULT_MODEL_DIR;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  if (impl_) impl_->shutdown();
}

std::unique_ptr<Engine> Engine::open(const EngineOptions& opts, const ProgressFn& progress) {
  if (opts.ranks < kMinRanks || opts.ranks > kMaxRanks) {
    throw Error(ErrorKind::kInvalidArgument, "ranks = " + std::to_string(opts.ranks) + ": must be within " +
                                                 std::to_string(kMinRanks) + ".." +
                                                 std::to_string(kMaxRanks));
  }
  const bool processes = !opts.rendezvous.empty();
  if (processes && opts.ranks != 1) {
    throw Error(ErrorKind::kInvalidArgument,
                "ranks = " + std::to_string(opts.ranks) +
                    " with rendezvous: ranks counts threads of this process; a process world has world-size "
                    "ranks, rank 0 here and the others `h3 worker` processes; leave ranks at 1");
  }
  if (processes && (opts.world_size < 2 || opts.world_size > kMaxRanks)) {
    throw Error(ErrorKind::kInvalidArgument, "world-size = " + std::to_string(opts.world_size) +
                                                 " with rendezvous: must be within 2.." +
                                                 std::to_string(kMaxRanks));
  }
  const int world_size = processes ? opts.world_size : opts.ranks;
  if (opts.sp < 1 || opts.sp > world_size || world_size % opts.sp != 0) {
    throw Error(ErrorKind::kInvalidArgument, "sp-size = " + std::to_string(opts.sp) + " with " +
                                                 std::to_string(world_size) +
                                                 " ranks: the sequence-parallel size must divide the ranks");
  }
  if (opts.tp != 0 && opts.tp * opts.sp != world_size) {
    throw Error(ErrorKind::kInvalidArgument,
                "tp-size = " + std::to_string(opts.tp) + " x sp-size = " + std::to_string(opts.sp) +
                    " with " + std::to_string(world_size) +
                    " ranks: tp x sp must be the ranks; give tp-size = 0 (ranks / sp) or " +
                    std::to_string(world_size / opts.sp));
  }
  if (opts.device != "cpu" && opts.device != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, "device = \"" + opts.device + "\": must be \"cpu\" or \"cuda\"");
  }
  if (opts.device == "cuda") require_cuda_devices(processes ? 1 : opts.ranks, "device");
  if (opts.timeout.count() <= 0) throw Error(ErrorKind::kInvalidArgument, "timeout must be positive");
  if (opts.max_memory < 0)
    throw Error(ErrorKind::kInvalidArgument, "max-memory must be 0 (automatic) or a byte count");

  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->budget = std::make_unique<StreamBudget>(opts.max_memory, available_memory_bytes);
  impl->compute_dtype = engine_detail::resolve_compute_dtype(opts.compute_dtype, opts.device);
  // A kernel path forced by the environment that this CPU cannot run is refused here, before any
  // weight loads (common/cpu_kernels.h); the choice is logged at INFO level.
  if (opts.device == "cpu") check_cpu_kernels();
  impl->model = read_model(opts.model_dir, opts.ref2va);
  dit::check_layout(impl->model.dit, world_size, opts.sp);
  engine_detail::RankSetup setup;
  setup.device = opts.device;
  setup.compute_dtype = impl->compute_dtype;
  setup.sp = opts.sp;
  setup.thread_ranks = !processes;
  setup.cuda_index = processes ? 0 : -1;
  if (processes) {
    setup.announce_threads = [](int threads, const engine_detail::UsableCores& cores, int sharing) {
      std::fprintf(stderr, "h3: rank 0: %s\n",
                   engine_detail::describe_rank_threads(threads, cores, sharing, false).c_str());
    };
  }
  impl->ranks.emplace(impl->model, setup, impl->channel);
  if (processes) {
    engine_detail::DoorSettings door;
    door.rendezvous = opts.rendezvous;
    door.world_size = world_size;
    door.token_file = opts.token_file;
    door.device = opts.device;
    door.compute_dtype = impl->compute_dtype;
    door.sp = opts.sp;
    door.timeout = opts.timeout;
    impl->processes = std::make_unique<ProcessWorld>(engine_detail::door_options(impl->model, door),
                                                     *impl->ranks, impl->channel);
  }

  Impl* self = impl.get();
  self->world = std::thread([self] {
    std::exception_ptr err;
    try {
      if (self->processes) {
        self->processes->run();
        return;
      }
      dist::WorldOptions wo;
      wo.timeout = self->opts.timeout;
      // One GPU per rank talks NCCL (the DiT's tensor-parallel sums on the GPU; the CPU
      // tensors of the control collectives are staged through it).
      if (self->opts.device == "cuda" && self->opts.ranks > 1) wo.backend = dist::Backend::kNccl;
      const auto results = dist::run_threads(
          self->opts.ranks, [self](dist::Group& g) { self->ranks->run(g); }, wo);
      for (const auto& r : results) {
        if (!r.ok && !err) err = r.exception;
      }
    } catch (...) {
      err = std::current_exception();
    }
    // Ranks that could not even start (e.g. the group did not form): the opener still waits.
    self->channel.report_ready(
        err ? err
            : std::make_exception_ptr(Error(ErrorKind::kInternal, "the rank threads ended before loading")));
  });
  const std::exception_ptr err = self->channel.pump(progress, nullptr, nullptr);
  if (err) {
    self->shutdown();
    std::rethrow_exception(err);
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

ClipPlan Engine::plan(const GenerationRequest& req) const {
  ClipPlan p = make_plan(impl_->model, req);
  // Checked before the request is serialised for the ranks (as JSON, which needs valid UTF-8).
  text::check_utf8(req.prompt, "prompt");
  // Raised here too (not only on rank 0) so that a caller learns it before starting anything.
  engine_detail::check_conditioning(impl_->model, req);
  if (req.audio) require_audio_vae(impl_->model);
  // Before anything of the request is allocated, on any rank.
  check_request_memory(impl_->model, req, p, impl_->memory_shape(), impl_->opts.max_memory);
  return p;
}

MemoryEstimate Engine::memory_estimate(const ClipPlan& plan) const {
  return estimate_request_memory(impl_->model, plan, impl_->memory_shape());
}

void Engine::generate(const GenerationRequest& req, ChunkSink& sink, const ProgressFn& progress,
                      StreamControl& cancel) {
  generate(req, sink, progress, cancel, GenerateExtras{});
}

void Engine::generate(const GenerationRequest& req, ChunkSink& sink, const ProgressFn& progress,
                      StreamControl& cancel, const GenerateExtras& extras) {
  generate(req, plan(req), sink, progress, cancel, extras);
}

void Engine::generate(const GenerationRequest& req, const ClipPlan& planned, ChunkSink& sink,
                      const ProgressFn& progress, StreamControl& cancel, const GenerateExtras& extras) {
  const auto contradicts = [](int64_t asked, int64_t planned_value) {
    return asked != 0 && asked != planned_value;
  };
  if (contradicts(req.width, planned.width) || contradicts(req.height, planned.height) ||
      contradicts(req.num_frames, planned.num_frames) || contradicts(req.steps, planned.steps) ||
      (req.audio && planned.audio_rate <= 0)) {
    throw Error(ErrorKind::kInternal, "generate: the plan given is not plan()'s for this request");
  }
  Job j;
  j.kind = Job::Kind::kGenerate;
  j.request = req;
  j.plan = planned;
  j.want_latents = static_cast<bool>(extras.on_latents);
  j.free_text_encoder = impl_->opts.free_text_encoder;
  j.adaln_tables = impl_->opts.adaln_tables;
  const StreamBudget::Reservation share = impl_->admit(j.plan);
  impl_->run(j, cancel, at::Tensor(), progress, sink, &extras);
}

void Engine::decode(const at::Tensor& video_latents, const ClipPlan& given, ChunkSink& sink,
                    const ProgressFn& progress, StreamControl& cancel) {
  const ModelInfo& m = impl_->model;
  // Re-derived from the size and frames, so that a plan edited by hand cannot disagree with itself.
  GenerationRequest r;
  r.width = given.width;
  r.height = given.height;
  r.num_frames = given.num_frames;
  r.steps = given.steps != 0 ? given.steps : kMinSteps;
  const ClipPlan plan = make_plan(m, r);
  const std::vector<int64_t> want{1, m.vae.latent_channels, plan.latent_frames,
                                  plan.canvas_height / dit::kVaeSpatialRatio,
                                  plan.canvas_width / dit::kVaeSpatialRatio};
  if (!video_latents.defined() || video_latents.sizes().vec() != want) {
    throw Error(ErrorKind::kInvalidArgument,
                "decode: the latents must be [1, " + std::to_string(want[1]) + ", " +
                    std::to_string(want[2]) + ", " + std::to_string(want[3]) + ", " +
                    std::to_string(want[4]) + "] for a " + std::to_string(plan.width) + "x" +
                    std::to_string(plan.height) + ", " + std::to_string(plan.num_frames) + "-frame plan");
  }
  Job j;
  j.kind = Job::Kind::kDecode;
  j.plan = plan;
  impl_->run(j, cancel, video_latents, progress, sink, nullptr);
}

const ModelInfo& Engine::model() const {
  return impl_->model;
}
const EngineOptions& Engine::options() const {
  return impl_->opts;
}
const std::string& Engine::compute_dtype() const {
  return impl_->compute_dtype;
}
int Engine::requests_in_flight() const {
  return impl_->requests.load();
}
double Engine::load_seconds() const {
  return impl_->ranks->load_seconds();
}
const ResidentWeights& Engine::resident_weights() const {
  return impl_->ranks->resident_weights();
}

}  // namespace h3
