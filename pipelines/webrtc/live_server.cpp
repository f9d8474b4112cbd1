#include "live_server.h"

#include <glib/gstdio.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "main_thread.h"
#include "offer_check.h"

namespace h3live {
namespace {

void refuse(SoupServerMessage* msg, int status, const std::string& reason) {
  soup_server_message_set_status(msg, status, nullptr);
  const std::string body = reason + "\n";
  soup_server_message_set_response(msg, "text/plain; charset=utf-8", SOUP_MEMORY_COPY, body.data(),
                                   body.size());
}

void reply_json(SoupServerMessage* msg, int status, const nlohmann::json& j) {
  soup_server_message_set_status(msg, status, nullptr);
  const std::string body = j.dump();
  soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY, body.data(), body.size());
}

// A body over its limit is not read at all: the connection is taken from libsoup (which would
// otherwise read the whole body into memory before any handler runs), answered and closed.
void refuse_unread(SoupServerMessage* msg, int status, const std::string& reason) {
  GIOStream* stream = soup_server_message_steal_connection(msg);
  if (stream == nullptr) return;
  const std::string body = reason + "\n";
  const std::string response =
      "HTTP/1.1 " + std::to_string(status) + " " + soup_status_get_phrase(status) +
      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  g_output_stream_write_all(g_io_stream_get_output_stream(stream), response.data(), response.size(), nullptr,
                            nullptr, nullptr);
  g_io_stream_close(stream, nullptr, nullptr);
  g_object_unref(stream);
}

std::string request_body(SoupServerMessage* msg) {
  SoupMessageBody* body = soup_server_message_get_request_body(msg);
  GBytes* bytes = soup_message_body_flatten(body);
  gsize size = 0;
  const auto* data = static_cast<const char*>(g_bytes_get_data(bytes, &size));
  std::string text(data ? data : "", size);
  g_bytes_unref(bytes);
  return text;
}

}  // namespace

LiveServer::LiveServer(ServerOptions options, std::function<void()> on_failure)
    : options_(std::move(options)),
      on_failure_(std::move(on_failure)),
      steering_(options_.listen),
      rate_(options_.limits.prompts_per_second) {}

LiveServer::~LiveServer() {
  if (sweep_source_ != 0) g_source_remove(sweep_source_);
  viewers_.clear();  // each viewer leaves the pipeline before it stops
  if (soup_ != nullptr) {
    soup_server_disconnect(soup_);
    g_object_unref(soup_);
  }
}

std::string LiveServer::page_url() const {
  const bool v6 = options_.listen.find(':') != std::string::npos;
  std::string host = v6 ? "[" + options_.listen + "]" : options_.listen;
  std::string url = "http://" + host + ":" + std::to_string(options_.port) + "/";
  if (steering_.needs_token()) url += "?token=" + steering_.token();
  return url;
}

bool LiveServer::start(std::string* error) {
  // The address first: a typo is said before the model loads.
  GInetAddress* address = g_inet_address_new_from_string(options_.listen.c_str());
  if (address == nullptr) {
    *error = "--listen " + options_.listen + " is not an IP address (e.g. 127.0.0.1, 0.0.0.0, ::1)";
    return false;
  }
  BroadcastEvents events;
  events.chunk_out = [this](int64_t chunk, uint64_t running_time, int64_t wall_us) {
    for (auto& [id, v] : viewers_) {
      uint32_t rtp = 0;
      if (!v.viewer->channel_open() || !v.viewer->rtp_time(running_time, &rtp)) continue;
      v.viewer->send(nlohmann::json{{"type", "chunk"},
                                    {"chunk", chunk},
                                    {"running_time", running_time},
                                    {"rtp", rtp},
                                    {"wall_ms", static_cast<double>(wall_us) / 1000.0}}
                         .dump());
    }
  };
  events.prompt_applied = [this](int64_t chunk, uint64_t running_time) {
    ++prompts_applied_;
    g_print("h3-live: prompt applied from chunk %" G_GINT64_FORMAT " (running time %.3f s)\n", chunk,
            static_cast<double>(running_time) / GST_SECOND);
    for (auto& [id, v] : viewers_) {
      uint32_t rtp = 0;
      nlohmann::json j{
          {"type", "applied"}, {"chunk", chunk}, {"running_time", running_time}, {"prompt", last_prompt_}};
      if (v.viewer->rtp_time(running_time, &rtp)) j["rtp"] = rtp;
      v.viewer->send(j.dump());
    }
  };
  events.failed = [this](const std::string& text) {
    g_printerr("h3-live: the stream failed: %s\n", text.c_str());
    if (on_failure_) on_failure_();  // nothing left to serve
  };
  events.viewer_failed = [this](const std::string& id, const std::string& text) { remove_viewer(id, text); };

  broadcast_ = std::make_unique<Broadcast>(options_.h3src_properties, options_.hls_dir, events);
  if (!broadcast_->start(error)) {
    g_object_unref(address);
    return false;
  }
  soup_ = soup_server_new("server-header", "gst-h3-live", nullptr);
  g_signal_connect(soup_, "request-started", G_CALLBACK(on_request_started), this);
  soup_server_add_handler(soup_, nullptr, on_request, this, nullptr);
  GSocketAddress* socket_address = g_inet_socket_address_new(address, static_cast<guint16>(options_.port));
  GError* err = nullptr;
  GSocket* socket =
      g_socket_new(g_inet_address_get_family(address), G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, &err);
  g_object_unref(address);
  bool listening = socket != nullptr;
  if (listening) {
    // 50 viewers knocking at once are each answered (most with 503), not reset by a full backlog.
    g_socket_set_listen_backlog(socket, 128);
    listening = g_socket_bind(socket, socket_address, TRUE, &err) && g_socket_listen(socket, &err) &&
                soup_server_listen_socket(soup_, socket, static_cast<SoupServerListenOptions>(0), &err);
  }
  g_object_unref(socket_address);
  if (socket != nullptr) g_object_unref(socket);
  if (!listening) {
    *error =
        "could not listen on " + options_.listen + ":" + std::to_string(options_.port) + ": " + err->message;
    g_clear_error(&err);
    return false;
  }
  sweep_source_ = g_timeout_add_seconds(
      1,
      [](gpointer self) -> gboolean {
        static_cast<LiveServer*>(self)->sweep();
        return G_SOURCE_CONTINUE;
      },
      this);
  return true;
}

size_t LiveServer::body_limit(const std::string& path) const {
  if (path == "/whep") return options_.limits.max_sdp_bytes;
  if (path == "/prompt") return options_.limits.max_prompt_bytes;
  return 0;  // no other route takes a body
}

void LiveServer::on_request_started(SoupServer*, SoupServerMessage* msg, gpointer self) {
  g_signal_connect(msg, "got-headers", G_CALLBACK(+[](SoupServerMessage* m, gpointer self) {
                     auto* server = static_cast<LiveServer*>(self);
                     // One request a connection: libsoup 3.2 never closes an idle connection its
                     // client closed (each would hold a descriptor for good; fixed in 3.3).
                     soup_message_headers_replace(soup_server_message_get_response_headers(m), "Connection",
                                                  "close");
                     const goffset length =
                         soup_message_headers_get_content_length(soup_server_message_get_request_headers(m));
                     if (length > 0) server->check_body_size(m, static_cast<size_t>(length), true);
                   }),
                   self);
  // A chunked body says its length as it comes.
  g_signal_connect(msg, "got-chunk", G_CALLBACK(+[](SoupServerMessage* m, GBytes*, gpointer self) {
                     static_cast<LiveServer*>(self)->check_body_size(
                         m, static_cast<size_t>(soup_server_message_get_request_body(m)->length), false);
                   }),
                   self);
}

void LiveServer::check_body_size(SoupServerMessage* msg, size_t length, bool whole) {
  const std::string path = g_uri_get_path(soup_server_message_get_uri(msg));
  const size_t limit = body_limit(path);
  if (length <= limit) return;
  const std::string what = path == "/whep" ? "SDP offer" : path == "/prompt" ? "prompt" : "body";
  if (limit == 0) return refuse_unread(msg, 413, "a request to " + path + " takes no body");
  refuse_unread(msg, 413,
                "the " + what + " is " + (whole ? "" : "more than ") +
                    std::to_string(whole ? length : limit) + " bytes; at most " + std::to_string(limit) +
                    " are taken");
}

void LiveServer::on_request(SoupServer*, SoupServerMessage* msg, const char* path_c, GHashTable* query,
                            gpointer self) {
  auto* server = static_cast<LiveServer*>(self);
  const std::string path = path_c;
  const std::string method = soup_server_message_get_method(msg);
  soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Cache-Control", "no-store");
  if (path == "/whep" || path.rfind("/whep/", 0) == 0) return server->serve_whep(msg, path);
  if (path == "/prompt") {
    if (method != "POST") return refuse(msg, 405, "POST the prompt as text/plain UTF-8");
    return server->serve_prompt(msg, query);
  }
  if (method != "GET" && method != "HEAD") return refuse(msg, 405, "only GET here");
  if (path == "/" || path == "/index.html") {
    return server->serve_file(msg, server->options_.page_dir + "/webrtc.html", "text/html; charset=utf-8");
  }
  if (path == "/config") {
    const auto& l = server->options_.limits;
    return reply_json(msg, 200,
                      {{"steering", server->steering_.needs_token() ? "token" : "open"},
                       {"frames_per_chunk", Broadcast::kFramesPerChunk},
                       {"max_prompt_bytes", l.max_prompt_bytes},
                       {"prompts_per_second", l.prompts_per_second},
                       {"hls", !server->options_.hls_dir.empty()}});
  }
  if (path == "/stats") {
    return reply_json(msg, 200,
                      {{"viewers", server->viewers_.size()},
                       {"viewers_served", server->viewers_served_},
                       {"prompts_given", server->prompts_given_},
                       {"prompts_applied", server->prompts_applied_}});
  }
  if (path == "/hls/" && !server->options_.hls_dir.empty()) {
    return server->serve_file(msg, server->options_.page_dir + "/index.html", "text/html; charset=utf-8");
  }
  if (path.rfind("/hls/", 0) == 0 && !server->options_.hls_dir.empty()) {
    const std::string name = path.substr(5);
    // Only the sink's own names: no way out of the folder.
    if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.") != std::string::npos ||
        name[0] == '.') {
      return refuse(msg, 404, "no such HLS file");
    }
    const bool playlist = g_str_has_suffix(name.c_str(), ".m3u8");
    return server->serve_file(msg, server->options_.hls_dir + "/" + name,
                              playlist ? "application/vnd.apple.mpegurl" : "video/mp2t");
  }
  refuse(msg, 404, "no such page: " + path);
}

void LiveServer::serve_file(SoupServerMessage* msg, const std::string& file, const char* type) {
  gchar* data = nullptr;
  gsize size = 0;
  if (!g_file_get_contents(file.c_str(), &data, &size, nullptr))
    return refuse(msg, 404, "not there (yet): " + file);
  soup_server_message_set_status(msg, 200, nullptr);
  soup_server_message_set_response(msg, type, SOUP_MEMORY_TAKE, data, size);
}

void LiveServer::serve_whep(SoupServerMessage* msg, const std::string& path) {
  const std::string method = soup_server_message_get_method(msg);
  if (path != "/whep") {
    if (method != "DELETE")
      return refuse(msg, 405, "DELETE /whep/ID ends a viewer; nothing else is done to it");
    const std::string id = path.substr(6);
    if (viewers_.count(id) == 0) return refuse(msg, 404, "no viewer " + id);
    remove_viewer(id, "left (DELETE)");
    soup_server_message_set_status(msg, 200, nullptr);
    return;
  }
  if (method != "POST") return refuse(msg, 405, "POST an SDP offer (application/sdp) to /whep");
  const char* type =
      soup_message_headers_get_content_type(soup_server_message_get_request_headers(msg), nullptr);
  if (g_strcmp0(type, "application/sdp") != 0) {
    return refuse(msg, 415,
                  "the offer must be sent as application/sdp, not " + std::string(type ? type : "(none)"));
  }
  if (static_cast<int>(viewers_.size()) >= options_.limits.max_viewers) {
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After", "5");
    return refuse(msg, 503,
                  "the server has its " + std::to_string(options_.limits.max_viewers) +
                      " viewers (--max-viewers); try again when one leaves");
  }
  const std::string sdp = request_body(msg);
  Offer offer;
  const OfferRefusal refusal = check_offer(sdp, &offer);
  if (refusal.status != 0) return refuse(msg, refusal.status, refusal.reason);

  const std::string id = std::to_string(next_viewer_++);
  ViewerEvents events;
  events.answered = [this](const std::string& id, const std::string& answer) { answered(id, answer); };
  events.failed = [this](const std::string& id, const std::string& reason) { remove_viewer(id, reason); };
  events.channel_open = [this](const std::string& id) {
    auto it = viewers_.find(id);
    if (it == viewers_.end()) return;
    it->second.viewer->last_heard_us = g_get_monotonic_time();
    it->second.viewer->send(nlohmann::json{
        {"type", "hello"}, {"viewer", id}, {"steering", steering_.needs_token() ? "token" : "open"}}
                                .dump());
    g_print("h3-live: viewer %s connected (%zu watching)\n", id.c_str(), viewers_.size());
  };
  events.channel_closed = [this](const std::string& id) { remove_viewer(id, "closed its data channel"); };
  events.message = [this](const std::string& id, const std::string&) {
    auto it = viewers_.find(id);
    if (it != viewers_.end()) it->second.viewer->last_heard_us = g_get_monotonic_time();
  };
  Viewing& viewing = viewers_[id];
  viewing.viewer = std::make_unique<Viewer>(id, broadcast_->pipeline(), broadcast_->video_tee(),
                                            broadcast_->audio_tee(), options_.stun, events);
  viewing.viewer->created_us = g_get_monotonic_time();
  viewing.pending = msg;
  ++viewers_served_;
  // The answer comes when ICE gathering is done; the message waits paused until then, unless the
  // client goes away first.
  soup_server_message_pause(msg);
  g_signal_connect(msg, "finished", G_CALLBACK(+[](SoupServerMessage* m, gpointer self) {
                     for (auto& [id, v] : static_cast<LiveServer*>(self)->viewers_) {
                       if (v.pending == m) v.pending = nullptr;
                     }
                   }),
                   this);
  viewing.viewer->negotiate(sdp, offer);
}

void LiveServer::answered(const std::string& id, const std::string& sdp) {
  auto it = viewers_.find(id);
  if (it == viewers_.end() || it->second.pending == nullptr) return;
  SoupServerMessage* msg = it->second.pending;
  it->second.pending = nullptr;
  soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Location",
                               ("/whep/" + id).c_str());
  soup_server_message_set_status(msg, 201, nullptr);
  soup_server_message_set_response(msg, "application/sdp", SOUP_MEMORY_COPY, sdp.data(), sdp.size());
  soup_server_message_unpause(msg);
}

void LiveServer::remove_viewer(const std::string& id, const std::string& why) {
  auto it = viewers_.find(id);
  if (it == viewers_.end()) return;
  if (SoupServerMessage* msg = it->second.pending) {
    it->second.pending = nullptr;
    refuse(msg, 500, "no answer to the offer: " + why);
    soup_server_message_unpause(msg);
  }
  // Erased from the map before its destructor runs: reports it sends on the way out find it gone.
  std::unique_ptr<Viewer> viewer = std::move(it->second.viewer);
  viewers_.erase(it);
  viewer.reset();
  g_print("h3-live: viewer %s removed: %s (%zu watching)\n", id.c_str(), why.c_str(), viewers_.size());
}

void LiveServer::serve_prompt(SoupServerMessage* msg, GHashTable* query) {
  std::string token;
  if (const char* auth =
          soup_message_headers_get_one(soup_server_message_get_request_headers(msg), "Authorization")) {
    if (g_str_has_prefix(auth, "Bearer ")) token = auth + 7;
  }
  if (token.empty() && query != nullptr) {
    if (const auto* t = static_cast<const char*>(g_hash_table_lookup(query, "token"))) token = t;
  }
  if (!steering_.allows(token)) {
    return refuse(msg, 403,
                  token.empty() ? "steering needs the token printed when the server started (the page's URL "
                                  "?token=...); without it this viewer watches only"
                                : "the steering token is wrong; this viewer watches only");
  }
  const std::string prompt = request_body(msg);
  if (!g_utf8_validate(prompt.data(), static_cast<gssize>(prompt.size()), nullptr)) {
    return refuse(msg, 400, "the prompt is not valid UTF-8");
  }
  if (prompt.find_first_not_of(" \t\r\n") == std::string::npos)
    return refuse(msg, 400, "the prompt is empty");
  const int64_t now = g_get_monotonic_time();
  if (!rate_.take(now)) {
    const int64_t wait_ms = (rate_.wait_us(now) + 999) / 1000;
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After",
                                 std::to_string((wait_ms + 999) / 1000).c_str());
    return refuse(msg, 429,
                  "at most " + std::to_string(options_.limits.prompts_per_second) +
                      " prompt changes a second (all viewers together); the next in " +
                      std::to_string(wait_ms) + " ms");
  }
  if (!broadcast_->change_prompt(prompt))
    return refuse(msg, 500, "h3src refused the prompt (see the server's log)");
  last_prompt_ = prompt;
  ++prompts_given_;
  reply_json(msg, 202, {{"prompt", prompt}, {"given", prompts_given_}});
}

void LiveServer::sweep() {
  // A viewer that vanished without a word (tab killed, network gone) stops sending keep-alives:
  // its branch goes, so memory stays bounded by the viewers really watching.
  const int64_t now = g_get_monotonic_time();
  std::vector<std::pair<std::string, std::string>> gone;
  for (auto& [id, v] : viewers_) {
    const Viewer& viewer = *v.viewer;
    if (!viewer.channel_open() &&
        now - viewer.created_us > options_.limits.connect_timeout_s * G_USEC_PER_SEC) {
      gone.emplace_back(id,
                        "did not connect within " + std::to_string(options_.limits.connect_timeout_s) + " s");
    } else if (viewer.channel_open() &&
               now - viewer.last_heard_us > options_.limits.silence_timeout_s * G_USEC_PER_SEC) {
      gone.emplace_back(id, "silent for " + std::to_string(options_.limits.silence_timeout_s) + " s");
    }
  }
  for (const auto& [id, why] : gone) remove_viewer(id, why);
}

}  // namespace h3live
