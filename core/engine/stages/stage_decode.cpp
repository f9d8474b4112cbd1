#include "engine/stages/stage_decode.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>
#include <string>

#include "common/op_profile.h"
#include "dit/frames.h"
#include "h3/error.h"

namespace h3::engine_detail {
namespace {

// Rank 0's sink: trims the clip to the requested frame count, hands each chunk's frames over to
// the calling thread and waits for it, then (with audio) decodes the chunk's stretch of the
// soundtrack and hands that over as a chunk of the same index without frames — the frames never
// wait for the audio decode — and turns a requested cancel into a failure at the chunk boundary
// (the decoder agrees on it across ranks). Each chunk carries its decode time.
class HandOverSink : public ChunkSink {
 public:
  // `audio` null: video only.
  HandOverSink(const StageContext& c, AudioLatents* audio) : c_(c), audio_(audio), since_(Clock::now()) {}

  void on_chunk(const Chunk& c) override {
    const ClipPlan& plan = c_.plan;
    if (!plan.endless && frames_ >= plan.num_frames) return;  // past the request: trimmed
    if (c_.cancel.requested()) {
      throw Error(ErrorKind::kCancelled, "cancelled during decoding (after " + std::to_string(index_) +
                                             " of " + std::to_string(plan.total_chunks) + " chunks)");
    }
    if (c.first_frame != frames_) {
      throw Error(ErrorKind::kInternal, "chunk " + std::to_string(c.index) + " starts at frame " +
                                            std::to_string(c.first_frame) + ", expected " +
                                            std::to_string(frames_));
    }
    const int64_t n =
        plan.endless ? c.frames.size(0) : std::min<int64_t>(c.frames.size(0), plan.num_frames - frames_);
    Event e{Event::Kind::kChunk};
    e.chunk.index = index_;
    e.chunk.first_frame = frames_;
    e.chunk.total_frames = plan.num_frames;
    e.chunk.final = frames_ + n == plan.num_frames;
    e.chunk.frames = n == c.frames.size(0) ? c.frames : c.frames.narrow(0, 0, n).contiguous();
    if (c.frames_f32.defined()) e.chunk.frames_f32 = c.frames_f32.narrow(0, 0, n).contiguous();
    e.chunk.decode_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since_).count();
    hand_over(std::move(e));
    if (audio_) {
      Event a{Event::Kind::kChunk};
      a.chunk.index = index_;
      a.chunk.first_frame = frames_ + n;
      a.chunk.total_frames = plan.num_frames;
      a.chunk.final = frames_ + n == plan.num_frames;
      if (add_audio(a.chunk, frames_ + n)) hand_over(std::move(a));
    }
    ++index_;
    frames_ += n;
    c_.post_progress(Phase::kDecoding, 0, 0, index_, frames_);
    // The next chunk's decode time starts here: waiting for the caller is not part of it.
    since_ = Clock::now();
  }

  // An endless stream that ended at a chunk boundary: the soundtrack up to the last frame handed
  // over, as one more stretch.
  void finish_audio() {
    if (!audio_ || audio_latents_ >= dit::audio_latents_for(frames_)) return;
    Event a{Event::Kind::kChunk};
    a.chunk.index = index_ - 1;
    a.chunk.first_frame = frames_;
    a.chunk.total_frames = c_.plan.num_frames;
    a.chunk.final = true;
    if (add_audio(a.chunk, frames_, /*ended=*/true)) hand_over(std::move(a));
  }

  std::exception_ptr sink_error() const { return sink_error_; }
  int64_t frames() const { return frames_; }
  int64_t audio_latents() const { return audio_latents_; }

 private:
  // The soundtrack up to video frame `frame_end`: latents [audio_latents_, round(frame_end *
  // 5 / 3)), which for the clip's last chunk is A = round(num_frames * 5 / 3) exactly. The
  // decoder reads the rows on either side of the range as context, so the pieces join into
  // the whole clip's decode; the rows past A (the generated frames trimmed away) serve as the
  // last piece's right context. While the latents are still being made, the piece stops where
  // its right context ends (the rest follows with a later chunk). False: nothing to hand over.
  bool add_audio(Chunk& chunk, int64_t frame_end, bool ended = false) {
    const audio::AudioDecoder& dec = *c_.parts.audio;
    const int64_t ctx = dec.context_latents();
    // An ended stream's audio is complete as it is: its last piece takes the context there is.
    const bool complete = ended || audio_->available() == audio_->total();
    const int64_t exact = complete ? audio_->total() : audio_->available() - ctx;
    const int64_t end = std::min(dit::audio_latents_for(frame_end), exact);
    if (end <= audio_latents_) return false;
    // The rows the decoder reads: the piece and its context, clipped to what exists.
    const int64_t lo = std::max<int64_t>(0, audio_latents_ - ctx);
    const int64_t hi = std::min(audio_->available(), end + ctx);
    const OpTimer timer(OpKind::kAudioDecode);
    const at::Tensor wave = dec.decode_range(audio_->rows(lo, hi), audio_latents_ - lo, end - lo);  // [2, n]
    chunk.audio = wave.t().contiguous();  // [n, 2] interleaved
    chunk.first_sample = audio_latents_ * dec.samples_per_latent();
    audio_latents_ = end;
    audio_->release_before(std::max<int64_t>(0, end - ctx));
    return true;
  }

  void hand_over(Event e) {
    if (std::exception_ptr err = c_.mailbox.call(std::move(e))) {
      sink_error_ = err;
      std::rethrow_exception(err);
    }
  }

  const StageContext& c_;
  AudioLatents* const audio_;
  int64_t index_ = 0, frames_ = 0, audio_latents_ = 0;
  Clock::time_point since_;
  std::exception_ptr sink_error_;
};

}  // namespace

void load_audio_decoder(const StageContext& c) {
  dist::LocalFailure f;
  if (c.root() && !c.parts.audio) {
    try {
      require_audio_vae(c.model);
      // Where the video VAE runs (the GPU with device = cuda); its waveforms come back on the CPU.
      c.parts.audio.emplace(audio::AudioDecoder::load(c.model.audio_vae_dir).to(c.parts.vae->device()));
    } catch (const Error&) {
      f.capture();
    } catch (const std::exception& e) {
      // The decoder's own errors name the file; say which folder when they do not.
      const std::string what = e.what();
      const std::string msg =
          what.find(c.model.audio_vae_dir) != std::string::npos ? what : c.model.audio_vae_dir + ": " + what;
      f.set(std::make_exception_ptr(Error(ErrorKind::kFormat, msg)));
    }
  }
  dist::agree_or_throw(c.group, f);
}

at::Tensor WholeAudio::rows(int64_t begin, int64_t end) const {
  const int64_t a = total();
  return at::cat({rows_.narrow(0, begin, end - begin), rows_.narrow(0, a + begin, end - begin)});
}

void decode_stage(const StageContext& c, const at::Tensor& video, const at::Tensor& audio_rows) {
  vae::TensorLatents source(video);
  if (!audio_rows.defined()) {
    decode_stage(c, source, nullptr);
    return;
  }
  WholeAudio audio(audio_rows);
  decode_stage(c, source, &audio);
}

void decode_stage(const StageContext& c, vae::LatentSource& video, AudioLatents* audio) {
  const ClipPlan& p = c.plan;
  vae::DecodeOptions o;
  o.height = p.height;
  o.width = p.width;
  if (!c.root()) {
    try {
      c.parts.vae->decode_chunks(video, nullptr, c.group, o);
    } catch (const StreamEnd&) {
    }
    return;
  }
  if (p.sampler != Sampler::kCausal) c.post_progress(Phase::kDecoding, p.evaluations, p.evaluations);
  HandOverSink sink(c, audio);
  try {
    c.parts.vae->decode_chunks(video, &sink, c.group, o);
  } catch (const StreamEnd&) {
    sink.finish_audio();
    return;
  } catch (...) {
    // The caller's own exception, not the decoder's wrapping of it.
    if (sink.sink_error()) std::rethrow_exception(sink.sink_error());
    throw;
  }
  if (sink.frames() != p.num_frames) {
    throw Error(ErrorKind::kInternal, "the decode delivered " + std::to_string(sink.frames()) +
                                          " frames of " + std::to_string(p.num_frames));
  }
  if (audio && sink.audio_latents() != dit::audio_latents_for(p.num_frames)) {
    throw Error(ErrorKind::kInternal, "the decode delivered " + std::to_string(sink.audio_latents()) +
                                          " audio latents of " +
                                          std::to_string(dit::audio_latents_for(p.num_frames)));
  }
}

}  // namespace h3::engine_detail
