// Ranks in other processes (docs/distributed.md): `h3 worker`s joined through rank 0's door.
// Every test starts its workers as child processes of the `h3` binary and asserts each
// process's exit status. Rank 0 is this test process (the Engine API) or `h3 generate`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dit/config.h"
#include "dit/random_model.h"
#include "engine/planning/memory_guard.h"
#include "engine/planning/plan.h"
#include "engine/process/rank_threads.h"
#include "process_world_test_util.h"

namespace h3 {
namespace {
using namespace process_world_test;
using ::testing::HasSubstr;

TEST(ProcessWorld, AWorkerProcessGivesTheFramesOfTwoThreadRanksAndExitsZeroAtStop) {
  World w;
  Child worker = w.worker("w1");
  at::Tensor frames;
  {
    auto e = Engine::open(w.rank0());
    frames = generate_frames(*e);
    // A second request on the same world.
    EXPECT_TRUE(at::equal(generate_frames(*e), frames));
  }  // rank 0 closes: it tells the worker to stop
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("rank 0 said stop"));
  EXPECT_TRUE(at::equal(frames, thread_rank_frames())) << "process ranks and thread ranks disagree";
  // Rank 0 (this process) and the worker run on the same cores: each takes half of them, as two
  // thread ranks do, whatever OMP_NUM_THREADS says, and the worker says so when it joins.
  const engine_detail::UsableCores cores = engine_detail::usable_cores();
  EXPECT_THAT(worker.output(),
              HasSubstr("h3 worker: rank 1: " +
                        engine_detail::describe_rank_threads(
                            engine_detail::threads_per_rank(cores.count(), 2), cores, 2, false) +
                        "\n"));
}

TEST(ProcessWorld, AnFl2vaRequestsKeyframesReachTheWorkerAndGiveTheThreadRanksClip) {
  // The pictures never travel in the job: rank 0 puts them onto the canvas and broadcasts the
  // pixels; the worker runs its shards of the vision tower and its tiles of the VAE encoder.
  const std::string model = test::conditioning_model_dir();
  GenerationRequest r = small_request();
  r.width = r.height = 0;  // the canvas of the picture's aspect
  Picture first{"gradient", 96, 72, std::vector<uint8_t>(96 * 72 * 3)};
  for (size_t i = 0; i < first.rgb.size(); ++i) first.rgb[i] = static_cast<uint8_t>((i * 7 + i / 288) % 251);
  r.first_frame = first;
  const auto clip = [&](const EngineOptions& o) {
    auto e = Engine::open(o);
    return test::generate_clip(*e, r);
  };
  World w;
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--model", model});
  Child worker = Child::start(args, w.dir / "w1.log");
  EngineOptions o = w.rank0();
  o.model_dir = model;
  const test::Clip processes = clip(o);
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  EngineOptions threads;
  threads.model_dir = model;
  threads.ranks = 2;
  const test::Clip thread_ranks = clip(threads);
  EXPECT_EQ(processes.frames.sizes(), thread_ranks.frames.sizes());
  EXPECT_TRUE(at::equal(processes.video, thread_ranks.video));
  EXPECT_TRUE(at::equal(processes.frames, thread_ranks.frames));
}

TEST(ProcessWorld, H3GenerateAsRankZeroWritesTheSameClipAsThreadRanks) {
  World w;
  const std::vector<std::string> common{"--prompt", "a clip",   "--width", "80",      "--height",
                                        "48",       "--frames", "30",      "--steps", "3",
                                        "--seed",   "9",        "--quiet"};
  auto args = [&](std::vector<std::string> extra, const fs::path& out) {
    std::vector<std::string> a{"generate", "--out", out.string()};
    a.insert(a.end(), common.begin(), common.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Child threads = Child::start(args({"--ranks", "2"}, w.dir / "threads.y4m"), w.dir / "threads.log");
  ASSERT_TRUE(exited_with(threads.wait(), 0)) << threads.output();
  Child worker = Child::start(w.worker_args(), w.dir / "worker.log");  // before rank 0: it waits
  Child rank0 = Child::start(
      args({"--rendezvous", w.address(), "--world-size", "2", "--token-file", w.token, "--timeout", "20"},
           w.dir / "procs.y4m"),
      w.dir / "rank0.log");
  EXPECT_TRUE(exited_with(rank0.wait(), 0)) << rank0.output();
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
  const std::string a = read_file(w.dir / "threads.y4m"), b = read_file(w.dir / "procs.y4m");
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "the clips differ (" << a.size() << " and " << b.size() << " bytes)";
}

// A worker SIGKILLed in `phase`: the request fails with a clear error naming the lost peer
// (no hang), and after the worker is restarted the next request on the same engine works.
void kill_worker_during(Phase phase) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  bool killed = false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    generate_frames(*e, [&](const Progress& p) {
      if (!killed && p.phase == phase && (phase != Phase::kDenoising || p.step >= 1)) {
        kill(worker.pid, SIGKILL);
        killed = true;
      }
    });
    ADD_FAILURE() << "the request survived its worker's death";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kDistributed) << err.what();
    EXPECT_THAT(err.what(), HasSubstr("rank 1 is gone: ")) << err.what();
    std::printf("rank 0's error: %s\n", err.what());
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("request failed %.2f s after it started (timeout %lld s)\n", waited,
              static_cast<long long>(w.timeout.count()));
  ASSERT_TRUE(killed);
  const int st = worker.wait();
  EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  Child again = w.worker("again");
  EXPECT_TRUE(at::equal(generate_frames(*e), thread_rank_frames()));
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

// After a lost worker, only the restarted one loads: rank 0 keeps its shards (the same rank of a
// world of the same size), so the next request reports no loading and gives the same frames.
// Each worker checks its own host's memory (docs/engine.md, "Memory guard"): with --max-memory
// between a small request's share and a large one's, the large request fails on every rank
// before any work, as kOutOfMemory naming rank 1, its host and its limit, and the same world
// then serves the small one with the thread ranks' frames.
TEST(ProcessWorld, AWorkerWhoseHostCannotHoldTheRequestFailsItBeforeAnyWorkAndTheNextIsServed) {
  const ModelInfo m = read_model(default_model_dir());
  MemoryShape one_of_two;
  one_of_two.tp = 2;
  GenerationRequest large = small_request();
  large.width = 512;
  large.height = 320;
  large.num_frames = 200;
  const int64_t small_share = estimate_request_memory(m, make_plan(m, small_request()), one_of_two).peak();
  const int64_t large_share = estimate_request_memory(m, make_plan(m, large), one_of_two).peak();
  ASSERT_GT(large_share, 2 * small_share);
  const int64_t limit = (small_share + large_share) / 2;

  World w;
  Child worker = w.waiting_worker("w1", 1, "", {"--max-memory", std::to_string(limit)});
  auto e = Engine::open(w.rank0());
  test::CollectSink sink;
  StreamControl cancel;
  int work_reports = 0;
  try {
    e->generate(
        large, sink,
        [&](const Progress& p) {
          if (p.phase == Phase::kDenoising || p.phase == Phase::kDecoding) ++work_reports;
        },
        cancel);
    ADD_FAILURE() << "the worker's limit did not refuse the request";
  } catch (const Error& x) {
    std::printf("the refusal: %s\n", x.what());
    EXPECT_EQ(x.kind(), ErrorKind::kOutOfMemory) << x.what();
    EXPECT_THAT(x.what(), HasSubstr("rank 1 on "));
    EXPECT_THAT(x.what(), HasSubstr("is the max-memory limit"));
    EXPECT_THAT(x.what(), HasSubstr("512x320, 200 frames"));
  }
  EXPECT_EQ(work_reports, 0);
  EXPECT_TRUE(sink.chunks.empty());
  EXPECT_TRUE(at::equal(generate_frames(*e), thread_rank_frames()));
  e.reset();
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
}

TEST(ProcessWorld, RankZeroKeepsItsShardsWhenTheWorldFormsAgain) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  const at::Tensor frames = generate_frames(*e);
  bool killed = false;
  EXPECT_THROW(generate_frames(*e,
                               [&](const Progress& p) {
                                 if (!killed && p.phase == Phase::kDenoising && p.step >= 1) {
                                   kill(worker.pid, SIGKILL);
                                   killed = true;
                                 }
                               }),
               Error);
  ASSERT_TRUE(killed);
  worker.wait();

  Child again = w.worker("again");
  int loading_reports = 0;
  const at::Tensor next = generate_frames(*e, [&](const Progress& p) {
    if (p.phase == Phase::kLoading) ++loading_reports;
  });
  EXPECT_EQ(loading_reports, 0) << "rank 0 loaded its parts again";
  EXPECT_TRUE(at::equal(next, frames));
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

// The causal sampler with a LoRA over a worker process (docs/causal.md): the worker attaches the
// same file to its shards and the clip is the thread ranks'; a worker killed inside a chunk fails
// the request naming the chunk, and the restarted one serves the next.
TEST(ProcessWorld, ACausalClipWithALoraIsTheThreadRanksAndAWorkerKilledInAChunkIsNamed) {
  World w;
  const std::string lora = w.dir / "lora";
  dit::write_random_lora(lora, dit::DitConfig::load(default_model_dir() + "/transformer"), 4, 8.0, 3);
  GenerationRequest r = small_request();  // 30 frames: generated as 39, three chunks
  r.sampler = Sampler::kCausal;
  r.steps = 0;
  r.lora = lora;
  auto frames_of = [&](Engine& e, const ProgressFn& progress) {
    test::CollectSink sink;
    StreamControl cancel;
    e.generate(r, sink, progress, cancel);
    return sink.all();
  };
  const at::Tensor threads = frames_of(*test::open_tiny(2), {});
  // The worker at another intra-op thread count than the thread ranks (which share this host's
  // cores): the bits do not depend on it (docs/dit.md, "Linears").
  const int other = engine_detail::cpu_threads_per_thread_rank(2) + 1;
  Child worker = w.worker("first", 1, "", {"--threads", std::to_string(other)});
  auto e = Engine::open(w.rank0());
  EXPECT_TRUE(at::equal(frames_of(*e, {}), threads)) << "process ranks and thread ranks disagree";
  EXPECT_THAT(worker.output(),
              HasSubstr("h3 worker: rank 1: " + std::to_string(other) + " intra-op threads (as asked; "));
  bool killed = false;
  try {
    frames_of(*e, [&](const Progress& p) {
      if (!killed && p.phase == Phase::kDenoising && p.step == 6) {  // chunk 2's second step
        kill(worker.pid, SIGKILL);
        killed = true;
      }
    });
    ADD_FAILURE() << "the request survived its worker's death";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kDistributed) << err.what();
    EXPECT_THAT(err.what(), HasSubstr("causal chunk 2 of 3")) << err.what();
  }
  ASSERT_TRUE(killed);
  worker.wait();
  Child again = w.worker("again");
  EXPECT_TRUE(at::equal(frames_of(*e, {}), threads));
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

TEST(ProcessWorld, AWorkerKilledMidDenoiseFailsTheRequestAndARestartedOneServesTheNext) {
  kill_worker_during(Phase::kDenoising);
}

TEST(ProcessWorld, AWorkerKilledMidDecodeFailsTheRequestAndARestartedOneServesTheNext) {
  kill_worker_during(Phase::kDecoding);
}

// A worker that dies while the world is idle: the next request's own broadcast finds it out
// before any of the request ran, so rank 0 forms the world again with the restarted worker and
// serves the request instead of failing it.
TEST(ProcessWorld, AWorkerKilledWhileIdleIsReplacedWithoutFailingTheNextRequest) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  const at::Tensor frames = generate_frames(*e);
  kill(worker.pid, SIGKILL);
  const int st = worker.wait();
  EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  Child again = w.worker("again");
  at::Tensor next;
  try {
    next = generate_frames(*e);
  } catch (const Error& err) {
    FAIL() << "the request after an idle worker's death failed: " << err.what();
  }
  EXPECT_TRUE(at::equal(next, frames));
  EXPECT_TRUE(at::equal(generate_frames(*e), frames));  // and the world serves on
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

TEST(ProcessWorld, RankZeroNamesTheRankThatNeverArrived) {
  World w{kFormingFailsTimeout};
  try {
    Engine::open(w.rank0());
    FAIL() << "opened without its worker";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDistributed);
    EXPECT_THAT(e.what(), HasSubstr("rank 1 never arrived at the rendezvous " + w.address()));
  }
}

TEST(ProcessWorld, AWorkerWhoseRankZeroNeverAppearsExitsOneNamingTheAddress) {
  World w{kFormingFailsTimeout, kFormingFailsTimeout};
  Child worker = w.worker("alone");
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("rank 0 never appeared at " + w.address()));
}

TEST(ProcessWorld, AWrongTokenIsRefusedOnBothSides) {
  World w{kFormingFailsTimeout};
  const std::string wrong = write_token(w.dir / "wrong", "not the secret of this world");
  Child worker = w.waiting_worker("wrong", 1, wrong);
  try {
    Engine::open(w.rank0());
    FAIL() << "opened with a worker that has the wrong token";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1 never arrived"));
    // The worker never got past the store's front end: rank 0 cannot tell which rank it was.
    EXPECT_THAT(e.what(), HasSubstr("failed the token check"));
  }
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("refused this worker: wrong token"));
}

TEST(ProcessWorld, ATokenFileOthersCanReadIsRefused) {
  World w{kFormingFailsTimeout};
  const std::string open_file = write_token(w.dir / "readable", "a shared secret of this test world", 0640);
  Child worker = w.worker("readable", 1, open_file);
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("chmod 600 " + open_file));
  EngineOptions o = w.rank0();
  o.token_file = open_file;
  try {
    Engine::open(o);
    FAIL() << "rank 0 took a token file others can read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("chmod 600"));
  }
}

TEST(ProcessWorld, AWorkerWithDifferentSettingsIsRefusedWithWhatDiffers) {
  World w{kFormingFailsTimeout};
  // The same model, with a transformer config that differs by one byte (still valid JSON).
  const fs::path other = w.dir / "other-model";
  fs::copy(default_model_dir(), other, fs::copy_options::recursive);
  std::ofstream(other / "transformer" / "config.json", std::ios::app) << "\n";
  Child worker = w.waiting_worker("other", 1, "", {"--model", other.string()});
  try {
    Engine::open(w.rank0());
    FAIL() << "opened with a worker of another model";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("differ from rank 0's: transformer/config.json"));
  }
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("transformer/config.json (rank 0: "));
}

// A worker must compute in rank 0's compute dtype: one left at its device's default (fp32) is
// refused naming compute-dtype, one given --compute-dtype bf16 joins and the world's clip is
// that of two bf16 thread ranks.
TEST(ProcessWorld, AWorkerComputesInRankZerosComputeDtypeOrIsRefusedNamingIt) {
  World refused{kFormingFailsTimeout};
  EngineOptions bf16_rank0 = refused.rank0();
  bf16_rank0.compute_dtype = "bf16";
  Child fp32 = refused.waiting_worker("fp32");
  try {
    Engine::open(bf16_rank0);
    FAIL() << "opened with a worker computing in fp32 under a bf16 rank 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("compute-dtype (rank 0: bf16, rank 1: fp32)"));
  }
  EXPECT_TRUE(exited_with(fp32.wait(), 1)) << fp32.output();
  EXPECT_THAT(fp32.output(), HasSubstr("compute-dtype (rank 0: bf16, rank 1: fp32)"));

  World w;  // a world that serves: the long timeout
  EngineOptions o = w.rank0();
  o.compute_dtype = "bf16";
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--compute-dtype", "bf16"});
  Child bf16 = Child::start(args, w.dir / "bf16.log");
  at::Tensor frames;
  {
    auto e = Engine::open(o);
    frames = generate_frames(*e);
  }
  EXPECT_TRUE(exited_with(bf16.wait(), 0)) << bf16.output();
  EXPECT_FALSE(at::equal(frames, thread_rank_frames())) << "the bf16 world gave the fp32 clip";
  EngineOptions threads;
  threads.model_dir = default_model_dir();
  threads.ranks = 2;
  threads.compute_dtype = "bf16";
  EXPECT_TRUE(at::equal(frames, generate_frames(*Engine::open(threads))))
      << "bf16 process ranks and bf16 thread ranks disagree";
}

TEST(ProcessWorld, AWorkerWithAnUnknownComputeDtypeExitsOneNamingTheFlag) {
  World w{kFormingFailsTimeout};
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--compute-dtype", "fp16"});
  Child worker = Child::start(args, w.dir / "fp16.log");
  EXPECT_TRUE(exited_with(worker.wait(), 1)) << worker.output();
  EXPECT_THAT(worker.output(), HasSubstr("compute-dtype = \"fp16\": must be \"fp32\" or \"bf16\""));
}

// Ulysses across processes: a worker must run rank 0's tp x sp layout (a world setting); one
// left at sp 1 is refused naming sp-size, one given --sp 2 joins and the world's clip is that of
// two thread ranks at sp 2 (the tiny DiT's 2 heads split over 2 SP ranks).
TEST(ProcessWorld, AWorkerRunsRankZerosSequenceParallelLayoutOrIsRefusedNamingIt) {
  World refused{kFormingFailsTimeout};
  EngineOptions sp2_rank0 = refused.rank0();
  sp2_rank0.sp = 2;
  Child sp1 = refused.waiting_worker("sp1");
  try {
    Engine::open(sp2_rank0);
    FAIL() << "opened with a worker at sp 1 under an sp 2 rank 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("sp-size (sequence-parallel split) (rank 0: 2, rank 1: 1)"));
  }
  EXPECT_TRUE(exited_with(sp1.wait(), 1)) << sp1.output();

  World w;
  EngineOptions o = w.rank0();
  o.sp = 2;
  std::vector<std::string> args = w.worker_args();
  args.insert(args.end(), {"--sp", "2"});
  Child sp2 = Child::start(args, w.dir / "sp2.log");
  at::Tensor frames;
  {
    auto e = Engine::open(o);
    frames = generate_frames(*e);
  }
  EXPECT_TRUE(exited_with(sp2.wait(), 0)) << sp2.output();
  EngineOptions threads;
  threads.model_dir = default_model_dir();
  threads.ranks = 2;
  threads.sp = 2;
  const at::Tensor thread_frames = generate_frames(*Engine::open(threads));
  EXPECT_TRUE(at::equal(frames, thread_frames)) << "sp 2 process ranks and sp 2 thread ranks disagree";
  // The clip of tp 2: the same model, split the other way; the uint8 frames agree within a step.
  EXPECT_LE((thread_frames.to(at::kInt) - thread_rank_frames().to(at::kInt)).abs().max().item<int>(), 1);
}

}  // namespace
}  // namespace h3
