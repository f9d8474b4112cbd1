// What a caller asks the engine for, and what that request will produce (docs/engine.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "h3/limits.h"
#include "h3/model_clock.h"
#include "h3/request_enums.h"

namespace h3 {

// A picture as the caller decoded it (an FL2VA keyframe): 8-bit RGB, `height` rows of width * 3
// bytes. The engine puts it onto the canvas itself (docs/conditioning.md).
struct Picture {
  std::string source;  // the file or URI it came from, named in messages
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  bool empty() const { return rgb.empty(); }
};

// Sound as the caller decoded it (a Ref2VA audio reference, a video reference's soundtrack):
// `channels` (1 or 2) interleaved float samples at `rate` samples a second per channel. The
// engine cuts it to the clip's duration and resamples it onto the audio VAE's rate itself
// (docs/conditioning.md).
struct Audio {
  std::string source;  // the file or URI it came from, named in messages
  int64_t rate = 0, channels = 0;
  std::vector<float> samples;
  bool empty() const { return samples.empty(); }
  int64_t frames() const { return channels > 0 ? static_cast<int64_t>(samples.size()) / channels : 0; }
};

// A video as the caller decoded it (a Ref2VA video reference): frames of 8-bit RGB, `height` rows
// of width * 3 bytes each, at fps_n / fps_d frames a second. The engine resamples them onto 24 fps
// and onto its canvas itself (docs/conditioning.md).
struct Video {
  std::string source;  // the file or URI it came from, named in messages
  int64_t width = 0, height = 0;
  int64_t fps_n = 0, fps_d = 1;
  std::vector<std::vector<uint8_t>> frames;
  // Its soundtrack (empty: none, or the caller left it out): conditioned on with the frames.
  Audio soundtrack;
  bool empty() const { return frames.empty(); }
};

// A Ref2VA reference: an image, a video (with or without its soundtrack), or sound alone.
struct Reference {
  Picture image;  // an image reference
  Video video;    // a video reference (frames present)
  Audio audio;    // an audio reference (samples present, no picture)
  bool is_video() const { return !video.empty(); }
  bool is_audio() const { return video.empty() && image.empty() && !audio.empty(); }
  // The sound this reference conditions on: an audio reference's, or a video's soundtrack.
  const Audio* sound() const {
    if (is_audio()) return &audio;
    return is_video() && !video.soundtrack.empty() ? &video.soundtrack : nullptr;
  }
  const std::string& source() const {
    return is_video() ? video.source : is_audio() ? audio.source : image.source;
  }
};

// A prompt that takes over at `seconds` into the clip (a causal request's timeline).
struct TimedPrompt {
  double seconds = 0;
  std::string prompt;
};

struct GenerationRequest {
  std::string prompt;       // for models with a text encoder of their own (text_encoder/ and tokenizer/)
  std::string embeds_path;  // precomputed embeddings safetensors (`embeds` [L, text_dim], optional `tags`)
  int64_t width = 0, height = 0;  // output size in pixels; 0 = model default
  // Exact output frame count; 0 = model default; -1 = endless (the causal sampler only: chunks
  // one after another until the caller finishes or cancels it; docs/causal.md "Live").
  int64_t num_frames = 0;
  int64_t steps = 0;  // grid points N (N-1 evaluations); 0 = model default; >= 2
  uint64_t seed = 0;
  // Also decode the soundtrack: each chunk then carries its stretch of the waveform
  // (Chunk::audio). Needs the model folder's audio_vae/; off, the audio rows are denoised
  // with the video (the model makes them together) but never decoded.
  bool audio = false;
  // How the clip is synthesised: euler (the release's flow-matching sampler over the whole
  // clip; the first frame waits for every step) or causal (RAVEN-Streaming's chunk-causal
  // sampler: each 17-frame chunk is finished in `steps` forwards against a KV cache and decoded
  // at once; docs/causal.md).
  Sampler sampler = Sampler::kEuler;
  // causal: pinned KV-cache records, the text being the first (>= 1), and recent chunks kept
  // (-1: none evicted; a window of the clip's chunks or more keeps every chunk).
  int64_t sink = 2, window = 2;
  // causal: where the chunks sit on the DiT's media clock (auto: relative for an endless stream,
  // absolute for a clip) and what a prompt change does to the kept chunks (docs/causal.md).
  CausalPositions positions = CausalPositions::kAuto;
  PromptSwitch prompt_switch = PromptSwitch::kKeep;
  // causal: the grids' shifts; 0: the model's scheduler shifts (12 and 3 in the release).
  double video_shift = 0, audio_shift = 0;
  // causal: the fewest forwards per chunk StreamControl::change_steps may set (a live stream
  // keeping pace), 1..steps; 0: the stream keeps `steps`. The AdaLN tables then hold every grid
  // from min_steps to steps, so that a change costs no reload.
  int64_t min_steps = 0;
  // A PEFT LoRA (adapter_model.safetensors or its folder) attached to the DiT for this request
  // on every rank; empty: none (one attached for an earlier request is taken off).
  std::string lora;
  // causal: prompts that take over later, in increasing time: each applies from the first chunk
  // that starts at or after its time (chunk c starts at dit::chunk_start_seconds(c): c * 17 / 24
  // s), so that the same timeline and seed give the same frames. The first prompt is `prompt` (or
  // the embeddings).
  std::vector<TimedPrompt> prompt_timeline;
  // FL2VA (image-conditioned generation, the Euler sampler): the clip starts from `first_frame`
  // and/or ends on `last_frame`. Either alone or both; with neither the request is T2VA. Unless
  // width and height are given, the canvas follows the aspect ratio of the first one given
  // (ClipPlan::keyframe_anchors). Rank 0 alone holds the pixels: they never travel in a Job.
  Picture first_frame, last_frame;
  // Ref2VA (reference-conditioned generation, the Euler sampler, an engine opened with the Ref2VA
  // DiT: EngineOptions::ref2va): image, video and audio references, in the order the model reads
  // them (the order labels them "<Picture i>" / "<Audio j>" / "<Video k>" in the prompt's
  // presentation and lays them out on the clock, so another order is another request). An image
  // is encoded at its own size (a short edge of ModelDefaults::reference_short_edge), a video on
  // the canvas of its own aspect ratio at 24 fps, sound (an audio reference's, a video's
  // soundtrack) by the audio VAE's encoder at its rate, cut to the clip's duration; none sets the
  // clip's canvas. At most kMaxReferenceImages images, kMaxReferenceVideos videos and
  // kMaxReferenceAudios audio references, and never sound alone. Rank 0 alone holds the media.
  std::vector<Reference> references;
};

// A Ref2VA reference as planned (docs/conditioning.md): the size it is encoded at and, for a
// video, its frames after the resampling onto 24 fps and the truncation to the clip's length
// (`frames`), the 17n+5 of them the VAE encodes (`encoded_frames`) and their latent frames.
struct PlannedReference {
  ReferenceKind kind = ReferenceKind::kImage;
  int64_t width = 0, height = 0;                              // 0 for audio
  int64_t frames = 1, encoded_frames = 1, latent_frames = 1;  // 0 for audio
  // Sound (an audio reference, a video's soundtrack; else 0): its samples per channel at the
  // audio VAE's rate after the cut to the clip's duration and the resampling, and the audio
  // latents per channel they encode to (ceil(samples / hop)).
  int64_t audio_samples = 0, audio_latents = 0;
};

// What a request will produce, computed before any work (validated; throws h3::Error
// kInvalidArgument naming the field and the allowed range).
struct ClipPlan {
  int64_t width, height, num_frames;    // exactly what the sink will receive in total
  int64_t canvas_width, canvas_height;  // multiples of 32 the model computes at
  int64_t latent_frames, total_chunks, steps;
  int fps_n = static_cast<int>(dit::kFps), fps_d = 1;
  // Additions beyond the contract:
  int64_t generated_frames = 0;  // 17n+5 frames the model makes (>= num_frames; the rest is trimmed)
  int64_t evaluations = 0;       // denoiser evaluations (steps - 1 unless the shifted grid repeats a value)
  int64_t audio_latents = 0;     // audio latents per stereo channel (of the generated frames)
  // The soundtrack a request with audio receives, per channel at audio_rate: hop * round(num_frames
  // * 5 / 3) samples (the release: 800 per latent at 32 kHz), which differs from the video's
  // num_frames / 24 s by at most half a hop.
  int64_t audio_samples = 0;
  // Samples per second per channel: the model's audio VAE's (its config); 0 when the model has
  // no audio VAE.
  int64_t audio_rate = 0;
  // The sampler; with causal, `steps` are forwards per chunk and `evaluations` the noise forwards
  // of the whole clip (steps per chunk, causal_chunks chunks).
  Sampler sampler = Sampler::kEuler;
  int64_t causal_chunks = 0;
  int64_t cache_records = 0;  // causal: the most records the KV cache holds (the text included)
  int64_t min_steps = 0;      // causal: the fewest forwards per chunk a live change may set (<= steps)
  // An endless request: num_frames, total_chunks, generated_frames, evaluations and
  // audio_samples are -1; latent_frames and audio_latents are those of the longest stream
  // (kMaxEndlessChunks chunks), after which it ends.
  bool endless = false;
  double video_shift = 0, audio_shift = 0;  // the shifts the sampler runs with
  // causal: what a prompt change does to the kept chunks (GenerationRequest::prompt_switch); with
  // recache the sampler holds their commit inputs, which the memory estimate counts.
  PromptSwitch prompt_switch = PromptSwitch::kKeep;
  // causal, positions = absolute, past the model's trained length: the first frame of the first
  // chunk whose positions pass it (-1: none), and what the caller should be told when that frame
  // is delivered (it is not among `warnings`, which are told before the clip starts).
  int64_t positions_leave_frame = -1;
  std::string positions_warning;
  // What the caller should be told before the clip starts (e.g. a causal request without a
  // LoRA: the base model was not trained for chunk-causal sampling).
  std::vector<std::string> warnings;
  // FL2VA: the keyframes in packed order, the first and/or the last; empty: T2VA.
  std::vector<Keyframe> keyframe_anchors;
  // Ref2VA: each image reference's encoded size, in packed order; empty: not Ref2VA.
  std::vector<PlannedReference> references;
  // The DiT rows the condition blocks add (keyframes, references: one per 2x2 latent patch) and
  // the text rows the pictures add to the prompt's presentation (their vision blocks; 0 where the
  // model has no vision tower): both part of every forward, counted by the memory estimates.
  int64_t condition_rows = 0, vision_rows = 0;
};

}  // namespace h3
