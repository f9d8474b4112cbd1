// h3videosrc as rank 0 of a process world (docs/distributed.md): a worker SIGKILLed while the
// element decodes makes it post LIBRARY/FAILED; after the worker is restarted the same
// pipeline (READY, then PLAYING again: the engine stays open) runs its next clip to EOS, and
// the worker exits 0 when the pipeline goes to NULL.
#include <arpa/inet.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../free_port.h"
#include "../temp_dir.h"
#include "gst_test_util.h"

namespace {

using h3test_net::free_port;

pid_t start_worker(const std::string& address, const std::string& token, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    // A timeout a loaded machine never reaches: the killed peer is found by its closed connection.
    execl(H3_BIN, H3_BIN, "worker", "--rendezvous", address.c_str(), "--world-size", "2", "--rank", "1",
          "--token-file", token.c_str(), "--timeout", "60", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The exit status, waiting at most 60 s (then SIGKILL and -1).
int wait_exit(pid_t pid) {
  for (int i = 0; i < 3000; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

struct KillOnFirstBuffer {
  std::atomic<pid_t> pid{-1};
  static void handoff(GstElement*, GstBuffer*, GstPad*, gpointer self) {
    auto* k = static_cast<KillOnFirstBuffer*>(self);
    const pid_t p = k->pid.exchange(-1);
    if (p > 0) kill(p, SIGKILL);
  }
};

TEST(H3VideoSrcProcessWorld, AWorkerKilledMidDecodeIsLibraryFailedAndARestartedOneServesTheNextClip) {
  const h3::test::TempDir dir("gst-world");
  const std::string token = dir / "token";
  std::ofstream(token) << "the secret of this element test\n";
  chmod(token.c_str(), 0600);
  const std::string address = "127.0.0.1:" + std::to_string(free_port());

  pid_t worker = start_worker(address, token, dir / "first.log");
  // Six chunks and a one-chunk queue: when the first buffer reaches the sink (and the worker is
  // killed), the engine is at most two chunks ahead, so later chunks still need the worker
  // however slowly the sink is reached (with 30 frames and the default queue a loaded machine
  // let the engine finish the whole clip first, and the kill came too late).
  const std::string launch = "h3videosrc rendezvous=" + address + " world-size=2 token-file=" + token +
                             " timeout=60 num-frames=97 queue-chunks=1 width=80 height=48 steps=4 ! "
                             "fakesink name=sink signal-handoffs=true";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_EQ(err, nullptr);
  GstElement* sink = h3test::by_name(p, "sink");
  KillOnFirstBuffer killer;
  killer.pid = worker;
  g_signal_connect(sink, "handoff", G_CALLBACK(KillOnFirstBuffer::handoff), &killer);

  GstBus* bus = gst_element_get_bus(p);
  ASSERT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  h3test::RunResult first = h3test::wait_for_end(bus, 120);
  EXPECT_EQ(killer.pid.load(), -1) << "no buffer arrived before the end";
  if (!first.error) {
    // Not a pass either: leave no pipeline running behind the failure.
    ADD_FAILURE() << "the clip ended without an error although its worker was killed";
    gst_element_set_state(p, GST_STATE_NULL);
    wait_exit(worker);
    gst_object_unref(bus);
    gst_object_unref(sink);
    gst_object_unref(p);
    return;
  }
  EXPECT_FALSE(first.timed_out);
  EXPECT_EQ(first.domain, GST_LIBRARY_ERROR);
  EXPECT_EQ(first.code, GST_LIBRARY_ERROR_FAILED);
  EXPECT_NE(first.message.find("rank"), std::string::npos) << first.message;
  const int killed = wait_exit(worker);
  EXPECT_TRUE(killed != -1 && WIFSIGNALED(killed) && WTERMSIG(killed) == SIGKILL);

  // The same pipeline again, with the worker restarted: the engine forms its world again.
  ASSERT_NE(gst_element_set_state(p, GST_STATE_READY), GST_STATE_CHANGE_FAILURE);
  // basesrc's own "Internal data stream error" follows the element's error: not the next run's.
  while (GstMessage* m = gst_bus_pop(bus)) gst_message_unref(m);
  worker = start_worker(address, token, dir / "again.log");
  ASSERT_NE(gst_element_set_state(p, GST_STATE_PLAYING), GST_STATE_CHANGE_FAILURE);
  h3test::RunResult second = h3test::wait_for_end(bus, 120);
  EXPECT_TRUE(second.eos) << second.message << " " << second.debug;
  EXPECT_FALSE(second.error) << second.message;
  gst_element_set_state(p, GST_STATE_NULL);  // closes the engine: rank 0 tells the worker to stop
  const int stopped = wait_exit(worker);
  EXPECT_TRUE(stopped != -1 && WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0);

  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(p);
}

}  // namespace
