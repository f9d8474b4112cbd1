// One generation behind h3videosrc or h3src (owned by their Lifecycle, lifecycle.h): the
// worker thread that finds the engine (the one it holds, a context's, one another element of the
// process opened, or a new one: shared_engine.h), plans the request and runs it as a stream of
// its own on that engine; the frame queue the engine fills (and the audio queue, when the request
// asks for audio); the engine and stream handles; and the lock over them. It knows nothing of the element
// beyond the object and debug category it logs with: what the element must do at each step (post a message,
// complete the async start) comes back through an Observer.
#pragma once

#include <gst/gst.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "audio_queue.h"
#include "boundary/engine_module.h"
#include "frame_queue.h"
#include "shared_engine.h"

namespace h3gst {

class Generation {
 public:
  // Called on the worker thread.
  class Observer {
   public:
    virtual ~Observer() = default;
    // The engine module could not be loaded; `error` says what was tried.
    virtual void module_missing(const std::string& error) = 0;
    // The engine is being opened with `options` (no element of the process has one of its key).
    virtual void opening(const h3::EngineOptions& options) = 0;
    // The engine this generation runs on, found or opened: the element offers it as an
    // "h3.engine" context (not called for an engine that came in a context).
    virtual void have_engine(GstH3Engine* engine) = 0;
    // Opening the engine or planning the request failed; `what` says which.
    virtual void start_failed(const EngineFailure& failure, const char* what) = 0;
    // The engine is open on the model in `model_dir` and the request planned; complete_start()
    // follows unless a stop has begun. False: the stream cannot be marked (its record, the model's
    // hash: stream_record.h); `failure` says why and the start fails.
    virtual bool planned(const h3::ClipPlan& plan, const std::string& model_dir, EngineFailure* failure) = 0;
    // Completes the element's async start: with the plan, or with nullptr after
    // a failure. Called with the generation's lock held, and only while no stop
    // has begun, so that a stop never races the completion.
    virtual void complete_start(const h3::ClipPlan* plan) = 0;
    // The engine's progress, while loading and while generating.
    virtual void progress(const h3::Progress& progress) = 0;
    // The time a chunk took to produce: the engine's decode time (FrameChunk::decode_ns) or,
    // when longer, the time since the previous chunk was taken (its hand-over included: the
    // engine makes the next chunk only after it), never the wait for a full queue.
    virtual void chunk_decoded(std::chrono::nanoseconds time) = 0;
    // On the thread that calls restart(): the cancelled request's worker is joined and the clip
    // is about to be generated again from its first frame.
    virtual void restarting() = 0;
  };

  struct Request {
    std::string plugin_dir;      // where the engine module is looked for
    h3::EngineOptions engine;    // model_dir empty: the module's default model
    h3::GenerationRequest clip;  // 0: the model's default; clip.audio fills the audio queue too
    size_t queue_chunks = 1;     // the frame queue's bound (the audio queue's is one more)
    // queue-chunks=0 on a live stream: the queue holds one chunk and the engine begins each next
    // chunk just in time (just_in_time.h), at `fps_n`/`fps_d` frames a second (0: the plan's).
    bool just_in_time = false;
    int fps_n = 0, fps_d = 1;
    std::string engine_group;  // elements of different groups never share an engine
  };

  // Logs into `category` about `log_object` (the element).
  Generation(Observer& observer, GstDebugCategory* category, GstObject* log_object);
  ~Generation();  // stop()
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Starts the worker: it loads the engine module, opens the engine (or reuses
  // the open one when the options are the same), plans the request, completes
  // the start through the observer and then generates, feeding the queue.
  void start(Request request);
  // Cancels a running request (the engine stops at its next step or chunk
  // boundary, agreed across ranks), joins the worker and empties the queue.
  void stop();
  // A flush: cancels the request once it is planned (before that, nothing was
  // generated yet) and arms a restart: restart_pending() is true until restart().
  void cancel_and_arm_restart();
  bool restart_pending() const { return restart_pending_; }
  // After cancel_and_arm_restart(): joins the cancelled worker and generates the clip again from
  // its first frame (the engine is open and the request planned already).
  void restart();
  // One frame, blocking; see FrameQueue::pop. On kError, `failure` says why.
  FrameQueue::PopResult pop(Frame* frame, EngineFailure* failure);
  // The next stretch of the soundtrack, blocking; see AudioQueue::pop.
  AudioQueue::PopResult pop_audio(AudioSlice* slice, int64_t max_samples, EngineFailure* failure);
  // GstBaseSrc unlock / unlock_stop: see FrameQueue::set_flushing (both queues).
  void set_flushing(bool flushing) {
    queue_.set_flushing(flushing);
    audio_queue_.set_flushing(flushing);
  }
  // Ends the stream early (an EOS event sent to the element), without a restart. A running
  // request is cancelled at its next chunk boundary and both queues end after what was handed
  // over (the engine hands a chunk's audio over right after its frames, so both pads end at the
  // same chunk); before the request runs, both queues end at once. stop() joins the worker later.
  void end();
  // A new prompt for the running causal request from its first chunk at or after `at_seconds`
  // (0: the chunk being made, made again, or the next: docs/causal.md); ignored unless a request
  // runs.
  void change_prompt(const std::string& prompt, double at_seconds);
  // New forwards per chunk for the running causal request from its next chunk boundary; ignored
  // unless a request runs.
  void change_steps(int64_t steps);
  // Lets go of the engine (the last one to let go closes it: joins its rank threads). Only after
  // stop().
  void close_engine();
  // An "h3.engine" context's engine (or nullptr): the next start uses it when its key is this
  // generation's. Takes a reference.
  void offer_engine(GstH3Engine* engine);
  bool has_offered_engine();
  // The engine held now (a new reference), or nullptr.
  GstH3Engine* engine();
  // Another element plays on the engine this generation holds: its options cannot change now.
  int others_started_on_engine();

 private:
  void worker_main();
  bool open_engine(const EngineModule& module, EngineFailure* failure);
  void release_engine();  // under mutex_
  void fail_start(const EngineFailure& failure, const char* what);
  // Under the lock: tells the observer unless a stop has begun; false if it has.
  bool complete_start(const h3::ClipPlan* plan);
  void run();
  // queue-chunks=0: holds the engine (on the hand-over that ends a chunk) until `until`, or until
  // wake_hold() was called since the last hold ended.
  void hold(std::chrono::steady_clock::time_point until);
  // A prompt change (the engine should take it now and encode it in time), a stop or an end:
  // the engine held for just in time goes on at once.
  void wake_hold();
  std::chrono::steady_clock::duration frame_duration() const;

  Observer& observer_;
  GstDebugCategory* const category_;
  GstObject* const log_object_;
  Request request_;  // written by start() before the worker exists; read-only after
  // The engine's plan of request_.clip: written by the worker before the start completes,
  // handed back to the engine by every run (restarts too), so it is planned once.
  h3::ClipPlan plan_{};
  std::string model_dir_;  // the model folder the engine opened (the module's default resolved); the worker's

  // Guards `stopping_`, `generating_`, `planned_`, `ending_` and the engine's references: the worker
  // completes the start and begins generating only while `stopping_` is false, and stop() and
  // cancel_and_arm_restart() cancel the engine only while `generating_`. Taken before
  // the pad's stream lock (the lock order: docs/element.md, "Locks").
  std::mutex mutex_;
  bool stopping_ = false;
  bool generating_ = false;
  bool planned_ = false;
  bool ending_ = false;  // end() was called: a cancelled request finishes the queues

  std::thread worker_;
  FrameQueue queue_{1};
  // The engine hands a chunk's frames over before it decodes the chunk's audio, and the
  // audio queue holds one stretch more than the frame queue holds chunks: when the engine
  // waits to push chunk k's frames, every stretch before k is queued, so a consumer that
  // waits for both pads in timestamp order (a muxer) cannot deadlock the engine
  // (docs/element.md, h3src).
  AudioQueue audio_queue_{2};
  std::atomic<bool> restart_pending_{false};
  // The just-in-time hold's wake-up (hold(), wake_hold()); a lock of its own, taken alone.
  std::mutex hold_mutex_;
  std::condition_variable hold_woken_;
  bool hold_wake_ = false;

  // Held across stop() and start() while the key stays the same, under mutex_: set by the worker,
  // let go by close_engine() once no worker runs. The stream is this generation's own on it.
  GstH3Engine* engine_ = nullptr;
  std::unique_ptr<EngineStream> stream_;
  bool started_on_engine_ = false;  // counted in the engine's started elements
  GstH3Engine* offered_ = nullptr;  // a context's engine, for the next open
};

}  // namespace h3gst
