#include "engine/process/rank_server.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "common/cpu_block_cache.h"
#include "dist/agree.h"
#include "dit/frames.h"
#include "engine/model/compute_dtype.h"
#include "engine/planning/request_lora.h"
#include "engine/process/job.h"
#include "engine/scheduler/scheduler.h"
#include "engine/scheduler/session.h"
#include "engine/stages/stage_causal.h"
#include "engine/stages/stage_conditioning.h"
#include "engine/stages/stage_decode.h"
#include "engine/stages/stage_denoise.h"
#include "engine/stages/stage_keyframes.h"
#include "engine/stages/stage_memory.h"
#include "engine/stages/stage_sounds.h"
#include "h3/error.h"
#include "vae/cpu_threads.h"

namespace h3::engine_detail {
std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

namespace {

Progress loading_progress(int64_t part, int64_t parts, double elapsed_s) {
  Progress p{Phase::kLoading};
  p.step = part;
  p.total_steps = parts;
  p.elapsed_s = elapsed_s;
  return p;
}

}  // namespace

void WorldHealth::mark_broken(const std::string& why) {
  std::lock_guard<std::mutex> lk(m_);
  if (broken_.empty()) broken_ = why;
}

std::string WorldHealth::broken_reason() const {
  std::lock_guard<std::mutex> lk(m_);
  return broken_;
}

void WorldHealth::clear_broken() {
  std::lock_guard<std::mutex> lk(m_);
  broken_.clear();
}

RankServer::RankServer(const ModelInfo& model, RankSetup setup, JobChannel& channel)
    : model_(model),
      setup_(std::move(setup)),
      channel_(channel),
      budget_(setup_.max_memory, available_memory_bytes) {
  install_cpu_block_cache();
}

void RankServer::choose_process_threads(dist::Group& g) {
  // Each process of the world chooses for itself: the ranks on its cores (a collective, the
  // first of the world) and the cores it may use. The bits do not depend on the choice
  // (common/parallel_tasks.h), the speed does: two processes on two cores that both ran two
  // threads took 13x the time of two thread ranks.
  const UsableCores cores = usable_cores();
  const int sharing = ranks_sharing_cores(g);
  const int n = setup_.cpu_threads > 0 ? setup_.cpu_threads : threads_per_rank(cores.count(), sharing);
  vae::set_cpu_threads(n);
  threads_ = n;
  if (setup_.announce_threads) setup_.announce_threads(n, cores, sharing);
}

RankServer::Ended RankServer::run(dist::Group& g, std::exception_ptr* own_load_error) {
  const bool root = g.rank() == 0;
  if (g.size() > 1 && setup_.thread_ranks) {
    // Ranks share this host's cores: each takes its share, or every rank's GEMMs would fan
    // out over every core and contend (OpenBLAS's pool is process-wide; see vae/cpu_threads.h).
    vae::set_cpu_threads(cpu_threads_per_thread_rank(g.size()));
  }
  RankParts local;
  RankParts& parts = setup_.thread_ranks ? local : kept_;
  const auto t0 = Clock::now();
  dist::LocalFailure f;
  // Whether a failure is this rank's own load (fatal for a worker) or the world breaking under
  // the first collective (rank 0 killed as the world formed): a worker waits for the next world.
  bool loading = false;
  try {
    if (!setup_.thread_ranks) choose_process_threads(g);
    loading = true;
    if (!setup_.thread_ranks && kept_.dit) {
      // A survivor of the last world: its parts run on the new group. A restarted rank loads.
      parts.dit->use_group(&g);
      if (parts.prompt) parts.prompt->use_group(&g);
      if (parts.vision) parts.vision->use_group(&g);
    } else {
      load_parts(g, parts, t0);
    }
  } catch (...) {
    f.capture();
    if (!setup_.thread_ranks) kept_ = RankParts{};  // half-loaded parts are not kept
  }
  try {
    dist::agree_or_throw(g, f);
  } catch (...) {
    // Before the caller hears of it: a process world's next request forms the world again.
    if (!setup_.thread_ranks) {
      health_.mark_broken((f && !loading ? "the ranks lost each other as the world formed: "
                                         : "a rank failed to load its shards: ") +
                          message_of(std::current_exception()));
    }
    if (root) channel_.report_ready(std::current_exception());
    if (own_load_error && f && loading) *own_load_error = f.exception;
    return Ended::kLoadFailed;
  }
  if (root) {
    load_s_ = seconds_since(t0);
    resident_ = ResidentWeights{};
    for (const auto& [name, t] : parts.dit->weights().named())
      resident_.transformer[c10::toString(t.scalar_type())] += static_cast<int64_t>(t.nbytes());
    if (parts.prompt) {
      for (const auto& [name, t] : parts.prompt->encoder().named())
        resident_.text_encoder[c10::toString(t.scalar_type())] += static_cast<int64_t>(t.nbytes());
    }
    channel_.slot().open_for_jobs();  // before the caller hears that the world is ready
    channel_.report_ready(nullptr);
  }
  const bool stopped = serve(g, parts);
  if (root) {
    // Jobs offered after the last one was taken, which this world will never run: their callers
    // get the group's failure (and a process world forms again for them).
    for (DispatchedJob& orphan : channel_.slot().close_for_jobs()) {
      JobChannel::post_done(
          *orphan.mailbox,
          std::make_exception_ptr(Error(
              ErrorKind::kDistributed,
              "the ranks lost each other before the request reached them (" + health_.broken_reason() + ")")),
          /*undelivered=*/!setup_.thread_ranks);
    }
  }
  return stopped ? Ended::kStopped : Ended::kBroken;
}

void RankServer::load_parts(dist::Group& g, RankParts& parts, Clock::time_point t0) {
  const bool root = g.rank() == 0;
  const int64_t n = model_.prompt_encoder ? 3 : 2;
  if (root) channel_.post_progress(loading_progress(0, n, 0.0));
  // device=cuda: rank r runs on cuda:r (Engine::open checked that enough GPUs are visible).
  const c10::Device device =
      setup_.device == "cuda"
          ? c10::Device(c10::kCUDA,
                        static_cast<c10::DeviceIndex>(setup_.cuda_index >= 0 ? setup_.cuda_index : g.rank()))
          : c10::Device(c10::kCPU);
  const at::ScalarType dtype = compute_scalar_type(setup_.compute_dtype);
  if (root && dtype == at::kBFloat16 && !device.is_cuda()) note_emulated_bf16();
  dit::TransformerOptions to;
  to.device = device;
  to.dtype = dtype;
  to.sp = setup_.sp;
  parts.dit.emplace(dit::Transformer::load(model_.transformer_dir, &g, to));
  if (root) channel_.post_progress(loading_progress(1, n, seconds_since(t0)));
  parts.vae.emplace(vae::VideoDecoder::load(model_.vae_dir).to(device));
  if (root) channel_.post_progress(loading_progress(2, n, seconds_since(t0)));
  if (model_.prompt_encoder) {
    text::EncoderOptions eo;
    eo.device = device;
    eo.dtype = dtype;
    parts.prompt.emplace(text::PromptEncoder::load(model_.dir, 0, &g, eo));
    const int64_t width = parts.prompt->encoder().width();
    if (width != model_.dit.text_dim) {
      throw Error(ErrorKind::kMismatch,
                  model_.text_encoder_dir + ": the text encoder makes " + std::to_string(width) +
                      "-wide rows but the transformer takes text_dim " + std::to_string(model_.dit.text_dim));
    }
    if (root) channel_.post_progress(loading_progress(3, n, seconds_since(t0)));
  }
}

// Serves rank 0's jobs until rank 0 says stop (true) or the group broke (false). Every rank
// learns what comes next — a job to admit, which session takes the next turn — from rank 0's
// broadcast, threads and processes alike; while rank 0 waits for a caller (a new request, or an
// answer to a hand-over), the peers wait for it without the collective timeout, as long as rank 0
// shows that it is alive (Group::run_on_owner).
bool RankServer::serve(dist::Group& g, RankParts& parts) {
  const bool root = g.rank() == 0;
  // A session runs with the rank's intra-op threads (set on this thread by run()).
  const int cpu_threads = at::get_num_threads();
  // Rank 0 works between its run_on_owner calls while its peers wait for it in the next one (its
  // owner turns, whose hand-overs go on past them): it shows that it is alive throughout.
  const std::unique_ptr<dist::Group::AliveBeat> alive = root ? g.show_alive() : nullptr;
  RankSessions shared;
  Sessions sessions;
  for (;;) {
    // Rank 0: a job a caller waits for, taken out of the slot with its token and mailbox.
    std::optional<DispatchedJob> admitted;
    TurnMessage turn;
    bool delivered = false;  // every rank has the turn: what fails from here on is a request's
    try {
      std::string wire;
      g.run_on_owner(
          0,
          [&] {
            if (!root) return;
            wire = encode(next_turn_on_root(sessions, admitted));
          },
          "waiting for rank 0's next turn");
      turn = decode_turn(g.broadcast_string(wire, 0));
      delivered = true;
      switch (turn.kind) {
        case TurnMessage::Kind::kStop:
          if (!sessions.empty()) {
            throw Error(ErrorKind::kInternal,
                        "rank 0 stopped with " + std::to_string(sessions.size()) + " request(s) in flight");
          }
          return true;
        case TurnMessage::Kind::kAdmit: {
          const uint64_t id = turn.session;
          // In its place first: the session's thread reads the job and the hand-over from there.
          const auto it = sessions.emplace(id, InFlight{}).first;
          InFlight& f = it->second;
          f.job = std::make_unique<Job>(std::move(turn.job));
          f.mine = std::move(admitted);
          admitted.reset();
          const Job* job = f.job.get();
          const DispatchedJob* mine = f.mine ? &*f.mine : nullptr;
          f.session = std::make_unique<Session>(
              id, [this, &g, &parts, &shared, id, job, mine] { run_job(g, parts, shared, id, *job, mine); },
              cpu_threads);
          if (mine) {
            f.live = job->plan.sampler == Sampler::kCausal;
            f.admitted = id;
            f.admitted_s = seconds_since(epoch_);
            mine->mailbox->set_waiter(f.session.get());
            JobSlot& slot = channel_.slot();
            mine->mailbox->set_answer_listener([&slot] { slot.ring(); });
          }
          take_turn(g, sessions, it, Session::Resume{});
          break;
        }
        case TurnMessage::Kind::kResume: {
          const auto it = sessions.find(turn.session);
          if (it == sessions.end()) {
            throw Error(ErrorKind::kInternal, "rank " + std::to_string(g.rank()) + " has no session " +
                                                  std::to_string(turn.session) + " to give a turn to");
          }
          // A peer waiting for rank 0's owner turn has nothing to do until it ends.
          if (!root && !turn.owner_turn_done && it->second.session->parked() == Session::Parked::kOwnerWait)
            break;
          Session::Resume r;
          r.owner_turn_done = turn.owner_turn_done;
          take_turn(g, sessions, it, r);
          break;
        }
      }
      // A request's collective found the ranks lost (take_turn kept why): the others end too.
      if (g.broken()) throw Error(ErrorKind::kDistributed, health_.broken_reason());
    } catch (...) {
      const std::exception_ptr e = std::current_exception();
      std::string why = message_of(e);
      if (!g.broken()) {
        // Not a request's own failure (those end their session): the turns went out of step.
        g.report_failure(why);
      }
      // The ranks lost each other: this group cannot serve any more. Marked before any caller
      // hears of the failure, so that its next request sees it.
      health_.mark_broken(why);
      why = health_.broken_reason();
      if (root && admitted) {
        JobChannel::post_done(*admitted->mailbox, e, /*undelivered=*/!delivered && !setup_.thread_ranks);
      }
      end_all(sessions, why, root);
      return false;
    }
  }
}

TurnMessage RankServer::next_turn_on_root(Sessions& sessions, std::optional<DispatchedJob>& admitted) {
  JobSlot& slot = channel_.slot();
  const auto answered = [&] {
    for (const auto& [id, f] : sessions) {
      if (f.session->parked() == Session::Parked::kAwaitingCaller && f.mine->mailbox->answered()) return true;
    }
    return false;
  };
  for (;;) {
    std::vector<SessionView> views;
    views.reserve(sessions.size());
    for (const auto& [id, f] : sessions) {
      SessionView v;
      v.id = id;
      v.live = f.live;
      v.admitted = f.admitted;
      v.last_turn = f.last_turn;
      const Session& s = *f.session;
      v.deadline_s = live_deadline(f.admitted_s, s.chunks_handed_over(),
                                   std::chrono::duration<double>(s.first_hand_over() - epoch_).count());
      switch (s.parked()) {
        case Session::Parked::kOwnerDone: v.state = SessionView::State::kOwnerDone; break;
        case Session::Parked::kAwaitingCaller:
          v.state =
              f.mine->mailbox->answered() ? SessionView::State::kReady : SessionView::State::kAwaitingCaller;
          break;
        default:
          throw Error(ErrorKind::kInternal,
                      "rank 0's session " + std::to_string(id) + " is parked where only a peer's is");
      }
      views.push_back(v);
    }
    const Turn t = next_turn(views, slot.pending(), slot.closed(), seconds_since(epoch_));
    TurnMessage m;
    m.session = t.session;
    m.owner_turn_done = t.owner_turn_done;
    switch (t.kind) {
      case Turn::Kind::kStop: m.kind = TurnMessage::Kind::kStop; return m;
      case Turn::Kind::kResume: m.kind = TurnMessage::Kind::kResume; return m;
      case Turn::Kind::kAdmit:
        admitted = slot.take();
        if (!admitted) continue;  // withdrawn since, or the engine closed
        m.kind = TurnMessage::Kind::kAdmit;
        m.session = ++sessions_admitted_;
        m.job = admitted->job;
        return m;
      case Turn::Kind::kWait:
        slot.wait_for_work([&](size_t pending, bool closed) {
          return (pending > 0 && !closed) || (closed && sessions.empty()) || answered();
        });
        break;
    }
  }
}

void RankServer::take_turn(dist::Group& g, Sessions& sessions, Sessions::iterator it,
                           const Session::Resume& r) {
  InFlight& f = it->second;
  if (f.mine) f.last_turn = ++turns_;
  if (f.session->resume(r) != Session::Parked::kEnded) return;
  const std::exception_ptr outcome = f.session->outcome();
  // Before its caller hears of it, so that the caller's next request finds the world broken.
  if (g.broken()) health_.mark_broken(outcome ? message_of(outcome) : "the ranks lost each other");
  Mailbox* to = f.mine ? f.mine->mailbox : nullptr;
  sessions.erase(it);  // joins its thread
  if (to) JobChannel::post_done(*to, outcome);
}

void RankServer::end_all(Sessions& sessions, const std::string& reason, bool root) {
  Session::Resume abort;
  abort.abort = true;
  abort.abort_reason = reason;
  while (!sessions.empty()) {
    const auto it = sessions.begin();
    if (!it->second.session) {  // its admission failed before it had a thread
      Mailbox* to = root && it->second.mine ? it->second.mine->mailbox : nullptr;
      sessions.erase(it);
      if (to) JobChannel::post_done(*to, std::make_exception_ptr(Error(ErrorKind::kDistributed, reason)));
      continue;
    }
    if (it->second.session->resume(abort) != Session::Parked::kEnded) {
      // An aborted session throws at every wait until it ends: it cannot park again.
      std::terminate();
    }
    Mailbox* to = root ? it->second.mine->mailbox : nullptr;
    const std::exception_ptr outcome = it->second.session->outcome();
    sessions.erase(it);
    if (to) JobChannel::post_done(*to, outcome);
  }
}

// Every rank: rank 0's job, then its stages in order. `mine`: on rank 0, what its caller
// handed over with the job (token, latents, start); null on the other ranks.
void RankServer::run_job(dist::Group& g, RankParts& parts, RankSessions& shared, uint64_t session,
                         const Job& j, const DispatchedJob* mine) {
  const bool root = g.rank() == 0;
  if (root && (!mine || !mine->cancel || !mine->mailbox)) {
    throw Error(ErrorKind::kInternal, "rank 0 was given a job without its caller's cancel token and mailbox");
  }
  // The request is one of the rank's sessions until it ends, however it ends, on every rank alike.
  struct InShared {
    RankSessions& s;
    uint64_t id;
    InShared(RankSessions& shared, uint64_t session) : s(shared), id(session) { ++s.running; }
    ~InShared() {
      --s.running;
      s.adaln_sets.erase(id);
    }
  } in_shared(shared, session);
  const ClipPlan& p = j.plan;
  const StreamControl& token = mine ? *mine->cancel : no_cancel_;
  const Clock::time_point start = mine ? mine->start : Clock::now();
  const at::Tensor latents = mine ? mine->decode_latents : at::Tensor();
  const StageContext c{g,     model_, parts, shared, session, mine ? *mine->mailbox : no_caller_,
                       token, p,      start};
  // The DiT's blocks kept between its steps (common/cpu_block_cache.h) go back to the system
  // when the request ends, however it ends.
  struct ReleaseAtEnd {
    ~ReleaseAtEnd() { release_cpu_block_cache(); }
  } release_at_end;
  at::Tensor video, audio;
  StreamBudget::Reservation own_share;  // a process world's peer: this request's share of its memory
  if (j.kind == Job::Kind::kGenerate) {
    // A process world's peers are their own processes, maybe on hosts with less memory than
    // rank 0's, which Engine::plan checked: each checks its own share before anything is read.
    if (!setup_.thread_ranks) {
      const MemoryShape one =
          memory_shape_of(1, g.size(), setup_.sp, setup_.compute_dtype, setup_.device, at::get_num_threads());
      own_share = peer_memory_stage(c, j.request, one, setup_.max_memory, budget_);
    }
    // Before any work, so that a model without audio_vae/ fails at once.
    if (j.request.audio) load_audio_decoder(c);
    adapter_stage(c, request_lora(model_, j.request));  // the request's, or the model's causal adapter
    // FL2VA: the keyframes onto the canvas, then what the text encoder sees of them (unless the
    // prompt comes as embeddings) and their latents.
    const KeyframePictures pictures = keyframe_pictures_stage(c, mine ? &mine->job.request : nullptr);
    KeyframeVision vision;
    if (!pictures.empty() && parts.prompt && j.request.embeds_path.empty()) {
      vision = keyframe_vision_stage(c, pictures);
    }
    const text::Conditioning cond =
        conditioning_stage(c, j.request, j.free_text_encoder, vision.features.empty() ? nullptr : &vision);
    // free_text_encoder drops the vision tower with the text encoder (the next keyframes read it again).
    if (j.free_text_encoder) parts.vision.reset();
    const std::vector<at::Tensor> keyframes = keyframe_latents_stage(c, pictures);
    // Ref2VA: the references' sound, encoded on rank 0.
    const std::vector<at::Tensor> sounds = reference_sounds_stage(c, mine ? &mine->job.request : nullptr);
    if (p.sampler == Sampler::kCausal) {
      // Synthesis and decode interleave chunk by chunk.
      causal_stage(c, j, cond);
      if (root) c.post_progress(Phase::kDone, p.evaluations, p.evaluations, p.total_chunks, p.num_frames);
      return;
    }
    dit::Latents x = denoise_stage(c, j, cond, keyframes, pictures.anchors, sounds);
    video = std::move(x.video);
    if (j.request.audio) audio = std::move(x.audio);
  } else {
    const int64_t h = p.canvas_height / dit::kVaeSpatialRatio, w = p.canvas_width / dit::kVaeSpatialRatio;
    video = root ? latents.to(at::kCPU, at::kFloat).contiguous()
                 : at::empty({1, model_.vae.latent_channels, p.latent_frames, h, w}, at::kFloat);
    g.broadcast(video, 0);
  }
  decode_stage(c, video, audio);
  if (root) {
    const int64_t steps = j.kind == Job::Kind::kGenerate ? p.evaluations : 0;
    c.post_progress(Phase::kDone, steps, steps, p.total_chunks, p.num_frames);
  }
}

}  // namespace h3::engine_detail
