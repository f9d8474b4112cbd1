// Many requests in flight over a process world (docs/engine.md, "Many streams"): the worker
// process runs the same turns as rank 0, so each stream is byte for byte what it gives alone; a
// worker killed while three streams run ends all three with the group's failure, and the world
// formed again serves the next requests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "process_world_test_util.h"
#include "streams_test_util.h"

namespace h3 {
namespace {
using namespace process_world_test;
using streams_test::expect_same_stream;
using streams_test::run_stream;
using streams_test::run_together;
using streams_test::StreamResult;
using streams_test::StreamSpec;
using streams_test::three_streams;
using ::testing::HasSubstr;

std::vector<StreamResult> each_alone(Engine& e, const std::vector<StreamSpec>& specs) {
  std::vector<StreamResult> out;
  for (const StreamSpec& s : specs) out.push_back(run_stream(e, s));
  return out;
}

TEST(ProcessWorldStreams, ThreeStreamsTogetherOverAWorkerGiveEachTheBytesItGivesAlone) {
  World w;
  Child worker = w.worker("w1");
  {
    auto e = Engine::open(w.rank0());
    const std::vector<StreamSpec> specs = three_streams();
    const std::vector<StreamResult> alone = each_alone(*e, specs);
    const std::vector<StreamResult> together = run_together(*e, specs);
    for (size_t i = 0; i < specs.size(); ++i) expect_same_stream(together[i], alone[i], specs[i].name);
  }
  EXPECT_TRUE(exited_with(worker.wait(), 0)) << worker.output();
}

TEST(ProcessWorldStreams,
     AWorkerKilledWhileThreeStreamsRunEndsAllThreeWithTheGroupsFailureAndTheNextAreServed) {
  World w;
  Child worker = w.worker("first");
  auto e = Engine::open(w.rank0());
  std::vector<StreamSpec> specs = three_streams();
  const std::vector<StreamResult> alone = each_alone(*e, specs);
  // Once all three are in flight (the gate at their first steps), the causal clip's third step
  // kills the worker.
  std::atomic<bool> killed{false};
  specs[1].on_progress = [&](const Progress& p, StreamControl&) {
    if (!killed && p.phase == Phase::kDenoising && p.step == 3) {
      kill(worker.pid, SIGKILL);
      killed = true;
    }
  };
  const std::vector<StreamResult> together = run_together(*e, specs);
  ASSERT_TRUE(killed);
  // Every stream ends with the group's one failure, as a lone request does
  // (ProcessWorld.AWorkerKilledMidDenoise...): the rank that met the loss, and the rank that is gone
  // (a killed worker posts nothing: on one host its process is seen to end, dist/host_memory.h;
  // across hosts its signs of life stop) with what to do, each stream's text prefixed with where
  // it was.
  ASSERT_TRUE(together[0].error) << specs[0].name << " survived its worker's death";
  const std::string group_failure = together[0].error_text();
  EXPECT_THAT(group_failure, HasSubstr("rank 0: ")) << group_failure;
  EXPECT_THAT(group_failure, HasSubstr("rank 1 is gone: ")) << group_failure;
  EXPECT_THAT(group_failure, HasSubstr("killed or crashed")) << group_failure;
  EXPECT_THAT(group_failure, HasSubstr("start it again")) << group_failure;
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(together[i].error) << specs[i].name << " survived its worker's death";
    EXPECT_EQ(together[i].error_kind(), ErrorKind::kDistributed) << together[i].error_text();
    const std::string text = together[i].error_text();
    EXPECT_TRUE(text.size() >= group_failure.size() &&
                text.compare(text.size() - group_failure.size(), group_failure.size(), group_failure) == 0)
        << specs[i].name << " did not end with the group's failure: " << text;
    std::printf("%s: %s\n", specs[i].name.c_str(), text.c_str());
  }
  const int st = worker.wait();
  EXPECT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  // A restarted worker joins the world rank 0 forms again at the next request, and the streams
  // are served as before, together.
  Child again = w.worker("again");
  const std::vector<StreamResult> next = run_together(*e, three_streams());
  for (size_t i = 0; i < specs.size(); ++i)
    expect_same_stream(next[i], alone[i], specs[i].name + " afterwards");
  e.reset();
  EXPECT_TRUE(exited_with(again.wait(), 0)) << again.output();
}

}  // namespace
}  // namespace h3
