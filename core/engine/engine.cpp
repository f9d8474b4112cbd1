// The engine's rank threads and the hand-over to the caller. Design and the agreement points:
// docs/engine.md.
#include "engine/engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/error.h"
#include "dist/agree.h"
#include "dist/group.h"
#include "dist/world.h"
#include "dit/frames.h"
#include "dit/sampler.h"
#include "dit/transformer.h"
#include "engine/mailbox.h"
#include "h3_config.h"
#include "text/byte_encoder.h"
#include "text/conditioning.h"
#include "text/prompt_encoder.h"
#include "text/unicode.h"
#include "vae/cpu_threads.h"
#include "vae/video_decoder.h"

namespace h3 {
namespace {

using engine_detail::Event;
using engine_detail::Mailbox;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

using dist::agree_or_throw;
using Failure = dist::LocalFailure;

// A request as it travels from rank 0 to every rank (broadcast_string).
struct Job {
  enum class Kind { kGenerate, kDecode } kind = Kind::kGenerate;
  GenerationRequest req;
  ClipPlan plan{};
  bool want_latents = false;
};

std::string encode(const Job& j) {
  const ClipPlan& p = j.plan;
  nlohmann::json o = {
      {"kind", j.kind == Job::Kind::kGenerate ? "generate" : "decode"},
      {"prompt", j.req.prompt},
      {"embeds_path", j.req.embeds_path},
      {"seed", j.req.seed},
      {"want_latents", j.want_latents},
      {"plan",
       {p.width, p.height, p.num_frames, p.canvas_width, p.canvas_height, p.latent_frames, p.total_chunks,
        p.steps, p.fps_n, p.fps_d, p.generated_frames, p.evaluations, p.audio_latents}},
  };
  return o.dump();
}

Job decode_job(const std::string& wire) {
  const auto o = nlohmann::json::parse(wire);
  Job j;
  j.kind = o.at("kind").get<std::string>() == "generate" ? Job::Kind::kGenerate : Job::Kind::kDecode;
  j.req.prompt = o.at("prompt").get<std::string>();
  j.req.embeds_path = o.at("embeds_path").get<std::string>();
  j.req.seed = o.at("seed").get<uint64_t>();
  j.want_latents = o.at("want_latents").get<bool>();
  const auto& a = o.at("plan");
  ClipPlan& p = j.plan;
  p.width = a[0];
  p.height = a[1];
  p.num_frames = a[2];
  p.canvas_width = a[3];
  p.canvas_height = a[4];
  p.latent_frames = a[5];
  p.total_chunks = a[6];
  p.steps = a[7];
  p.fps_n = a[8];
  p.fps_d = a[9];
  p.generated_frames = a[10];
  p.evaluations = a[11];
  p.audio_latents = a[12];
  j.req.width = p.width;
  j.req.height = p.height;
  j.req.num_frames = p.num_frames;
  j.req.steps = p.steps;
  return j;
}

// The conditioning a request asks for, on rank 0.
text::Conditioning condition(const ModelInfo& m, const text::ByteEncoder* bytes,
                             const GenerationRequest& req) {
  if (!req.embeds_path.empty()) {
    if (!req.prompt.empty()) {
      throw Error(ErrorKind::kInvalidArgument,
                  "both a prompt and an embeddings file were given: give one (the embeddings file is the "
                  "encoded prompt)");
    }
    return text::load_embeddings(req.embeds_path, m.dit.text_dim);
  }
  if (bytes) return bytes->encode(req.prompt);
  throw Error(ErrorKind::kInvalidArgument,
              m.dir +
                  " has no text encoder of its own (text_encoder/ with a Qwen3-VL config and tokenizer/): a "
                  "prompt string cannot condition it. Supply precomputed prompt embeddings instead: a "
                  "safetensors file with `embeds` [L, " +
                  std::to_string(m.dit.text_dim) +
                  "] (the text encoder's hidden_states[50], bf16 or fp32) and optionally `tags` [L] "
                  "(h3 encode-prompt --model DIR --prompt TEXT --out FILE writes one from a folder holding "
                  "text_encoder/ and tokenizer/; h3 generate --embeds FILE; GenerationRequest::embeds_path)");
}

// Rank 0's sink: trims the clip to the requested frame count, hands each chunk over to the
// calling thread and waits for it, and turns a requested cancel into a failure at the chunk
// boundary (the decoder agrees on it across ranks).
class HandOverSink : public ChunkSink {
 public:
  HandOverSink(Mailbox& mb, const ClipPlan& plan, const CancelToken& cancel, Clock::time_point start)
      : mb_(mb), plan_(plan), cancel_(cancel), start_(start) {}

  void on_chunk(const Chunk& c) override {
    if (frames_ >= plan_.num_frames) return;  // frames past the request: trimmed (all were delivered)
    if (cancel_.requested()) {
      throw Error(ErrorKind::kCancelled, "cancelled during decoding (after " + std::to_string(index_) +
                                             " of " + std::to_string(plan_.total_chunks) + " chunks)");
    }
    if (c.first_frame != frames_) {
      throw Error(ErrorKind::kInternal, "chunk " + std::to_string(c.index) + " starts at frame " +
                                            std::to_string(c.first_frame) + ", expected " +
                                            std::to_string(frames_));
    }
    const int64_t n = std::min<int64_t>(c.frames.size(0), plan_.num_frames - frames_);
    Event e{Event::Kind::kChunk};
    e.chunk.index = index_;
    e.chunk.first_frame = frames_;
    e.chunk.total_frames = plan_.num_frames;
    e.chunk.final = frames_ + n == plan_.num_frames;
    e.chunk.frames = n == c.frames.size(0) ? c.frames : c.frames.narrow(0, 0, n).contiguous();
    if (c.frames_f32.defined()) e.chunk.frames_f32 = c.frames_f32.narrow(0, 0, n).contiguous();
    if (std::exception_ptr err = mb_.call(std::move(e))) {
      sink_error_ = err;
      std::rethrow_exception(err);
    }
    ++index_;
    frames_ += n;
    Event p{Event::Kind::kProgress};
    p.progress = Progress{Phase::kDecoding};
    p.progress.chunk = index_;
    p.progress.total_chunks = plan_.total_chunks;
    p.progress.frames = frames_;
    p.progress.total_frames = plan_.num_frames;
    p.progress.elapsed_s = seconds_since(start_);
    mb_.post(std::move(p));
  }

  std::exception_ptr sink_error() const { return sink_error_; }
  int64_t frames() const { return frames_; }

 private:
  Mailbox& mb_;
  const ClipPlan& plan_;
  const CancelToken& cancel_;
  Clock::time_point start_;
  int64_t index_ = 0, frames_ = 0;
  std::exception_ptr sink_error_;
};

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

  struct RankState {
    std::optional<dit::Transformer> dit;
    std::optional<vae::VideoDecoder> vae;
    std::optional<text::ByteEncoder> bytes;
    std::optional<text::PromptEncoder> prompt;  // every rank holds its shard of the text encoder
  };

  void rank_main(dist::Group& g) {
    const bool root = g.rank() == 0;
    if (g.size() > 1) {
      // Ranks share this host's cores: each takes its share, or every rank's GEMMs would fan
      // out over every core and contend (OpenBLAS's pool is process-wide; see vae/cpu_threads.h).
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      vae::set_cpu_threads(std::max(1, cores / g.size()));
    }
    RankState st;
    const auto t0 = Clock::now();
    Failure f;
    try {
      const int64_t parts = model.byte_encoder || model.prompt_encoder ? 3 : 2;
      if (root) post_progress(Progress{Phase::kLoading, 0, parts, 0, 0, 0, 0, 0.0});
      dit::TransformerOptions to;
      to.device = c10::Device(opts.device == "cuda" ? c10::kCUDA : c10::kCPU);
      st.dit.emplace(dit::Transformer::load(model.transformer_dir, &g, to));
      if (root) post_progress(Progress{Phase::kLoading, 1, parts, 0, 0, 0, 0, seconds_since(t0)});
      st.vae.emplace(vae::VideoDecoder::load(model.vae_dir));
      if (root) post_progress(Progress{Phase::kLoading, 2, parts, 0, 0, 0, 0, seconds_since(t0)});
      if (root && model.byte_encoder) {
        st.bytes.emplace(text::ByteEncoder::load(model.text_encoder_dir));
        if (st.bytes->text_dim() != model.dit.text_dim) {
          throw Error(ErrorKind::kMismatch, model.text_encoder_dir + ": the byte encoder makes " +
                                                std::to_string(st.bytes->text_dim()) +
                                                "-wide rows but the transformer takes text_dim " +
                                                std::to_string(model.dit.text_dim));
        }
        post_progress(Progress{Phase::kLoading, 3, parts, 0, 0, 0, 0, seconds_since(t0)});
      }
      if (model.prompt_encoder) {
        text::EncoderOptions eo;
        eo.device = to.device;
        st.prompt.emplace(text::PromptEncoder::load(model.dir, 0, &g, eo));
        if (st.prompt->encoder().width() != model.dit.text_dim) {
          throw Error(ErrorKind::kMismatch, model.text_encoder_dir + ": the text encoder makes " +
                                                std::to_string(st.prompt->encoder().width()) +
                                                "-wide rows but the transformer takes text_dim " +
                                                std::to_string(model.dit.text_dim));
        }
        if (root) post_progress(Progress{Phase::kLoading, 3, parts, 0, 0, 0, 0, seconds_since(t0)});
      }
    } catch (...) {
      f.capture();
    }
    try {
      agree_or_throw(g, f);
    } catch (...) {
      if (root && !load_reported.exchange(true)) post_done(std::current_exception());
      return;
    }
    if (root) {
      load_s = seconds_since(t0);
      load_reported = true;
      post_done(nullptr);
    }
    serve(g, st);
  }

  void serve(dist::Group& g, RankState& st) {
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
        run_job(g, st);
        if (root) post_done(nullptr);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        if (g.broken()) mark_broken(message_of(e));
        if (root) post_done(e);
      }
    }
  }

  void run_job(dist::Group& g, RankState& st) {
    const bool root = g.rank() == 0;
    const Job j = decode_job(g.broadcast_string(root ? encode(job) : std::string(), 0));
    const ClipPlan& p = j.plan;
    const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
    at::Tensor video;
    if (j.kind == Job::Kind::kGenerate) {
      video = denoise(g, st, j);
    } else {
      video = root ? decode_latents.to(at::kCPU, at::kFloat).contiguous()
                   : at::empty({1, model.vae.latent_channels, p.latent_frames, h, w}, at::kFloat);
      g.broadcast(video, 0);
    }
    decode(g, st, p, video);
    if (root) {
      Progress done{Phase::kDone};
      done.step = done.total_steps = j.kind == Job::Kind::kGenerate ? p.evaluations : 0;
      done.chunk = done.total_chunks = p.total_chunks;
      done.frames = done.total_frames = p.num_frames;
      done.elapsed_s = seconds_since(job_start);
      post_progress(done);
    }
  }

  bool agreed_cancel(dist::Group& g) { return dist::agree_cancel(g, g.rank() == 0 && cancel->requested()); }

  at::Tensor denoise(dist::Group& g, RankState& st, const Job& j) {
    const bool root = g.rank() == 0;
    const ClipPlan& p = j.plan;
    // Conditioning on rank 0, agreed, then broadcast.
    Failure f;
    text::Conditioning cond;
    if (root) {
      post_progress(Progress{Phase::kConditioning, 0, p.evaluations, 0, p.total_chunks, 0, p.num_frames,
                             seconds_since(job_start)});
    }
    if (st.prompt && j.req.embeds_path.empty()) {
      // The model's own text encoder: rank 0 tokenizes, every rank runs its shard.
      cond = st.prompt->encode_on_ranks(g, root ? j.req.prompt : std::string());
    } else {
      if (root) {
        try {
          cond = condition(model, st.bytes ? &*st.bytes : nullptr, j.req);
        } catch (...) {
          f.capture();
        }
      }
      agree_or_throw(g, f);
    }
    if (agreed_cancel(g)) throw Error(ErrorKind::kCancelled, "cancelled before denoising");
    const int64_t rows = g.broadcast_int(root ? cond.embeds.size(0) : 0, 0);
    const bool tags = g.broadcast_int(root && cond.tags.defined() ? 1 : 0, 0) != 0;
    if (!root) {
      cond.embeds = at::empty({rows, model.dit.text_dim}, at::kFloat);
      if (tags) cond.tags = at::empty({rows}, at::kLong);
    }
    g.broadcast(cond.embeds, 0);
    if (tags) g.broadcast(cond.tags, 0);

    // Noise: one CPU generator seeded with the request's seed, video then audio, drawn on
    // rank 0 and broadcast so that every rank starts from the very same numbers.
    const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
    const std::vector<int64_t> vshape{1, model.dit.in_channels, p.latent_frames, h, w};
    const std::vector<int64_t> ashape{2 * p.audio_latents, model.dit.audio_in_channels};
    dit::Latents noise;
    if (root) {
      noise = dit::draw_noise(j.req.seed, vshape, ashape);
    } else {
      noise.video = at::empty(vshape, at::kFloat);
      noise.audio = at::empty(ashape, at::kFloat);
    }
    g.broadcast(noise.video, 0);
    g.broadcast(noise.audio, 0);

    dit::DenoiseRequest dr;
    dr.text = cond.embeds;
    dr.text_tags = cond.tags;
    dr.noise = noise;
    dr.video = dit::make_schedule(p.steps, model.video_shift);
    dr.audio = dit::make_schedule(p.steps, model.audio_shift);
    auto on_step = [&](int64_t i, int64_t n, const dit::Latents&) {
      if (root) {
        post_progress(Progress{Phase::kDenoising, i + 1, n, 0, p.total_chunks, 0, p.num_frames,
                               seconds_since(job_start)});
      }
      if (agreed_cancel(g)) {
        throw Error(ErrorKind::kCancelled, "cancelled during denoising (after step " + std::to_string(i + 1) +
                                               " of " + std::to_string(n) + ")");
      }
    };
    dit::Latents x;
    try {
      x = dit::denoise(*st.dit, dr, on_step);
    } catch (const Error& e) {
      // A cancel is agreed (every rank throws it at the same step); anything else happened on
      // this rank alone, between collectives: tell the peers now instead of at their timeout.
      if (e.kind() != ErrorKind::kCancelled) g.report_failure(e.what());
      throw;
    } catch (const std::exception& e) {
      g.report_failure(e.what());
      throw;
    }

    if (j.want_latents) {
      Failure lf;
      // The observer is the caller's code and may take any time: the peers
      // wait for rank 0 without the collective timeout while it runs.
      g.run_on_owner(
          0,
          [&] {
            if (!root) return;
            Event e{Event::Kind::kLatents};
            e.video = x.video.to(at::kCPU).contiguous();
            e.audio = x.audio.to(at::kCPU).contiguous();
            lf.set(mailbox.call(std::move(e)));
          },
          "waiting for rank 0 to hand the latents to the observer");
      agree_or_throw(g, lf);
    }
    return x.video.to(at::kCPU, at::kFloat).contiguous();
  }

  void decode(dist::Group& g, RankState& st, const ClipPlan& p, const at::Tensor& video) {
    const bool root = g.rank() == 0;
    vae::DecodeOptions o;
    o.height = p.height;
    o.width = p.width;
    if (root) {
      post_progress(Progress{Phase::kDecoding, p.evaluations, p.evaluations, 0, p.total_chunks, 0,
                             p.num_frames, seconds_since(job_start)});
      HandOverSink sink(mailbox, p, *cancel, job_start);
      try {
        st.vae->decode_chunks(video, &sink, g, o);
      } catch (...) {
        // The caller's own exception, not the decoder's wrapping of it.
        if (sink.sink_error()) std::rethrow_exception(sink.sink_error());
        throw;
      }
      if (sink.frames() != p.num_frames) {
        throw Error(ErrorKind::kInternal, "the decode delivered " + std::to_string(sink.frames()) +
                                              " frames of " + std::to_string(p.num_frames));
      }
    } else {
      st.vae->decode_chunks(video, nullptr, g, o);
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
  if (opts.ranks < 1 || opts.ranks > 64) {
    throw Error(ErrorKind::kInvalidArgument,
                "ranks = " + std::to_string(opts.ranks) + ": must be within 1..64");
  }
  if (opts.tp != 0 && opts.tp != opts.ranks) {
    throw Error(ErrorKind::kInvalidArgument,
                "tp = " + std::to_string(opts.tp) + " with " + std::to_string(opts.ranks) +
                    " ranks: every rank is a tensor-parallel rank of the DiT; give tp = 0 or tp = ranks");
  }
  if (opts.device != "cpu" && opts.device != "cuda") {
    throw Error(ErrorKind::kInvalidArgument, "device = \"" + opts.device + "\": must be \"cpu\" or \"cuda\"");
  }
  if (opts.device == "cuda") {
#if !H3_TORCH_HAS_CUDA
    throw Error(
        ErrorKind::kInvalidArgument,
        "device = \"cuda\": this build's LibTorch has no CUDA (configure with -Dtorch_root=<CUDA LibTorch>)");
#endif
    if (opts.ranks > 1) {
      throw Error(
          ErrorKind::kInvalidArgument,
          "device = \"cuda\" with " + std::to_string(opts.ranks) +
              " ranks: the engine runs CUDA on one rank only (the decode's collectives are CPU/Gloo)");
    }
  }
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
  if (req.embeds_path.empty() && !impl_->model.byte_encoder && !impl_->model.prompt_encoder) {
    // Raised here too (not only on rank 0) so that a caller learns it before starting anything.
    condition(impl_->model, nullptr, req);
  }
  if (!req.embeds_path.empty() && !req.prompt.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "both a prompt and an embeddings file were given: give one (the embeddings file is the encoded "
        "prompt)");
  }
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
  j.req = req;
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
