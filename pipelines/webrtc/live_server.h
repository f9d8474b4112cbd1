// The live server: the HTTP side (libsoup 3) of one Broadcast and its viewers. Routes:
//   GET  /             the page (webrtc.html)         GET /config  what the page needs to know
//   POST /whep         an SDP offer -> 201 and the answer, Location /whep/ID (WHEP's shape, no trickle)
//   DELETE /whep/ID    the viewer leaves              GET /stats   viewers and prompts, for tests
//   POST /prompt       text/plain UTF-8 -> the h3-prompt event (202), or a refusal
//   GET  /hls/...      the HLS page and playlist of the same encoding (with --hls)
// Every refusal is an HTTP status with its reason in the body; none stops the stream.
#pragma once

#include <libsoup/soup.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "broadcast.h"
#include "prompt_rate.h"
#include "steering.h"
#include "viewer.h"

namespace h3live {

struct ServerLimits {
  int max_viewers = 8;
  size_t max_sdp_bytes = 32 * 1024;  // a browser's offer is 3-8 KiB
  size_t max_prompt_bytes = 2048;
  int prompts_per_second = 2;
  int connect_timeout_s = 20;  // from the offer to an open data channel
  int silence_timeout_s = 10;  // an open channel without a keep-alive (the page sends one a second)
};

struct ServerOptions {
  std::string listen = "127.0.0.1";
  int port = 8080;
  std::string page_dir;  // webrtc.html (and index.html, the HLS page)
  std::string hls_dir;   // empty: no HLS
  std::string stun;      // stun://host:port for webrtcbin; empty: host candidates only
  std::string h3src_properties;
  ServerLimits limits;
};

class LiveServer {
 public:
  // `on_failure`: the stream failed (an error outside every viewer); the caller ends the loop.
  LiveServer(ServerOptions options, std::function<void()> on_failure);
  ~LiveServer();
  // Starts the pipeline and listens; false with `error` set when either fails.
  bool start(std::string* error);
  // The page's address, with the token when one is needed.
  std::string page_url() const;

 private:
  struct Viewing {
    std::unique_ptr<Viewer> viewer;
    SoupServerMessage* pending = nullptr;  // the POST waiting for the answer (paused)
  };
  static void on_request(SoupServer*, SoupServerMessage* msg, const char* path, GHashTable* query,
                         gpointer self);
  static void on_request_started(SoupServer*, SoupServerMessage* msg, gpointer self);
  void serve_whep(SoupServerMessage* msg, const std::string& path);
  void serve_prompt(SoupServerMessage* msg, GHashTable* query);
  void serve_file(SoupServerMessage* msg, const std::string& file, const char* type);
  void answered(const std::string& id, const std::string& sdp);
  void remove_viewer(const std::string& id, const std::string& why);
  void broadcast_text(const std::string& text);
  void sweep();
  size_t body_limit(const std::string& path) const;
  // Refuses (413, the connection closed unread) a body of `length` bytes over its route's limit;
  // `whole`: its Content-Length, else what a chunked body brought so far.
  void check_body_size(SoupServerMessage* msg, size_t length, bool whole);

  ServerOptions options_;
  std::function<void()> on_failure_;
  Steering steering_;
  PromptRate rate_;
  std::unique_ptr<Broadcast> broadcast_;
  SoupServer* soup_ = nullptr;
  std::map<std::string, Viewing> viewers_;
  uint64_t next_viewer_ = 1;
  std::string last_prompt_;  // the latest prompt given (what an applied change shows)
  int64_t prompts_given_ = 0;
  int64_t prompts_applied_ = 0;
  int64_t viewers_served_ = 0;
  guint sweep_source_ = 0;
};

}  // namespace h3live
