// Writes the engine's interleaved stereo f32 samples into buffers of h3src's negotiated audio
// format: F32LE (the engine's own) as they are, S16LE clamped to [-1, 1], scaled by 32767 and
// rounded to nearest. The audio pad's task only (its configuration and its buffers).
#pragma once

#include <gst/audio/audio.h>

#include <cstdint>

#include "audio_queue.h"

namespace h3gst {

class AudioWriter {
 public:
  static constexpr int kChannels = 2;  // the engine's soundtrack is stereo (H3_AUDIO_CAPS)

  // Prepares for `info`; false (nothing changed) unless it is stereo F32LE or S16LE at `rate`.
  bool configure(const GstAudioInfo& info, int64_t rate);
  // Bytes a buffer of `samples` sample frames takes in the negotiated format.
  gsize bytes(int64_t samples) const { return static_cast<gsize>(samples) * bytes_per_frame_; }
  // Writes `a` into `buf`, whose size becomes the slice's (the clip's last stretch may be
  // shorter than a buffer); false, with an error posted on `element`, when `buf` is too small or
  // cannot be mapped.
  bool write(const AudioSlice& a, GstBuffer* buf, GstElement* element) const;

 private:
  bool s16_ = false;  // S16LE, else F32LE
  gsize bytes_per_frame_ = kChannels * sizeof(float);
};

}  // namespace h3gst
