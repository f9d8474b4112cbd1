// The one generating pipeline of the live server: an endless, live h3src whose video is encoded
// once (x264enc, constrained baseline, zerolatency) and whose sound is encoded once (Opus), each
// into a tee that every viewer's branch (viewer.h) joins; with an HLS folder, the same H.264 (and
// the sound in AAC) also goes to hlssink2. Reports each chunk's first frame leaving h3src and
// each h3-prompt-applied on the main thread.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <functional>
#include <string>

namespace h3live {

struct BroadcastEvents {
  // A chunk's first frame left h3src: its chunk index, its running time, the wall clock then.
  std::function<void(int64_t chunk, uint64_t running_time, int64_t wall_us)> chunk_out;
  // h3src's h3-prompt-applied: the first chunk under the new prompt and its running time.
  std::function<void(int64_t chunk, uint64_t running_time)> prompt_applied;
  // The pipeline failed (its error, with the element's name); the stream is over.
  std::function<void(const std::string& error)> failed;
  // An element of viewer `id`'s bin (viewer.h names it viewer-ID) failed: that viewer alone is
  // over (a peer gone mid-association, say), maybe already removed.
  std::function<void(const std::string& id, const std::string& error)> viewer_failed;
};

class Broadcast {
 public:
  // `h3src_properties`: gst-launch syntax (`width=256 height=160 prompt='...'`); `hls_dir`:
  // empty for no HLS.
  Broadcast(const std::string& h3src_properties, const std::string& hls_dir, BroadcastEvents events);
  ~Broadcast();
  Broadcast(const Broadcast&) = delete;
  Broadcast& operator=(const Broadcast&) = delete;

  // Builds and plays the pipeline; false with `error` set when an element is missing or the
  // properties do not parse.
  bool start(std::string* error);
  // Sends the h3-prompt event to h3src (from the next chunk); false when h3src refused it.
  bool change_prompt(const std::string& prompt);

  GstElement* pipeline() const { return pipeline_; }
  GstElement* video_tee() const { return video_tee_; }
  GstElement* audio_tee() const { return audio_tee_; }

  static constexpr int kFramesPerChunk = 17;  // the causal sampler's chunk (docs/causal.md)

 private:
  static GstPadProbeReturn on_video_buffer(GstPad* pad, GstPadProbeInfo* info, gpointer self);
  static gboolean on_bus_message(GstBus* bus, GstMessage* message, gpointer self);

  std::string description_;
  BroadcastEvents events_;
  GstElement* pipeline_ = nullptr;
  GstElement* source_ = nullptr;
  GstElement* video_tee_ = nullptr;
  GstElement* audio_tee_ = nullptr;
  guint bus_watch_ = 0;
};

}  // namespace h3live
