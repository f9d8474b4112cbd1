#include "engine/process/job_channel.h"

#include <utility>

#include "h3/error.h"

namespace h3::engine_detail {

JobChannel::Outcome JobChannel::dispatch(DispatchedJob job, const ProgressFn& progress, ChunkSink& sink,
                                         const GenerateExtras* extras) {
  Outcome o;
  Mailbox mailbox;  // this request's events, and its outcome
  job.mailbox = &mailbox;
  const uint64_t offer = slot_.offer(std::move(job));
  if (offer == 0) return o;
  o.offered = true;
  const Pumped p = pump(mailbox, progress, &sink, extras);
  o.error = p.error;
  o.undelivered = p.undelivered;
  // Rank 0 answers only for a job it took, so nothing is left to take here; withdrawn all the
  // same, so that no job can outlive the call that dispatched it.
  slot_.withdraw(offer);
  return o;
}

JobChannel::Pumped JobChannel::pump(Mailbox& from, const ProgressFn& progress, ChunkSink* sink,
                                    const GenerateExtras* extras) {
  for (;;) {
    Event e = from.take();
    switch (e.kind) {
      case Event::Kind::kProgress:
        // A progress callback is an observer: what it throws does not stop the request.
        if (progress) {
          try {
            progress(e.progress);
          } catch (...) {
          }
        }
        if (e.awaits_answer) from.answer(nullptr);
        break;
      case Event::Kind::kChunk: {
        std::exception_ptr err;
        try {
          if (!sink) throw Error(ErrorKind::kInternal, "a chunk arrived with no sink");
          sink->on_chunk(e.chunk);
        } catch (...) {
          err = std::current_exception();
        }
        e.chunk = Chunk{};  // the sink may keep the tensors; the engine drops its references
        from.answer(err);
        break;
      }
      case Event::Kind::kLatents: {
        std::exception_ptr err;
        try {
          if (extras && extras->on_latents) extras->on_latents(e.video, e.audio);
        } catch (...) {
          err = std::current_exception();
        }
        from.answer(err);
        break;
      }
      case Event::Kind::kCausalHeld:
        // An observer, as a progress callback is.
        if (extras && extras->on_causal_chunk) {
          try {
            extras->on_causal_chunk(e.held);
          } catch (...) {
          }
        }
        break;
      case Event::Kind::kDone: return Pumped{e.error, e.undelivered};
    }
  }
}

void JobChannel::post_progress(const Progress& p) {
  Event e{Event::Kind::kProgress};
  e.progress = p;
  mailbox_.post(std::move(e));
}

void JobChannel::post_done(Mailbox& to, std::exception_ptr err, bool undelivered) {
  Event e{Event::Kind::kDone};
  e.error = std::move(err);
  e.undelivered = undelivered && e.error;
  to.post(std::move(e));
}

bool JobChannel::report_ready(std::exception_ptr err) {
  if (ready_reported_.exchange(true)) return false;
  post_done(mailbox_, std::move(err));
  return true;
}

}  // namespace h3::engine_detail
