// One of h3src's source pads, pushed by a task of its own: the task, the stream it starts
// (stream-start in the element's group, the negotiated caps, a TIME segment from 0, the clip's
// tags), its buffer pool (downstream's, or one of its own), and pushing. Live (is-live=true), each
// buffer is stamped with its running time and waits until the element's clock reaches it (the
// LiveClock both pads share), a chunk that comes late is reported (LivePacer), and a buffer
// whose wait a flush or stop cut short is held and pushed first when the task runs again. A
// downstream that is done (EOS) or not linked is drained rather than failed, so that the engine,
// and with it the other pad, is never held back by a pad nobody reads. The pad's task only, and
// the state changes and flushes while the task does not run.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <functional>
#include <utility>

#include "live_timing.h"

namespace h3gst {

class SrcPad {
 public:
  // Called with each buffer as it goes downstream, after its wait for the clock (h3src's video
  // pad reports its frames to the lifecycle).
  using Pushed = std::function<void(GstBuffer* buf)>;

  // Pad `pad` of `element`, whose buffers wait in `clock` as its pad `slot` (0 video, 1 audio);
  // logs into `category`, the element's.
  SrcPad(GstElement* element, GstPad* pad, GstDebugCategory* category, LiveClock& clock, int slot,
         Pushed pushed = nullptr)
      : element_(element), pad_(pad), category_(category), pacer_(clock, slot), pushed_(std::move(pushed)) {}
  ~SrcPad() {
    gst_clear_buffer(&held_);
    release_pool();
  }
  SrcPad(const SrcPad&) = delete;
  SrcPad& operator=(const SrcPad&) = delete;

  GstPad* pad() const { return pad_; }
  // A new stream (READY -> PAUSED; the pool was released at stop); `live`: paced to the clock.
  void reset(bool live);
  // FLUSH_STOP, with the pad's stream lock held. `restarted`: the flush generates the clip again,
  // the stream starts over (its segment sent again) and a held buffer is dropped. Either way the
  // next chunk anchors the lateness again.
  void flush_stop(bool restarted);
  void release_pool();
  // The task runs `loop` (READY -> PAUSED, and again after a flush-stop); stop_task() joins it
  // and drops its held buffer (PAUSED -> READY).
  void start_task(GstTaskFunction loop, gpointer data) { gst_pad_start_task(pad_, loop, data, nullptr); }
  void stop_task();

  bool configured() const { return configured_; }
  // Downstream's caps among `offered` (taken), truncated and fixated by `fixate` (then by
  // gst_caps_fixate); nullptr (and an error posted) when there are none.
  GstCaps* negotiate(GstCaps* offered, const std::function<void(GstCaps* caps)>& fixate);
  // stream-start (group `group_id`), `caps`, the segment, `tags` (taken) and a pool of buffers of
  // `size` bytes (a video pool with `video`). False: a flush since the task's first data (it pauses
  // and configures again after flush-stop), or an error (posted).
  bool begin(GstCaps* caps, guint group_id, GstTagList* tags, guint size, bool video);

  // A buffer from the pool; nullptr when flushing, or with an error posted; the task paused then.
  GstBuffer* acquire();
  // Pushes the buffer a flush or stop held, before anything new: true when there was one.
  bool push_held();
  // Pushes `buf` (taken) on time (see the top of this file). `chunk`: the plan when `buf` is
  // frame `frame`, the first of a chunk, whose lateness a live stream reports (QoS).
  void push_paced(GstBuffer* buf, const Published* chunk = nullptr, int64_t frame = 0,
                  GstClockTimeDiff* ready_late = nullptr);
  // No more data: pauses the task, after an EOS when `eos`.
  void end(bool eos);

  int64_t next = 0;  // the next frame's (video) or sample frame's (audio) index

 private:
  // Pushes `buf` (taken) now; a flush or an error pauses the task.
  void push(GstBuffer* buf);

  GstElement* const element_;
  GstPad* const pad_;
  GstDebugCategory* const category_;
  LivePacer pacer_;  // this stream's is-live: its wait for the clock, its lateness
  const Pushed pushed_;
  bool configured_ = false;       // stream-start, caps, segment and tags went out
  bool need_segment_ = false;     // a flush removed the segment: send it again before data
  bool downstream_done_ = false;  // downstream returned EOS: drain without pushing
  GstBuffer* held_ = nullptr;     // live: the buffer whose wait a flush or stop cut short
  GstBufferPool* pool_ = nullptr;
};

}  // namespace h3gst
