#include "dit/frames.h"

#include <string>

#include "h3/error.h"

namespace h3::dit {

bool is_valid_pixel_frames(int64_t frames) {
  return frames >= kTailFrames && (frames - kTailFrames) % kChunkFrames == 0;
}
bool is_valid_latent_frames(int64_t t) {
  return t >= kTailLatents && (t - kTailLatents) % kChunkLatents == 0;
}

int64_t latent_frames_for(int64_t pixel_frames) {
  if (!is_valid_pixel_frames(pixel_frames)) {
    throw Error(ErrorKind::kInvalidArgument,
                "frames = " + std::to_string(pixel_frames) +
                    ": the model generates 17n+5 frames (5, 22, 39, ..., 124, ...); the nearest is " +
                    std::to_string(snap_pixel_frames(pixel_frames)));
  }
  return (pixel_frames - kTailFrames) / kChunkFrames * kChunkLatents + kTailLatents;
}

int64_t pixel_frames_for(int64_t latent_frames) {
  if (!is_valid_latent_frames(latent_frames)) {
    throw Error(ErrorKind::kInvalidArgument,
                "latent frames = " + std::to_string(latent_frames) +
                    ": the model's latent clips have 5n+2 frames (2, 7, 12, ..., 37, ...)");
  }
  return clip_frames((latent_frames - kTailLatents) / kChunkLatents);
}

int64_t snap_pixel_frames(int64_t requested) {
  if (requested <= kTailFrames) return kTailFrames;
  return clip_frames((requested - kTailFrames + kChunkFrames - 1) / kChunkFrames);
}

int64_t audio_latents_for(int64_t pixel_frames) {
  // round(frames * 40 / 24) = round(frames * 5 / 3); halves cannot occur (denominator 3).
  return (pixel_frames * 5 + 1) / 3;
}

void check_canvas(int64_t width, int64_t height) {
  if (width <= 0 || height <= 0 || width % kCanvasMultiple != 0 || height % kCanvasMultiple != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "canvas " + std::to_string(width) + "x" + std::to_string(height) +
                    ": width and height must be positive multiples of 32 pixels");
  }
}

LatentGeometry latent_geometry(int64_t pixel_frames, int64_t width, int64_t height) {
  check_canvas(width, height);
  LatentGeometry g;
  g.frames = pixel_frames;
  g.width = width;
  g.height = height;
  g.t = latent_frames_for(pixel_frames);
  g.h = height / kVaeSpatialRatio;
  g.w = width / kVaeSpatialRatio;
  g.audio = audio_latents_for(pixel_frames);
  return g;
}

}  // namespace h3::dit
