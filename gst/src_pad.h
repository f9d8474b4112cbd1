// One of h3src's source pads, pushed by a task of its own: the stream it starts (stream-start
// in the element's group, the negotiated caps, a TIME segment from 0, the clip's tags), its
// buffer pool (downstream's, or one of its own), and pushing: a downstream that is done (EOS) or
// not linked is drained rather than failed, so that the engine, and with it the other pad, is
// never held back by a pad nobody reads. The pad's task only, and the state changes while no task
// runs.
#pragma once

#include <gst/gst.h>

#include <cstdint>

namespace h3gst {

class SrcPad {
 public:
  // Logs into `category`, the element's.
  SrcPad(GstElement* element, GstPad* pad, GstDebugCategory* category)
      : element_(element), pad_(pad), category_(category) {}
  ~SrcPad() { release_pool(); }
  SrcPad(const SrcPad&) = delete;
  SrcPad& operator=(const SrcPad&) = delete;

  GstPad* pad() const { return pad_; }
  // A new stream (READY -> PAUSED; the pool was released at stop).
  void reset();
  // A flush generates the clip again: the stream starts over, and its segment is sent again.
  void restart();
  void release_pool();

  bool configured() const { return configured_; }
  // Downstream's caps among `offered` (taken), fixated by `fixate`; nullptr (and an error posted)
  // when there are none.
  GstCaps* negotiate(GstCaps* offered, void (*fixate)(GstCaps* caps, const void* data), const void* data);
  // stream-start (group `group_id`), `caps`, the segment, `tags` (taken) and a pool of buffers of
  // `size` bytes (a video pool with `video`). False: a flush since the task's first data (it pauses
  // and configures again after flush-stop), or an error (posted).
  bool begin(GstCaps* caps, guint group_id, GstTagList* tags, guint size, bool video);

  // A buffer from the pool; nullptr when flushing, or with an error posted; the task paused then.
  GstBuffer* acquire();
  // Pushes `buf` (taken): see the top of this file; a flush or an error pauses the task.
  void push(GstBuffer* buf);
  // No more data: pauses the task, after an EOS when `eos`.
  void end(bool eos);

  int64_t next = 0;  // the next frame's (video) or sample frame's (audio) index

 private:
  GstElement* const element_;
  GstPad* const pad_;
  GstDebugCategory* const category_;
  bool configured_ = false;       // stream-start, caps, segment and tags went out
  bool need_segment_ = false;     // a flush removed the segment: send it again before data
  bool downstream_done_ = false;  // downstream returned EOS: drain without pushing
  GstBufferPool* pool_ = nullptr;
};

}  // namespace h3gst
