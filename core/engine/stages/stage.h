// What the rank worker's stages (conditioning, denoise, decode) share: the rank's group and
// loaded parts, what the requests in flight on the rank share, the model, rank 0's hand-over to
// the calling thread and the caller's cancel token. The rank server (rank_server.cpp) builds one per job and
// runs the stages in order on every rank; every decision they take is agreed across ranks (docs/engine.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "audio/audio_decoder.h"
#include "audio/audio_encoder.h"
#include "dist/agree.h"
#include "dist/group.h"
#include "dit/transformer.h"
#include "engine/model/model.h"
#include "engine/process/mailbox.h"
#include "h3/progress.h"
#include "h3/request.h"
#include "text/prompt_encoder.h"
#include "text/vision_tower.h"
#include "vae/encoder.h"
#include "vae/video_decoder.h"

namespace h3::engine_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What one rank loaded in Engine::open.
struct RankParts {
  std::optional<dit::Transformer> dit;
  std::optional<vae::VideoDecoder> vae;
  std::optional<text::PromptEncoder> prompt;  // every rank holds its shard of the text encoder
  // Rank 0 only, loaded by the first request that asks for audio (a video-only user never pays
  // for it); kept for the engine's lifetime.
  std::optional<audio::AudioDecoder> audio;
  // Every rank, read by the first request with keyframes (FL2VA) and kept: the video VAE's
  // encoder (on the decoder's device) and the text encoder's vision tower (this rank's shards).
  std::optional<vae::VideoEncoder> vae_encoder;
  std::optional<text::VisionTower> vision;
  // Rank 0 only, read by the first request whose references carry sound (Ref2VA) and kept: the
  // audio VAE's encoder (on the decoder's device).
  std::optional<audio::AudioEncoder> audio_encoder;
  // The LoRA attached to `dit` (its path as the request gave it); empty: none.
  std::string lora;
};

// What the requests in flight on one rank share besides its parts (engine/scheduler/session.h): read and
// written only by the session holding the rank, in the same turns on every rank, so the same on
// every rank at each point of a request.
struct RankSessions {
  int running = 0;  // sessions in flight on this rank, the one reading it included
  // The AdaLN tables' timestep sets each session in flight reads, by session: the DiT's tables
  // hold their union (adaln_stage).
  std::map<uint64_t, std::vector<dit::TimestepSet>> adaln_sets;
};

struct StageContext {
  dist::Group& group;
  const ModelInfo& model;
  RankParts& parts;
  RankSessions& sessions;
  uint64_t session;             // this request's session (engine/scheduler/session.h)
  Mailbox& mailbox;             // rank 0's hand-over to the calling thread
  const StreamControl& cancel;  // the caller's token; rank 0 polls it
  const ClipPlan& plan;
  Clock::time_point start;  // when the caller started the job

  bool root() const { return group.rank() == 0; }
  // Rank 0 only: a progress report of `phase` with the plan's totals and the time so far.
  void post_progress(Phase phase, int64_t step, int64_t total_steps, int64_t chunk = 0,
                     int64_t frames = 0) const {
    mailbox.post(progress_event(phase, step, total_steps, chunk, frames));
  }
  // Every rank: a denoising step's report, handed over by rank 0 and waited for, so that a
  // cancel the caller raises from it is seen at this very step's agreement. The callback is
  // the caller's code and may take any time: the peers wait for rank 0 without the collective
  // timeout while it runs.
  void report_step(int64_t step, int64_t total_steps) const {
    group.run_on_owner(
        0,
        [&] {
          if (root()) mailbox.call(progress_event(Phase::kDenoising, step, total_steps));
        },
        "waiting for rank 0 to hand a step's progress to the caller");
  }
  Event progress_event(Phase phase, int64_t step, int64_t total_steps, int64_t chunk = 0,
                       int64_t frames = 0) const {
    Event e{Event::Kind::kProgress};
    e.progress.phase = phase;
    e.progress.step = step;
    e.progress.total_steps = total_steps;
    e.progress.chunk = chunk;
    e.progress.total_chunks = plan.total_chunks;
    e.progress.frames = frames;
    e.progress.total_frames = plan.num_frames;
    e.progress.elapsed_s = seconds_since(start);
    return e;
  }
  // Whether rank 0's caller asked to cancel, agreed by every rank.
  bool agreed_cancel() const { return dist::agree_cancel(group, root() && cancel.requested()); }
};

}  // namespace h3::engine_detail
