// The records rank 0 and the workers exchange at the door of a process world (admission/door.h), as
// bytes: each carries an HMAC-SHA256 over its raw bytes, checked before anything of it is parsed,
// under a key that binds it to its run (a random id rank 0 draws when it starts serving), its
// formation (generation) and its rank. Pure functions of bytes, so that the parsing can be fuzzed
// (tests/fuzz/door_records_fuzz.cpp).
//
// A record: "h3door <kind> v1\n" + MAC (64 hex digits, or "-" for the one unauthenticated kind) +
// "\n" + a JSON body of at most kMaxRecordBytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace h3::dist::door {

constexpr size_t kMaxRecordBytes = 64 * 1024;
constexpr size_t kMaxReasonChars = 300;

// The run's identity and the key its records are authenticated with.
struct RunKeys {
  std::string run_id;      // 32 hex digits
  std::string record_key;  // HMAC-SHA256(token, "h3 door records\n" + run_id), 32 raw bytes
};
RunKeys run_keys(const std::string& token, const std::string& run_id);
// A fresh run id (16 random bytes as hex).
std::string new_run_id();

// Rank 0 announces a formation ("open": workers may greet; "formed": the formation is over).
struct OpenRecord {
  std::string run_id;
  int world_size = 0;
  int64_t generation = 0;
  std::string challenge;  // 32 hex digits, fresh per generation
  bool formed = false;
};
// Authenticated under the token itself (a worker learns the run id from this record).
std::string encode_open(const OpenRecord& r, const std::string& token);
std::optional<OpenRecord> verify_open(const std::string& raw, const std::string& token, std::string* why);

// A worker's greeting for `generation` as `rank`, answering the generation's challenge.
struct Hello {
  std::string nonce;     // 32 hex digits, the worker's own
  std::string settings;  // its settings (a JSON object of strings; admission/door.h)
};
std::string encode_hello(const Hello& h, const RunKeys& k, int64_t generation, int rank,
                         const std::string& challenge);
std::optional<Hello> verify_hello(const std::string& raw, const RunKeys& k, int64_t generation, int rank,
                                  const std::string& challenge, std::string* why);

// Rank 0's answer to one greeting (bound to its nonce). A greeting whose MAC did not verify
// gets an unauthenticated refusal: rank 0 cannot prove anything to a peer without the token.
struct Verdict {
  bool admitted = false;
  bool authenticated = false;
  std::string reason;  // a refusal's, printable ASCII, at most kMaxReasonChars
};
std::string encode_verdict(bool admitted, const std::string& reason, const RunKeys& k, int64_t generation,
                           int rank, const std::string& nonce);
// To a greeting that does not verify: rank 0 cannot tell whose it was, so it echoes nothing.
std::string encode_unauthenticated_refusal(const std::string& reason);
// The verdict for the greeting with `nonce`: authenticated when its MAC verifies (then only it
// can admit or refuse); an unauthenticated refusal, which a worker may only report, never act
// on; nullopt for anything else (another greeting's answer, a forgery, junk).
std::optional<Verdict> read_verdict(const std::string& raw, const RunKeys& k, int64_t generation, int rank,
                                    const std::string& nonce, std::string* why);

// Rank 0 closed its door for good. `served`: a world of this run formed at least once.
std::string encode_closed(const RunKeys& k, bool served);
// nullopt unless it verifies for this run; else whether a world of the run ever formed.
std::optional<bool> verify_closed(const std::string& raw, const RunKeys& k, std::string* why);

// The record framing itself, for the tests and the fuzzer: a record of `kind` over `body`, MAC'd
// under `key` for `context`; and the key of the open records.
std::string seal_record(const std::string& kind, const std::string& key, const std::string& context,
                        const std::string& body);
std::string open_records_key(const std::string& token);
// Contexts of the bound records: hello (run, generation, rank, challenge), verdict (run,
// generation, rank, the greeting's nonce), closed (run).
std::string hello_context(const RunKeys& k, int64_t generation, int rank, const std::string& challenge);
std::string verdict_context(const RunKeys& k, int64_t generation, int rank, const std::string& nonce);

// `s` made safe to print: printable ASCII kept, anything else '?', at most `max` characters.
std::string printable(const std::string& s, size_t max = kMaxReasonChars);

}  // namespace h3::dist::door
