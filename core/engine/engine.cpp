// The engine's dispatcher: rank threads, job dispatch to every rank, and the event pump that
// hands rank 0's reports and chunks to the caller. The rank worker's stages live in
// stage_conditioning.cpp, stage_denoise.cpp and stage_decode.cpp. Design and the agreement
// points: docs/engine.md.
#include "engine/engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/device.h"
#include "common/error.h"
#include "dist/agree.h"
#include "dist/door.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/frames.h"
#include "engine/compute_dtype.h"
#include "engine/job.h"
#include "engine/job_slot.h"
#include "engine/mailbox.h"
#include "engine/memory_guard.h"
#include "engine/stage.h"
#include "engine/stage_conditioning.h"
#include "engine/stage_decode.h"
#include "engine/stage_denoise.h"
#include "engine/world_settings.h"
#include "h3_config.h"
#include "text/unicode.h"
#include "vae/cpu_threads.h"

namespace h3 {
namespace {

using engine_detail::Clock;
using engine_detail::DispatchedJob;
using engine_detail::Event;
using engine_detail::Job;
using engine_detail::JobSlot;
using engine_detail::Mailbox;
using engine_detail::RankParts;
using engine_detail::seconds_since;
using engine_detail::StageContext;

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// How a rank of a process world meets its peers at rank 0's door (docs/distributed.md): rank 0
// and every worker build theirs from the same settings, which the door compares at admission.
dist::DoorOptions door_options(const ModelInfo& model, const std::string& rendezvous, int world_size,
                               const std::string& token_file, const std::string& device,
                               const std::string& compute_dtype, std::chrono::milliseconds timeout,
                               int cuda_device) {
  dist::DoorOptions d;
  d.address = dist::parse_address(rendezvous, "rendezvous");
  d.world_size = world_size;
  d.token = dist::read_token_file(token_file);
  d.settings = engine_detail::world_settings(model, world_size, device, compute_dtype);
  d.world.timeout = timeout;
  d.world.backend = device == "cuda" ? dist::Backend::kNccl : dist::Backend::kGloo;
  d.world.cuda_device = cuda_device;
  return d;
}

Progress loading_progress(int64_t part, int64_t parts, double elapsed_s) {
  Progress p{Phase::kLoading};
  p.step = part;
  p.total_steps = parts;
  p.elapsed_s = elapsed_s;
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Engine::Impl {
  EngineOptions opts;
  std::string compute_dtype;  // opts.compute_dtype resolved for opts.device: "fp32" or "bf16"
  ModelInfo model;
  double load_s = 0;

  Mailbox mailbox;
  std::thread world;
  std::mutex call_mutex;  // one request at a time

  // The caller's job (with its token) for rank 0's thread, and close / form-again for the world
  // thread. Peers learn what the job is through rank 0's broadcast, as they would across processes.
  JobSlot slot;

  // A process world (docs/distributed.md): rank 0's door, through which the workers join; null
  // for thread ranks.
  std::unique_ptr<dist::DoorServer> door;
  bool thread_ranks = true;  // the ranks share this process's cores
  int cuda_index = -1;       // device=cuda: this rank's GPU; -1: cuda:<rank> (thread ranks)
  CancelToken no_cancel;     // ranks other than 0: their caller never cancels

  // A process world's rank keeps what it loaded when its world breaks and forms again: its
  // rank and the world's size stay, so its shards still fit, and reloading costs minutes on
  // every rank for the release. Thread ranks end with their world and never reuse parts.
  // Loaded once its DiT is there: a failed load clears it.
  RankParts kept;

  std::atomic<bool> load_reported{false};
  // Rank 0 of a process world: the last job failed because a rank was lost before the job
  // reached every rank (a worker that died while the world was idle), so none of it ran.
  std::atomic<bool> lost_before_delivery{false};
  std::mutex broken_m;
  std::string broken;  // set once the ranks' groups failed: the engine cannot serve any more

  // This process's ranks as the memory guard counts them.
  MemoryShape memory_shape() const {
    MemoryShape s;
    s.ranks_here = door ? 1 : opts.ranks;
    s.tp = door ? opts.world_size : opts.ranks;
    s.activation_bytes = compute_dtype == "bf16" ? 2 : 4;
    return s;
  }

  void post_progress(const Progress& p) {
    Event e{Event::Kind::kProgress};
    e.progress = p;
    mailbox.post(std::move(e));
  }
  void post_done(std::exception_ptr err) {
    Event e{Event::Kind::kDone};
    e.error = std::move(err);
    mailbox.post(std::move(e));
  }
  void mark_broken(const std::string& why) {
    std::lock_guard<std::mutex> lk(broken_m);
    if (broken.empty()) broken = why;
  }
  std::string broken_reason() {
    std::lock_guard<std::mutex> lk(broken_m);
    return broken;
  }

  // Caller side: runs handlers until the outcome arrives; returns it.
  std::exception_ptr pump(const ProgressFn& progress, ChunkSink* sink, const GenerateExtras* extras) {
    for (;;) {
      Event e = mailbox.take();
      switch (e.kind) {
        case Event::Kind::kProgress:
          // A progress callback is an observer: what it throws does not stop the request.
          if (progress) {
            try {
              progress(e.progress);
            } catch (...) {
            }
          }
          if (e.awaits_answer) mailbox.answer(nullptr);
          break;
        case Event::Kind::kChunk: {
          std::exception_ptr err;
          try {
            if (!sink) throw Error(ErrorKind::kInternal, "a chunk arrived with no sink");
            sink->on_chunk(e.chunk);
          } catch (...) {
            err = std::current_exception();
          }
          e.chunk = Chunk{};  // the sink may keep the tensors; the engine drops its references
          mailbox.answer(err);
          break;
        }
        case Event::Kind::kLatents: {
          std::exception_ptr err;
          try {
            if (extras && extras->on_latents) extras->on_latents(e.video, e.audio);
          } catch (...) {
            err = std::current_exception();
          }
          mailbox.answer(err);
          break;
        }
        case Event::Kind::kDone: return e.error;
      }
    }
  }

  // ---- rank side ----

  // How a rank's time in one group ended.
  enum class Ended { kStopped, kBroken, kLoadFailed };

  Ended rank_main(dist::Group& g, std::exception_ptr* load_error = nullptr) {
    const bool root = g.rank() == 0;
    if (g.size() > 1 && thread_ranks) {
      // Ranks share this host's cores: each takes its share, or every rank's GEMMs would fan
      // out over every core and contend (OpenBLAS's pool is process-wide; see vae/cpu_threads.h).
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      vae::set_cpu_threads(std::max(1, cores / g.size()));
    }
    RankParts local;
    RankParts& parts = thread_ranks ? local : kept;
    const auto t0 = Clock::now();
    dist::LocalFailure f;
    try {
      if (!thread_ranks && kept.dit) {
        // A survivor of the last world: its parts run on the new group. A restarted rank loads.
        parts.dit->use_group(&g);
        if (parts.prompt) parts.prompt->use_group(&g);
      } else {
        load_parts(g, parts, t0);
      }
    } catch (...) {
      f.capture();
      if (!thread_ranks) {  // half-loaded parts are not kept
        kept = RankParts{};
      }
    }
    try {
      dist::agree_or_throw(g, f);
    } catch (...) {
      // Before the caller hears of it: a process world's next request forms the world again.
      if (!thread_ranks)
        mark_broken("a rank failed to load its shards: " + message_of(std::current_exception()));
      if (root && !load_reported.exchange(true)) post_done(std::current_exception());
      if (load_error && f) *load_error = f.exception;
      return Ended::kLoadFailed;
    }
    if (root) {
      load_s = seconds_since(t0);
      load_reported = true;
      slot.open_for_jobs();  // before the caller hears that the world is ready
      post_done(nullptr);
    }
    const bool stopped = serve(g, parts);
    if (root) {
      // A job offered after the last one was taken, which this world will never run: its
      // caller gets the group's failure (and a process world forms again for it).
      if (slot.close_for_jobs()) {
        lost_before_delivery = !thread_ranks;
        post_done(std::make_exception_ptr(
            Error(ErrorKind::kDistributed,
                  "the ranks lost each other before the request reached them (" + broken_reason() + ")")));
      }
    }
    return stopped ? Ended::kStopped : Ended::kBroken;
  }

  void load_parts(dist::Group& g, RankParts& parts, Clock::time_point t0) {
    const bool root = g.rank() == 0;
    const int64_t n = model.byte_encoder || model.prompt_encoder ? 3 : 2;
    if (root) post_progress(loading_progress(0, n, 0.0));
    // device=cuda: rank r runs on cuda:r (Engine::open checked that enough GPUs are visible).
    const c10::Device device =
        opts.device == "cuda"
            ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_index >= 0 ? cuda_index : g.rank()))
            : c10::Device(c10::kCPU);
    const at::ScalarType dtype = engine_detail::compute_scalar_type(compute_dtype);
    if (root && dtype == at::kBFloat16 && !device.is_cuda()) engine_detail::note_emulated_bf16();
    dit::TransformerOptions to;
    to.device = device;
    to.dtype = dtype;
    parts.dit.emplace(dit::Transformer::load(model.transformer_dir, &g, to));
    if (root) post_progress(loading_progress(1, n, seconds_since(t0)));
    parts.vae.emplace(vae::VideoDecoder::load(model.vae_dir).to(device));
    if (root) post_progress(loading_progress(2, n, seconds_since(t0)));
    if (root && model.byte_encoder) {
      parts.bytes.emplace(text::ByteEncoder::load(model.text_encoder_dir));
      if (parts.bytes->text_dim() != model.dit.text_dim) {
        throw Error(ErrorKind::kMismatch, model.text_encoder_dir + ": the byte encoder makes " +
                                              std::to_string(parts.bytes->text_dim()) +
                                              "-wide rows but the transformer takes text_dim " +
                                              std::to_string(model.dit.text_dim));
      }
      post_progress(loading_progress(3, n, seconds_since(t0)));
    }
    if (model.prompt_encoder) {
      text::EncoderOptions eo;
      eo.device = device;
      eo.dtype = dtype;
      parts.prompt.emplace(text::PromptEncoder::load(model.dir, 0, &g, eo));
      if (parts.prompt->encoder().width() != model.dit.text_dim) {
        throw Error(ErrorKind::kMismatch, model.text_encoder_dir + ": the text encoder makes " +
                                              std::to_string(parts.prompt->encoder().width()) +
                                              "-wide rows but the transformer takes text_dim " +
                                              std::to_string(model.dit.text_dim));
      }
      if (root) post_progress(loading_progress(3, n, seconds_since(t0)));
    }
  }

  // Serves rank 0's jobs until rank 0 says stop (true) or the group broke (false). Every
  // rank learns what comes next from rank 0's broadcast, threads and processes alike; while
  // rank 0 waits for its caller's next request, the peers wait for it without the collective
  // timeout, as long as rank 0 shows that it is alive (Group::run_on_owner).
  bool serve(dist::Group& g, RankParts& parts) {
    const bool root = g.rank() == 0;
    for (;;) {
      // Rank 0: the job a caller waits for, taken out of the slot with its token; it lives
      // exactly as long as this iteration.
      std::optional<DispatchedJob> dispatched;
      bool delivered = false;  // every rank has the job: what fails from here on is the request's
      try {
        std::string wire;
        g.run_on_owner(
            0,
            [&] {
              if (!root) return;
              dispatched = slot.take();
              Job next;
              next.kind = Job::Kind::kStop;
              if (dispatched) next = dispatched->job;
              wire = engine_detail::encode(next);
            },
            "waiting for rank 0's next request");
        const Job j = engine_detail::decode_job(g.broadcast_string(wire, 0));
        delivered = true;
        if (j.kind == Job::Kind::kStop) return true;
        run_job(g, parts, j, dispatched ? &*dispatched : nullptr);
        if (root) post_done(nullptr);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        // The ranks lost each other: this group cannot serve any more. Marked before the
        // caller hears of the failure, so that its next request sees it.
        if (g.broken()) mark_broken(message_of(e));
        if (root && dispatched) {
          if (!delivered && g.broken() && !thread_ranks) lost_before_delivery = true;
          post_done(e);
        }
        if (g.broken()) return false;
      }
    }
  }

  // Every rank: rank 0's job, then its stages in order. `mine`: on rank 0, what its caller
  // handed over with the job (token, latents, start); null on the other ranks.
  void run_job(dist::Group& g, RankParts& parts, const Job& j, const DispatchedJob* mine) {
    const bool root = g.rank() == 0;
    if (root && (!mine || !mine->cancel)) {
      throw Error(ErrorKind::kInternal, "rank 0 was given a job without its caller's cancel token");
    }
    const ClipPlan& p = j.plan;
    const CancelToken& token = mine ? *mine->cancel : no_cancel;
    const Clock::time_point start = mine ? mine->start : Clock::now();
    const at::Tensor latents = mine ? mine->decode_latents : at::Tensor();
    const StageContext c{g, model, parts, mailbox, token, p, start};
    at::Tensor video, audio;
    if (j.kind == Job::Kind::kGenerate) {
      // Before any work, so that a model without audio_vae/ fails at once.
      if (j.request.audio) engine_detail::load_audio_decoder(c);
      const text::Conditioning cond = engine_detail::conditioning_stage(c, j.request, j.free_text_encoder);
      dit::Latents x = engine_detail::denoise_stage(c, j, cond);
      video = std::move(x.video);
      if (j.request.audio) audio = std::move(x.audio);
    } else {
      const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
      video = root ? latents.to(at::kCPU, at::kFloat).contiguous()
                   : at::empty({1, model.vae.latent_channels, p.latent_frames, h, w}, at::kFloat);
      g.broadcast(video, 0);
    }
    engine_detail::decode_stage(c, video, audio);
    if (root) {
      const int64_t steps = j.kind == Job::Kind::kGenerate ? p.evaluations : 0;
      c.post_progress(Phase::kDone, steps, steps, p.total_chunks, p.num_frames);
    }
  }

  // Starts a job on every rank and pumps its events on the calling thread.
  void run(Job j, CancelToken& c, const at::Tensor& latents, const ProgressFn& progress, ChunkSink& sink,
           const GenerateExtras* extras) {
    std::lock_guard<std::mutex> serial(call_mutex);
    const std::string why = broken_reason();
    if (!why.empty() && !door) {
      throw Error(ErrorKind::kDistributed, "the engine's ranks lost each other in an earlier request (" +
                                               why + "): close and reopen the engine");
    }
    if (!why.empty()) form_again(progress);
    std::exception_ptr err = dispatch(j, c, latents, progress, sink, extras);
    // A worker that died while the world idled is found out by the job's own broadcast, before
    // any of the request ran: form the world again (a restarted worker joins) and send the
    // request once more instead of failing it.
    if (err && door && lost_before_delivery.exchange(false)) {
      form_again(progress);
      err = dispatch(j, c, latents, progress, sink, extras);
    }
    if (err) std::rethrow_exception(err);
  }

  // Hands the job to rank 0's thread and pumps its events; returns its outcome.
  std::exception_ptr dispatch(const Job& j, CancelToken& c, const at::Tensor& latents,
                              const ProgressFn& progress, ChunkSink& sink, const GenerateExtras* extras) {
    lost_before_delivery = false;
    if (!slot.offer(DispatchedJob{j, &c, latents, Clock::now()})) {
      // Rank 0 stopped serving since run() looked: its world broke while it idled.
      lost_before_delivery = !thread_ranks;
      const std::string why = broken_reason();
      return std::make_exception_ptr(
          Error(ErrorKind::kDistributed, "the ranks lost each other before the request reached them" +
                                             (why.empty() ? std::string() : " (" + why + ")")));
    }
    const std::exception_ptr err = pump(progress, &sink, extras);
    // Rank 0 answers only for a job it took, so nothing is left to take here; withdrawn all the
    // same, so that no job can outlive the call that dispatched it.
    slot.withdraw();
    return err;
  }

  // A process world whose ranks lost each other: rank 0 opens its door again, the workers
  // (restarted ones too) join, every rank loads its shards again, then the request runs.
  // Throws what the formation or the loading threw (the world stays broken: the next request
  // tries again).
  void form_again(const ProgressFn& progress) {
    {
      std::lock_guard<std::mutex> lk(broken_m);
      broken.clear();
    }
    load_reported = false;
    slot.request_rejoin();
    const std::exception_ptr err = pump(progress, nullptr, nullptr);
    if (err) {
      mark_broken(message_of(err));
      std::rethrow_exception(err);
    }
    // The request goes to the world formed again only once its rank 0 waits for it: the order in
    // which a stale job once ran (the slot makes it harmless; this makes the order the same in
    // every run, so the process-world tests exercise it each time).
    slot.wait_until_taking();
  }

  // Rank 0 of a process world: forms the world through the door, serves it, and forms it again
  // when a request finds it broken, until the engine closes.
  void process_world() {
    for (;;) {
      std::unique_ptr<dist::Group> g;
      std::exception_ptr err;
      try {
        g = door->form();
      } catch (...) {
        err = std::current_exception();
      }
      if (g) {
        const Ended how = rank_main(*g);
        g.reset();  // a broken group's ranks are gone: its close waits at most the timeout
        if (how == Ended::kStopped) return;
      } else {
        mark_broken(message_of(err));
        load_reported = true;
        post_done(err);  // to the opener, or to the request that asked for the formation
      }
      if (!slot.wait_for_rejoin()) return;
    }
  }

  void shutdown() {
    slot.close();
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
  if (opts.tp != 0 && opts.tp != world_size) {
    throw Error(ErrorKind::kInvalidArgument,
                "tp = " + std::to_string(opts.tp) + " with " + std::to_string(world_size) +
                    " ranks: every rank is a tensor-parallel rank of the DiT; give tp = 0 or tp = ranks");
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
  impl->compute_dtype = engine_detail::resolve_compute_dtype(opts.compute_dtype, opts.device);
  impl->model = read_model(opts.model_dir);
  dit::check_tp(impl->model.dit, world_size);
  if (processes) {
    impl->door = std::make_unique<dist::DoorServer>(door_options(impl->model, opts.rendezvous, world_size,
                                                                 opts.token_file, opts.device,
                                                                 impl->compute_dtype, opts.timeout, 0));
    impl->thread_ranks = false;
    impl->cuda_index = 0;
  }

  Impl* self = impl.get();
  self->world = std::thread([self] {
    std::exception_ptr err;
    try {
      if (self->door) {
        self->process_world();
        return;
      }
      dist::WorldOptions wo;
      wo.timeout = self->opts.timeout;
      // One GPU per rank talks NCCL (the DiT's tensor-parallel sums on the GPU; the CPU
      // tensors of the control collectives are staged through it).
      if (self->opts.device == "cuda" && self->opts.ranks > 1) wo.backend = dist::Backend::kNccl;
      const auto results = dist::run_threads(
          self->opts.ranks, [self](dist::Group& g) { self->rank_main(g); }, wo);
      for (const auto& r : results) {
        if (!r.ok && !err) err = r.exception;
      }
    } catch (...) {
      err = std::current_exception();
    }
    // Ranks that could not even start (e.g. the group did not form): the opener still waits.
    if (!self->load_reported.exchange(true)) {
      self->post_done(err ? err
                          : std::make_exception_ptr(
                                Error(ErrorKind::kInternal, "the rank threads ended before loading")));
    }
  });
  const std::exception_ptr err = self->pump(progress, nullptr, nullptr);
  if (err) {
    self->shutdown();
    std::rethrow_exception(err);
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

void run_worker(const WorkerOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, "device = \"" + o.device + "\": must be cpu or cuda:K");
  }
  if (o.timeout.count() <= 0) throw Error(ErrorKind::kInvalidArgument, "timeout must be positive");
  Engine::Impl impl;
  impl.opts.model_dir = o.model_dir;
  impl.opts.device = o.device;
  impl.opts.timeout = o.timeout;
  impl.compute_dtype = engine_detail::resolve_compute_dtype(o.compute_dtype, o.device);
  impl.thread_ranks = false;
  impl.cuda_index = o.cuda_device;
  impl.model = read_model(o.model_dir);
  dit::check_tp(impl.model.dit, o.world_size);
  dist::DoorClient client(door_options(impl.model, o.rendezvous, o.world_size, o.token_file, o.device,
                                       impl.compute_dtype, o.timeout, o.cuda_device),
                          o.rank);
  const std::string me = "h3 worker: rank " + std::to_string(o.rank) + ": ";
  for (;;) {
    // Rank 0's store answered (the client waited at most the timeout for it); rank 0 opens its
    // door at open and, after a lost rank, at its next request, however long that takes: a
    // restarted worker waits for it as long as rank 0's store is there.
    std::unique_ptr<dist::Group> g = client.join(std::chrono::milliseconds(0));
    if (!g) return;  // rank 0 closed while this rank waited
    std::fprintf(stderr, "%sjoined a world of %d ranks at %s\n", me.c_str(), o.world_size,
                 o.rendezvous.c_str());
    std::exception_ptr own_load_error;
    const Engine::Impl::Ended how = impl.rank_main(*g, &own_load_error);
    if (how == Engine::Impl::Ended::kStopped) return;
    if (own_load_error) std::rethrow_exception(own_load_error);
    std::fprintf(stderr, "%sthe world broke (%s); waiting for rank 0 to form it again\n", me.c_str(),
                 impl.broken_reason().c_str());
    {
      std::lock_guard<std::mutex> lk(impl.broken_m);
      impl.broken.clear();
    }
  }
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
                      CancelToken& cancel) {
  generate(req, sink, progress, cancel, GenerateExtras{});
}

void Engine::generate(const GenerationRequest& req, ChunkSink& sink, const ProgressFn& progress,
                      CancelToken& cancel, const GenerateExtras& extras) {
  Job j;
  j.kind = Job::Kind::kGenerate;
  j.request = req;
  j.plan = plan(req);
  j.want_latents = static_cast<bool>(extras.on_latents);
  j.free_text_encoder = impl_->opts.free_text_encoder;
  impl_->run(std::move(j), cancel, at::Tensor(), progress, sink, &extras);
}

void Engine::generate(const GenerationRequest& req, const ClipPlan& planned, ChunkSink& sink,
                      const ProgressFn& progress, CancelToken& cancel) {
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
  j.free_text_encoder = impl_->opts.free_text_encoder;
  impl_->run(std::move(j), cancel, at::Tensor(), progress, sink, nullptr);
}

void Engine::decode(const at::Tensor& video_latents, const ClipPlan& given, ChunkSink& sink,
                    const ProgressFn& progress, CancelToken& cancel) {
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
  impl_->run(std::move(j), cancel, video_latents, progress, sink, nullptr);
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
double Engine::load_seconds() const {
  return impl_->load_s;
}

}  // namespace h3
