// h3src's `prompts` pad (docs/element.md, "Marking"): the stream's prompt as timed text
// (text/x-raw, format=utf8) that mp4mux writes as a tx3g track. One buffer per 17-frame model
// chunk, holding the prompt the chunk was synthesised under (the one the engine took there, or
// the one before), stamped like the chunk's first frame and lasting until the next chunk's first
// frame (or the clip's end): a prompt change shows at the running time it took effect, as
// `h3-prompt-applied` reports it. Pushed by the video pad's task right after a chunk's first
// frame, so the text never runs ahead of the video or far behind it (a muxer waiting for the
// text is waiting for that one buffer; put a queue before the muxer as for any other branch).
// Unlinked, or done downstream: the text is dropped and the video goes on.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <string>

#include "lifecycle.h"

namespace h3gst {

// tx3g holds a sample's text length in 16 bits: a longer prompt goes into the track cut on a
// character boundary, with "…" (the record and the XMP keep it whole).
inline constexpr size_t kMaxPromptTrackBytes = 65000;
std::string prompt_track_text(const std::string& prompt);

class PromptPad {
 public:
  PromptPad(GstElement* element, GstPad* pad, GstDebugCategory* category)
      : element_(element), pad_(pad), category_(category) {}
  PromptPad(const PromptPad&) = delete;
  PromptPad& operator=(const PromptPad&) = delete;

  GstPad* pad() const { return pad_; }
  // The stream started (its tags went out): video_pushed() needs no tags.
  bool begun() const { return begun_; }
  // A new stream (READY -> PAUSED).
  void reset();
  // Frame `frame` of the video went out stamped `pts`; when it is a chunk's first, the chunk's
  // text follows, lasting until frame min(next chunk's first, `clip_frames`) (-1: endless) at
  // fps_n/fps_d. Starts the stream (stream-start in `group_id`, caps, segment, `tags` copied) first.
  void video_pushed(int64_t frame, GstClockTime pts, const std::string& prompt, int64_t clip_frames,
                    gint fps_n, gint fps_d, guint group_id, const GstTagList* tags);
  // The same for video frame `buf` (its OFFSET the frame number) from what `lifecycle` holds: the
  // record's prompt at the frame's chunk, the plan's length and rate, the stream's tags.
  void follow_video(GstBuffer* buf, Lifecycle& lifecycle, guint group_id);
  // A CAPS query on the pad: its template's caps, filtered.
  bool answer_caps(GstQuery* query) const;  // true: answered
  // The video ended (EOS when `eos`): so does the text.
  void end(bool eos, guint group_id);
  // FLUSH_STOP with the video's stream lock held; `restarted`: the stream starts over.
  void flush_stop(bool restarted);

 private:
  void begin(guint group_id, const GstTagList* tags);

  GstElement* const element_;
  GstPad* const pad_;
  GstDebugCategory* const category_;
  // The video pad's task and flush-stop (under its stream lock) only.
  bool begun_ = false, need_segment_ = false, done_ = false;
};

}  // namespace h3gst
