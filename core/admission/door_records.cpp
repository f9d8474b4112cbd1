#include "admission/door_records.h"

#include <openssl/crypto.h>

#include <nlohmann/json.hpp>

#include "admission/crypto.h"

namespace h3::dist::door {

namespace {

using nlohmann::json;

constexpr size_t kMacHex = 64;

std::string header(const char* kind) {
  return std::string("h3door ") + kind + " v1\n";
}

bool same(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string mac_of(const std::string& key, const std::string& kind, const std::string& context,
                   const std::string& body) {
  return to_hex(hmac_sha256(key, kind + "\n" + context + "\n" + body));
}

struct Framed {
  std::string mac;  // 64 hex digits or "-"
  std::string body;
};

// Splits a record of `kind` into its MAC and body, looking at nothing else: nullopt (and why)
// for anything longer than a record may be, or not framed as one.
std::optional<Framed> frame(const std::string& raw, const char* kind, std::string* why) {
  auto fail = [&](const char* w) -> std::optional<Framed> {
    if (why) *why = std::string("not an h3 door ") + kind + " record: " + w;
    return std::nullopt;
  };
  if (raw.size() > kMaxRecordBytes) return fail("too long");
  const std::string h = header(kind);
  if (raw.compare(0, h.size(), h) != 0) return fail("wrong header");
  const size_t end = raw.find('\n', h.size());
  if (end == std::string::npos) return fail("no MAC line");
  Framed f{raw.substr(h.size(), end - h.size()), raw.substr(end + 1)};
  if (f.mac != "-" && f.mac.size() != kMacHex) return fail("malformed MAC");
  return f;
}

bool is_hex(const json& v, size_t n) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The body of an authenticated record as a JSON object (a token holder wrote it, but it is still
// checked: a record from another version of this program must not crash the reader).
std::optional<json> object_of(const std::string& body, std::string* why) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    if (why) *why = "its body is not a JSON object";
    return std::nullopt;
  }
  return j;
}

}  // namespace

std::string seal_record(const std::string& kind, const std::string& key, const std::string& context,
                        const std::string& body) {
  return header(kind.c_str()) + mac_of(key, kind, context, body) + "\n" + body;
}

std::string open_records_key(const std::string& token) {
  return hmac_sha256(token, "h3 door open records");
}

std::string hello_context(const RunKeys& k, int64_t generation, int rank, const std::string& challenge) {
  return k.run_id + "\n" + std::to_string(generation) + "\n" + std::to_string(rank) + "\n" + challenge;
}
std::string verdict_context(const RunKeys& k, int64_t generation, int rank, const std::string& nonce) {
  return k.run_id + "\n" + std::to_string(generation) + "\n" + std::to_string(rank) + "\n" + nonce;
}

RunKeys run_keys(const std::string& token, const std::string& run_id) {
  return RunKeys{run_id, hmac_sha256(token, "h3 door records\n" + run_id)};
}

std::string new_run_id() {
  return to_hex(random_bytes(16));
}

std::string printable(const std::string& s, size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

std::string encode_open(const OpenRecord& r, const std::string& token) {
  const json body = {{"run", r.run_id},
                     {"world_size", r.world_size},
                     {"generation", r.generation},
                     {"challenge", r.challenge},
                     {"formed", r.formed}};
  return seal_record("open", open_records_key(token), "", body.dump());
}

std::optional<OpenRecord> verify_open(const std::string& raw, const std::string& token, std::string* why) {
  const auto f = frame(raw, "open", why);
  if (!f) return std::nullopt;
  if (!same(f->mac, mac_of(open_records_key(token), "open", "", f->body))) {
    if (why) *why = "the open record does not verify with this token";
    return std::nullopt;
  }
  const auto j = object_of(f->body, why);
  if (!j) return std::nullopt;
  const json& o = *j;
  if (!is_hex(o.value("run", json()), 32) || !is_hex(o.value("challenge", json()), 32) ||
      !o.value("world_size", json()).is_number_integer() ||
      !o.value("generation", json()).is_number_integer() || !o.value("formed", json()).is_boolean()) {
    if (why) *why = "the open record lacks a field";
    return std::nullopt;
  }
  OpenRecord r;
  r.run_id = o["run"].get<std::string>();
  r.world_size = o["world_size"].get<int>();
  r.generation = o["generation"].get<int64_t>();
  r.challenge = o["challenge"].get<std::string>();
  r.formed = o["formed"].get<bool>();
  return r;
}

std::string encode_hello(const Hello& h, const RunKeys& k, int64_t generation, int rank,
                         const std::string& challenge) {
  const json body = {{"nonce", h.nonce}, {"settings", h.settings}};
  return seal_record("hello", k.record_key, hello_context(k, generation, rank, challenge), body.dump());
}

std::optional<Hello> verify_hello(const std::string& raw, const RunKeys& k, int64_t generation, int rank,
                                  const std::string& challenge, std::string* why) {
  const auto f = frame(raw, "hello", why);
  if (!f) return std::nullopt;
  if (!same(f->mac, mac_of(k.record_key, "hello", hello_context(k, generation, rank, challenge), f->body))) {
    if (why)
      *why = "wrong token: its proof over this rendezvous' challenge does not verify with rank 0's token";
    return std::nullopt;
  }
  const auto j = object_of(f->body, why);
  if (!j) return std::nullopt;
  if (!is_hex(j->value("nonce", json()), 32) || !j->value("settings", json()).is_string()) {
    if (why) *why = "its greeting lacks a nonce or settings";
    return std::nullopt;
  }
  return Hello{(*j)["nonce"].get<std::string>(), (*j)["settings"].get<std::string>()};
}

std::string encode_verdict(bool admitted, const std::string& reason, const RunKeys& k, int64_t generation,
                           int rank, const std::string& nonce) {
  const json body = {{"nonce", nonce}, {"admitted", admitted}, {"reason", printable(reason)}};
  return seal_record("verdict", k.record_key, verdict_context(k, generation, rank, nonce), body.dump());
}

std::string encode_unauthenticated_refusal(const std::string& reason) {
  const json body = {{"admitted", false}, {"reason", printable(reason)}};
  return header("verdict") + "-\n" + body.dump();
}

std::optional<Verdict> read_verdict(const std::string& raw, const RunKeys& k, int64_t generation, int rank,
                                    const std::string& nonce, std::string* why) {
  const auto f = frame(raw, "verdict", why);
  if (!f) return std::nullopt;
  const bool authenticated = f->mac != "-";
  if (authenticated &&
      !same(f->mac, mac_of(k.record_key, "verdict", verdict_context(k, generation, rank, nonce), f->body))) {
    if (why) *why = "a verdict that does not verify for this greeting";
    return std::nullopt;
  }
  const auto j = object_of(f->body, why);
  if (!j) return std::nullopt;
  if ((authenticated && j->value("nonce", json()) != nonce) || !j->value("admitted", json()).is_boolean()) {
    if (why) *why = "a verdict for another greeting";
    return std::nullopt;
  }
  Verdict v;
  v.authenticated = authenticated;
  v.admitted = authenticated && (*j)["admitted"].get<bool>();  // only rank 0 can admit
  const json reason = j->value("reason", json());
  v.reason = printable(reason.is_string() ? reason.get<std::string>() : std::string("(no reason given)"));
  return v;
}

std::string encode_closed(const RunKeys& k, bool served) {
  const json body = {{"served", served}};
  return seal_record("closed", k.record_key, k.run_id, body.dump());
}

std::optional<bool> verify_closed(const std::string& raw, const RunKeys& k, std::string* why) {
  const auto f = frame(raw, "closed", why);
  if (!f) return std::nullopt;
  if (!same(f->mac, mac_of(k.record_key, "closed", k.run_id, f->body))) {
    if (why) *why = "a closed record that does not verify for this run";
    return std::nullopt;
  }
  const auto j = object_of(f->body, why);
  if (!j || !j->value("served", json()).is_boolean()) return std::nullopt;
  return (*j)["served"].get<bool>();
}

}  // namespace h3::dist::door
