// The engine's dispatcher: rank threads, job dispatch to every rank, and the event pump that
// hands rank 0's reports and chunks to the caller. The rank worker's stages live in
// stage_conditioning.cpp, stage_denoise.cpp and stage_decode.cpp. Design and the agreement
// points: docs/engine.md.
#include "engine/engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/device.h"
#include "common/error.h"
#include "dist/agree.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/frames.h"
#include "engine/job.h"
#include "engine/mailbox.h"
#include "engine/stage.h"
#include "engine/stage_conditioning.h"
#include "engine/stage_decode.h"
#include "engine/stage_denoise.h"
#include "h3_config.h"
#include "text/unicode.h"
#include "vae/cpu_threads.h"

namespace h3 {
namespace {

using engine_detail::Clock;
using engine_detail::Event;
using engine_detail::Job;
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
  ModelInfo model;
  double load_s = 0;

  Mailbox mailbox;
  std::thread world;
  std::mutex call_mutex;  // one request at a time

  // Dispatch to the rank threads. Peers only learn *that* a job exists from here; what the job
  // is reaches them through rank 0's broadcast, as it would across processes.
  std::mutex jm;
  std::condition_variable jcv;
  uint64_t job_id = 0;
  bool stop = false;
  Job job;                        // rank 0 reads it
  CancelToken* cancel = nullptr;  // the caller's token (rank 0 polls it)
  at::Tensor decode_latents;      // kDecode: rank 0's input
  Clock::time_point job_start;

  std::atomic<bool> load_reported{false};
  std::mutex broken_m;
  std::string broken;  // set once the ranks' groups failed: the engine cannot serve any more

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

  void rank_main(dist::Group& g) {
    const bool root = g.rank() == 0;
    if (g.size() > 1) {
      // Ranks share this host's cores: each takes its share, or every rank's GEMMs would fan
      // out over every core and contend (OpenBLAS's pool is process-wide; see vae/cpu_threads.h).
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      vae::set_cpu_threads(std::max(1, cores / g.size()));
    }
    RankParts parts;
    const auto t0 = Clock::now();
    dist::LocalFailure f;
    try {
      load_parts(g, parts, t0);
    } catch (...) {
      f.capture();
    }
    try {
      dist::agree_or_throw(g, f);
    } catch (...) {
      if (root && !load_reported.exchange(true)) post_done(std::current_exception());
      return;
    }
    if (root) {
      load_s = seconds_since(t0);
      load_reported = true;
      post_done(nullptr);
    }
    serve(g, parts);
  }

  void load_parts(dist::Group& g, RankParts& parts, Clock::time_point t0) {
    const bool root = g.rank() == 0;
    const int64_t n = model.byte_encoder || model.prompt_encoder ? 3 : 2;
    if (root) post_progress(loading_progress(0, n, 0.0));
    // device=cuda: rank r runs on cuda:r (Engine::open checked that enough GPUs are visible).
    const c10::Device device = opts.device == "cuda"
                                   ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g.rank()))
                                   : c10::Device(c10::kCPU);
    dit::TransformerOptions to;
    to.device = device;
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

  void serve(dist::Group& g, RankParts& parts) {
    const bool root = g.rank() == 0;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(jm);
        jcv.wait(lk, [&] { return stop || job_id > seen; });
        if (stop) return;
        seen = job_id;
      }
      try {
        run_job(g, parts);
        if (root) post_done(nullptr);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        if (g.broken()) mark_broken(message_of(e));
        if (root) post_done(e);
      }
    }
  }

  // Every rank: rank 0's job, then its stages in order.
  void run_job(dist::Group& g, RankParts& parts) {
    const bool root = g.rank() == 0;
    const Job j = engine_detail::decode_job(g.broadcast_string(root ? engine_detail::encode(job) : "", 0));
    const ClipPlan& p = j.plan;
    const StageContext c{g, model, parts, mailbox, *cancel, p, job_start, opts};
    at::Tensor video, audio;
    if (j.kind == Job::Kind::kGenerate) {
      // Before any work, so that a model without audio_vae/ fails at once.
      if (j.request.audio) engine_detail::load_audio_decoder(c);
      const text::Conditioning cond = engine_detail::conditioning_stage(c, j.request);
      dit::Latents x = engine_detail::denoise_stage(c, j, cond);
      video = std::move(x.video);
      if (j.request.audio) audio = std::move(x.audio);
    } else {
      const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
      video = root ? decode_latents.to(at::kCPU, at::kFloat).contiguous()
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
    if (!why.empty()) {
      throw Error(ErrorKind::kDistributed, "the engine's ranks lost each other in an earlier request (" +
                                               why + "): close and reopen the engine");
    }
    {
      std::lock_guard<std::mutex> lk(jm);
      job = std::move(j);
      cancel = &c;
      decode_latents = latents;
      job_start = Clock::now();
      ++job_id;
    }
    jcv.notify_all();
    const std::exception_ptr err = pump(progress, &sink, extras);
    {
      std::lock_guard<std::mutex> lk(jm);
      cancel = nullptr;
      decode_latents = at::Tensor();
    }
    if (err) std::rethrow_exception(err);
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(jm);
      stop = true;
    }
    jcv.notify_all();
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
  if (opts.tp != 0 && opts.tp != opts.ranks) {
    throw Error(ErrorKind::kInvalidArgument,
                "tp = " + std::to_string(opts.tp) + " with " + std::to_string(opts.ranks) +
                    " ranks: every rank is a tensor-parallel rank of the DiT; give tp = 0 or tp = ranks");
  }
  if (opts.device != "cpu" && opts.device != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, "device = \"" + opts.device + "\": must be \"cpu\" or \"cuda\"");
  }
  if (opts.device == "cuda") require_cuda_devices(opts.ranks, "device");
  if (opts.timeout.count() <= 0) throw Error(ErrorKind::kInvalidArgument, "timeout must be positive");

  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->model = read_model(opts.model_dir);
  dit::check_tp(impl->model.dit, opts.ranks);

  Impl* self = impl.get();
  self->world = std::thread([self] {
    std::exception_ptr err;
    try {
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

ClipPlan Engine::plan(const GenerationRequest& req) const {
  ClipPlan p = make_plan(impl_->model, req);
  // Checked before the request is serialised for the ranks (as JSON, which needs valid UTF-8).
  text::check_utf8(req.prompt, "prompt");
  // Raised here too (not only on rank 0) so that a caller learns it before starting anything.
  engine_detail::check_conditioning(impl_->model, req);
  if (req.audio) require_audio_vae(impl_->model);
  return p;
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
  impl_->run(std::move(j), cancel, at::Tensor(), progress, sink, &extras);
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
double Engine::load_seconds() const {
  return impl_->load_s;
}

}  // namespace h3
