// A request's plan: the model's defaults filled in, every number checked against the engine's
// limits, and the keyframes, references and sounds it conditions on measured and placed.
#include "engine/planning/plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "audio/audio_encoder.h"
#include "audio/config.h"
#include "audio/resample.h"
#include "dit/chunk_layout.h"
#include "dit/frames.h"
#include "dit/sampler.h"
#include "engine/planning/request_lora.h"
#include "engine/stages/reference_frames.h"
#include "h3/error.h"
#include "image/keyframes.h"
#include "text/prompt_encoder.h"
#include "vae/chunk_plan.h"
#include "vae/video_decoder.h"

namespace h3 {
namespace fs = std::filesystem;

namespace {

void check_range(const char* field, int64_t v, int64_t lo, int64_t hi, const std::string& note) {
  if (v < lo || v > hi) {
    throw Error(ErrorKind::kInvalidArgument, std::string(field) + " = " + std::to_string(v) +
                                                 ": must be within " + std::to_string(lo) + ".." +
                                                 std::to_string(hi) + note);
  }
}

// A picture's (or each frame's of a video) size and bytes: `frames` of width x height 8-bit RGB.
void check_rgb(const std::string& source, int64_t width, int64_t height,
               const std::vector<const std::vector<uint8_t>*>& frames, const std::string& property) {
  const std::string name = property + " '" + source + "'";
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  // The size first: a caller's decoder names it before it allocates the pixels (pictures/).
  if (width < kMinPictureSide || height < kMinPictureSide) {
    throw Error(ErrorKind::kInvalidArgument, name + " is " + size + ": each side must be at least " +
                                                 std::to_string(kMinPictureSide) + " pixels");
  }
  if (width * height > kMaxPicturePixels) {
    throw Error(ErrorKind::kInvalidArgument,
                name + " is " + size + " (" + std::to_string(width * height / 1000000) + " MP): at most " +
                    std::to_string(kMaxPicturePixels / 1000000) +
                    " MP (8192 x 8192) are taken; scale it down (it is put onto a canvas of at most " +
                    std::to_string(kMaxSide) + " px a side anyway)");
  }
  for (const std::vector<uint8_t>* rgb : frames) {
    if (rgb->size() != static_cast<size_t>(width * height * 3)) {
      throw Error(ErrorKind::kInvalidArgument,
                  name + ": " + std::to_string(rgb->size()) + " bytes for " + size +
                      ": not 8-bit RGB (width x height x 3 bytes); decode it to RGB first");
    }
  }
}

void check_picture(const Picture& pic, const std::string& property) {
  check_rgb(pic.source, pic.width, pic.height, {&pic.rgb}, property);
}

}  // namespace

void plan_keyframes(const ModelInfo& m, const GenerationRequest& req, ClipPlan& p) {
  const bool first = !req.first_frame.empty(), last = !req.last_frame.empty();
  if (!first && !last) return;
  if (first) check_picture(req.first_frame, "first-frame");
  if (last) check_picture(req.last_frame, "last-frame");
  if (first) p.keyframe_anchors.push_back(Keyframe::kFirst);
  if (last) p.keyframe_anchors.push_back(Keyframe::kLast);
  if ((req.width == 0) != (req.height == 0)) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "give width and height together, or neither: with a first-frame or last-frame the canvas then "
        "follows the picture's aspect ratio");
  }
  if (req.width != 0) return;
  // The model's own canvas for that aspect ratio: its default's short edge and area (the
  // release: 768 and 768 x 1344), as the reference pipelines resolve it.
  const Picture& anchor = first ? req.first_frame : req.last_frame;
  const auto hw = image::resolve_canvas(
      anchor.width, anchor.height, dit::kCanvasMultiple, std::min(m.defaults.width, m.defaults.height),
      m.defaults.width * m.defaults.height,
      std::string(first ? "first-frame" : "last-frame") + " '" + anchor.source + "'");
  p.height = hw[0];
  p.width = hw[1];
}

// A reference's sound as the audio VAE encodes it: cut to the clip's duration at its own rate
// (the reference pipelines' int(frames / 24 · rate)), resampled onto the VAE's rate, padded to
// whole latents.
void plan_sound(const ModelInfo& m, const Audio& a, int64_t generated_frames, const std::string& label,
                PlannedReference& planned) {
  const std::string name = label + " '" + a.source + "'";
  if (m.audio_rate <= 0 || m.audio_hop <= 0) {
    throw Error(ErrorKind::kNotFound,
                name + ": sound is conditioned on through the audio VAE, and " + m.dir +
                    "/audio_vae holds none that can be read; give the model its audio_vae/");
  }
  if (a.rate <= 0 || (a.channels != 1 && a.channels != 2) ||
      static_cast<int64_t>(a.samples.size()) % a.channels != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                name + ": sound needs a positive rate and 1 or 2 interleaved channels (got " +
                    std::to_string(a.rate) + " Hz, " + std::to_string(a.channels) + " channels, " +
                    std::to_string(a.samples.size()) + " samples); downmix it to stereo");
  }
  // The reference's resampling builds one filter per output phase of the rates reduced by their
  // gcd: common rates need a few MB of them, an odd one gigabytes.
  if (a.rate != m.audio_rate && audio::resample_kernel_elements(a.rate, m.audio_rate) > kMaxResampleKernel) {
    throw Error(ErrorKind::kInvalidArgument,
                name + ": its rate of " + std::to_string(a.rate) +
                    " Hz shares too small a divisor with the audio VAE's " + std::to_string(m.audio_rate) +
                    " Hz for the reference's resampling (its filters would take " +
                    std::to_string(audio::resample_kernel_elements(a.rate, m.audio_rate) * 4 >> 20) +
                    " MiB); resample it to a common rate (e.g. 48000 or 44100 Hz) first");
  }
  const auto kept = std::min(
      a.frames(), static_cast<int64_t>(dit::frames_seconds(generated_frames) * static_cast<double>(a.rate)));
  if (kept < 1) throw Error(ErrorKind::kInvalidArgument, name + ": holds no sound (0 samples)");
  planned.audio_samples = audio::resampled_length(kept, a.rate, m.audio_rate);
  planned.audio_latents = (planned.audio_samples + m.audio_hop - 1) / m.audio_hop;
}

void plan_references(const ModelInfo& m, const GenerationRequest& req, ClipPlan& p) {
  if (req.references.empty()) return;
  if (!req.first_frame.empty() || !req.last_frame.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "references (Ref2VA) and first-frame / last-frame (FL2VA) are different tasks of different "
                "checkpoints: give one or the other");
  }
  int64_t images = 0, videos = 0, audios = 0;
  for (const Reference& r : req.references) (r.is_video() ? videos : r.is_audio() ? audios : images) += 1;
  const auto count = static_cast<int64_t>(req.references.size());
  if (images > kMaxReferenceImages || videos > kMaxReferenceVideos || audios > kMaxReferenceAudios ||
      count > kMaxReferences) {
    throw Error(ErrorKind::kInvalidArgument,
                std::to_string(images) + " image, " + std::to_string(videos) + " video and " +
                    std::to_string(audios) + " audio references: the released model reads at most " +
                    std::to_string(kMaxReferenceImages) + " images, " + std::to_string(kMaxReferenceVideos) +
                    " videos and " + std::to_string(kMaxReferenceAudios) + " audio references, " +
                    std::to_string(kMaxReferences) + " in all; leave some out");
  }
  if (audios == count) {
    throw Error(ErrorKind::kInvalidArgument,
                "an audio reference needs at least one image or video reference beside it (the released "
                "model never conditions on sound alone); add a picture or a video");
  }
  if ((req.width == 0) != (req.height == 0)) {
    throw Error(ErrorKind::kInvalidArgument,
                "give width and height together, or neither: with references the canvas is then the "
                "model's default (references never set it)");
  }
  const int64_t edge = m.defaults.reference_short_edge, multiple = dit::kCanvasMultiple;
  for (size_t i = 0; i < req.references.size(); ++i) {
    const Reference& ref = req.references[i];
    const std::string label = "reference " + std::to_string(i + 1);
    const std::string name = label + " '" + ref.source() + "'";
    PlannedReference planned;
    if (ref.is_audio()) {
      planned.kind = ReferenceKind::kAudio;
      planned.width = planned.height = planned.frames = planned.encoded_frames = planned.latent_frames = 0;
      plan_sound(m, ref.audio, p.generated_frames, label, planned);
      p.references.push_back(planned);
      continue;
    }
    if (!ref.is_video()) {
      const Picture& pic = ref.image;
      check_picture(pic, label);
      if (pic.width > 4 * pic.height || pic.height > 4 * pic.width) {
        throw Error(ErrorKind::kInvalidArgument,
                    name + " is " + std::to_string(pic.width) + "x" + std::to_string(pic.height) +
                        ": the released model takes aspect ratios from 1:4 to 4:1; crop it");
      }
      // The reference pipelines' rule, in their float arithmetic: scale = edge / short side, each
      // side round(side * scale / 32) * 32 (Python's round: halves to even), at least 32.
      const double scale = static_cast<double>(edge) / static_cast<double>(std::min(pic.width, pic.height));
      auto side = [&](int64_t v) {
        const auto r = static_cast<int64_t>(std::nearbyint(static_cast<double>(v) * scale / multiple));
        return std::max(multiple, r * multiple);
      };
      planned.width = side(pic.width);
      planned.height = side(pic.height);
      p.references.push_back(planned);
      continue;
    }
    const Video& v = ref.video;
    std::vector<const std::vector<uint8_t>*> given;
    for (const auto& f : v.frames) given.push_back(&f);
    check_rgb(v.source, v.width, v.height, given, label);
    if (v.fps_n <= 0 || v.fps_d <= 0) {
      throw Error(ErrorKind::kInvalidArgument, name + ": a video needs a positive frame rate, got " +
                                                   std::to_string(v.fps_n) + "/" + std::to_string(v.fps_d));
    }
    // Onto 24 fps, cut to the clip's generated frames, on the canvas of its own aspect ratio (the
    // rule the clip's own canvas follows).
    const double fps = static_cast<double>(v.fps_n) / static_cast<double>(v.fps_d);
    int64_t frames = 0;
    for (int64_t n : frame_repeats(static_cast<int64_t>(v.frames.size()), fps)) frames += n;
    planned.kind = ReferenceKind::kVideo;
    planned.frames = std::min(frames, p.generated_frames);
    if (planned.frames < kMinReferenceVideoFrames) {
      throw Error(ErrorKind::kInvalidArgument,
                  name + " gives " + std::to_string(planned.frames) + " frames at " +
                      std::to_string(dit::kFps) + " fps (" + std::to_string(v.frames.size()) + " at " +
                      std::to_string(fps) +
                      " fps): a video reference "
                      "needs at least " +
                      std::to_string(kMinReferenceVideoFrames) +
                      " (0.54 s: the two frames the conditioner reads at 2 fps)");
    }
    const auto hw =
        image::resolve_canvas(v.width, v.height, multiple, std::min(m.defaults.width, m.defaults.height),
                              m.defaults.width * m.defaults.height, name);
    planned.height = hw[0];
    planned.width = hw[1];
    planned.encoded_frames = encoded_frames(planned.frames);
    planned.latent_frames = encoded_latent_frames(planned.encoded_frames);
    if (!v.soundtrack.empty())
      plan_sound(m, v.soundtrack, p.generated_frames, label + "'s soundtrack", planned);
    p.references.push_back(planned);
  }
}

namespace {

// How many frames a video reference's conditioner reads of `frames` at 24 fps.
int64_t video_sampled_frames(int64_t frames) {
  return static_cast<int64_t>(conditioner_frames(frames).size());
}

}  // namespace

namespace {

// The text rows a picture of width x height adds to the prompt's presentation: its vision block
// (the tower's merged patches after Qwen3-VL's resize, and its start and end tokens) and its
// "<Picture i>: " label (at most 8 tokens: the release's tokenizer gives 6).
int64_t vision_block_rows(const text::VisionConfig& v, int64_t width, int64_t height) {
  const text::ImageProcessorConfig proc;
  const int64_t factor = v.patch_size * v.spatial_merge_size;
  const auto hw = text::smart_resize(height, width, factor, proc.min_pixels, proc.max_pixels);
  return (hw[0] / factor) * (hw[1] / factor) + 2 + 8;
}

}  // namespace

ClipPlan make_plan(const ModelInfo& m, const GenerationRequest& req) {
  ClipPlan p{};
  p.width = req.width != 0 ? req.width : m.defaults.width;
  p.height = req.height != 0 ? req.height : m.defaults.height;
  plan_keyframes(m, req, p);
  p.num_frames = req.num_frames != 0 ? req.num_frames : m.defaults.num_frames;
  p.sampler = req.sampler;
  const bool causal = p.sampler == Sampler::kCausal;
  p.steps = req.steps != 0 ? req.steps : causal ? kDefaultCausalSteps : m.defaults.steps;
  check_range("width", p.width, kMinSide, kMaxSide, " pixels (0 = the model default)");
  check_range("height", p.height, kMinSide, kMaxSide, " pixels (0 = the model default)");
  p.endless = p.num_frames == kEndless;
  if (p.endless && !causal) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "frames = -1 (an endless stream) needs the causal sampler (sampler=causal): the euler sampler "
        "denoises a whole clip of known length");
  }
  if (p.endless && req.window < 0) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "window = -1 keeps every chunk in the KV cache, which an endless stream would grow without bound: "
        "give a window of 0 or more");
  }
  if (!p.endless)
    check_range("frames", p.num_frames, kMinFrames, kMaxFrames, " (0 = the model default; -1: endless)");
  if (!req.prompt_timeline.empty()) {
    if (!causal) {
      throw Error(ErrorKind::kInvalidArgument, "a prompt timeline needs the causal sampler (sampler=causal)");
    }
    double last = 0;
    for (size_t i = 0; i < req.prompt_timeline.size(); ++i) {
      const TimedPrompt& t = req.prompt_timeline[i];
      if (!std::isfinite(t.seconds) || t.seconds < last || (i > 0 && t.seconds == last)) {
        throw Error(ErrorKind::kInvalidArgument,
                    "prompt timeline entry " + std::to_string(i + 1) + " at " + std::to_string(t.seconds) +
                        " s: the times must increase from 0 (it follows " + std::to_string(last) + " s)");
      }
      if (t.prompt.empty()) {
        throw Error(ErrorKind::kInvalidArgument, "prompt timeline entry " + std::to_string(i + 1) + " at " +
                                                     std::to_string(t.seconds) + " s has an empty prompt");
      }
      last = t.seconds;
    }
  }
  if (causal) {
    check_range("steps", p.steps, kMinCausalSteps, kMaxCausalSteps,
                " forwards per chunk with the causal sampler (0 = 4, RAVEN's)");
    check_range("sink", req.sink, kMinSink, kMaxSink,
                " pinned KV-cache records (the text is the first; 2 also pins the first chunk)");
    check_range("window", req.window, kMinWindow, kMaxWindow,
                " recent chunks kept in the KV cache (-1: all)");
    if (req.min_steps != 0) {
      check_range("min-steps", req.min_steps, kMinCausalSteps, p.steps,
                  " forwards per chunk a live change may lower the stream to (at most its steps; 0: none)");
    }
    p.min_steps = req.min_steps != 0 ? req.min_steps : p.steps;
  } else {
    if (req.min_steps != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  "min-steps = " + std::to_string(req.min_steps) +
                      ": lowering the forwards per chunk while streaming (pace) needs the causal sampler "
                      "(sampler=causal); the euler sampler denoises the whole clip on one grid");
    }
    check_range("steps", p.steps, kMinSteps, kMaxSteps,
                " grid points (N grid points make N - 1 denoiser evaluations; 0 = the model default)");
  }
  for (auto [name, v] :
       {std::pair<const char*, double>{"video-shift", req.video_shift}, {"audio-shift", req.audio_shift}}) {
    if (!std::isfinite(v) || v < 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  std::string(name) + " = " + std::to_string(v) + ": a positive shift, or 0 for the model's");
    }
  }
  if ((req.video_shift != 0 || req.audio_shift != 0) && !causal) {
    throw Error(ErrorKind::kInvalidArgument,
                "video-shift and audio-shift apply to the causal sampler; the euler sampler runs the model's "
                "scheduler shifts (scheduler/ and audio_scheduler/)");
  }
  p.video_shift = req.video_shift != 0 ? req.video_shift : m.video_shift;
  p.audio_shift = req.audio_shift != 0 ? req.audio_shift : m.audio_shift;
  if (!req.lora.empty() && req.lora != kNoLora && !fs::exists(req.lora)) {
    throw Error(
        ErrorKind::kNotFound,
        "lora '" + req.lora + "' does not exist: give a PEFT adapter_model.safetensors or its folder");
  }
  if (causal && !req.references.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                "references condition the euler sampler only: the causal sampler has no reference path "
                "(RAVEN-Streaming is text to video); use sampler=euler, or leave the references out");
  }
  if (causal && !p.keyframe_anchors.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "first-frame and last-frame condition the euler sampler only: the causal sampler has no keyframe "
        "path (RAVEN-Streaming is text to video); use sampler=euler, or leave the frames out");
  }
  if (!causal && (req.positions != CausalPositions::kAuto || req.prompt_switch != PromptSwitch::kKeep)) {
    throw Error(ErrorKind::kInvalidArgument,
                std::string(req.positions != CausalPositions::kAuto ? "positions" : "prompt-switch") +
                    " applies to the causal sampler (sampler=causal): the euler sampler has no KV cache "
                    "to place or recompute");
  }
  if (causal && req.positions == CausalPositions::kRelative && req.window < 0) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "positions = relative needs a window: it moves the window's chunks back as the clip advances, "
        "and window = -1 keeps every chunk; give a window of 0 or more, or positions = absolute");
  }
  // A model may ship its own causal adapter (the embedded default does): an endless causal request
  // without a lora runs with it (request_lora.h); a clip runs the model bare, as the model's maker
  // meant (no warning); lora = "none" runs it bare.
  if (causal && request_lora(m, req).empty() && (req.lora == kNoLora || model_causal_lora(m.dir).empty())) {
    p.warnings.push_back(
        "the causal sampler runs without a LoRA: the base model was not trained for chunk-causal sampling, "
        "so expect a clip that drifts from the prompt; give a RAVEN-Streaming LoRA (lora)");
  }

  auto up32 = [](int64_t v) {
    return (v + dit::kCanvasMultiple - 1) / dit::kCanvasMultiple * dit::kCanvasMultiple;
  };
  p.canvas_width = up32(p.width);
  p.canvas_height = up32(p.height);
  // The model makes 17n+5 frames; the VAE's temporal plan needs at least one whole chunk
  // (7 latents -> 22 frames), so shorter requests are generated at 22 and trimmed. An endless
  // stream is planned as the longest one (its plan's latents), and never trimmed.
  p.generated_frames = p.endless
                           ? dit::clip_frames(kMaxEndlessChunks)
                           : std::max<int64_t>(dit::snap_pixel_frames(p.num_frames), dit::kMinDecodedFrames);
  const dit::LatentGeometry geo = dit::latent_geometry(p.generated_frames, p.canvas_width, p.canvas_height);
  p.latent_frames = geo.t;
  plan_references(m, req, p);  // a video reference is cut to the generated frames
  // The condition blocks' DiT rows (2x2 latent patches) and their vision blocks' text rows.
  const int64_t patch_px = dit::kVaeSpatialRatio * 2;
  for (size_t i = 0; i < p.keyframe_anchors.size(); ++i) {
    p.condition_rows += (p.canvas_width / patch_px) * (p.canvas_height / patch_px);
    if (m.vision) p.vision_rows += vision_block_rows(*m.vision, p.canvas_width, p.canvas_height);
  }
  for (const PlannedReference& r : p.references) {
    p.condition_rows += r.latent_frames * (r.width / patch_px) * (r.height / patch_px) + 2 * r.audio_latents;
    // Sound never reaches the conditioner: its "<Audio j>: " label alone (at most 8 tokens).
    if (r.audio_latents > 0) p.vision_rows += 8;
    if (r.kind == ReferenceKind::kAudio) continue;
    // A video's conditioner reads 2 frames a second, a vision block per pair.
    const int64_t blocks = r.kind == ReferenceKind::kVideo ? (video_sampled_frames(r.frames) + 1) / 2 : 1;
    if (m.vision) p.vision_rows += blocks * vision_block_rows(*m.vision, r.width, r.height);
  }
  p.audio_latents = geo.audio;
  p.audio_rate = m.audio_rate;
  p.audio_samples = p.endless ? -1
                              : dit::audio_latents_for(p.num_frames) *
                                    (m.audio_hop > 0 ? m.audio_hop : dit::kAudioSamplesPerLatent);
  p.fps_n = static_cast<int>(dit::kFps);
  p.fps_d = 1;
  if (causal) {
    p.causal_chunks =
        p.endless ? -1 : static_cast<int64_t>(dit::cut_chunks(p.latent_frames, p.audio_latents).size());
    p.evaluations = p.steps * p.causal_chunks;
    // The text and every committed chunk (the last is never committed), at most sink + window.
    p.cache_records = p.endless        ? (req.window < 0 ? -1 : req.sink + req.window)
                      : req.window < 0 ? p.causal_chunks
                                       : std::min(p.causal_chunks, req.sink + req.window);
    // Asked for absolute positions (auto gives a clip them silently: today's clips, the parity
    // vectors' layout), a stream or clip longer than the model's trained length is told where its
    // positions leave it, when that chunk is delivered. A whole chunk at the trained clip's tail
    // index already runs past it.
    const int64_t trained = dit::clip_chunks(m.defaults.num_frames), past = trained - 1;
    if (req.positions == CausalPositions::kAbsolute && (p.endless || p.causal_chunks > trained)) {
      std::ostringstream w;
      w << "positions = absolute "
        << (p.endless ? "on an endless stream" : "on a clip longer than the trained length")
        << ": from chunk " << past << " (counted from 0, " << dit::chunk_start_seconds(past)
        << " s in) its positions pass those of a clip of the model's trained length ("
        << m.defaults.num_frames
        << " frames, the model's default), where RoPE extrapolates and the picture may drift; positions = "
           "relative keeps them within (auto's choice for an endless stream)";
      p.positions_leave_frame = dit::chunk_first_frame(past);
      p.positions_warning = w.str();
    }
    p.prompt_switch = req.prompt_switch;
  } else {
    p.evaluations = dit::make_schedule(p.steps, m.video_shift).evaluations();
  }

  if (p.endless) {
    p.num_frames = p.total_chunks = p.evaluations = p.generated_frames = -1;
    return p;
  }
  const vae::ChunkPlan cp = vae::plan_chunks(p.latent_frames, vae::temporal_params(m.vae));
  p.total_chunks = 0;
  for (const auto& c : cp.chunks) {
    if (c.first_frame < p.num_frames) ++p.total_chunks;
  }
  return p;
}

}  // namespace h3
