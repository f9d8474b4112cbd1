// The door's pieces on their own: the token file, the records (forged, tampered and replayed
// ones refused), the sealed store (a value that fails its GCM tag refused) and the data plane's
// proof of membership.
#include "admission/door_records.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "../../error_of.h"
#include "../../temp_dir.h"
#include "admission/membership.h"
#include "admission/sealed_store.h"
#include "admission/token_file.h"
#include "dist_test_util.h"
#include "h3/error.h"
#include "spy_store.h"

namespace h3::dist {
namespace {

using ::testing::HasSubstr;

const std::string kToken = "the shared secret of these tests";

// The tests' temporary folder, with files written into it at the mode a test asks.
struct Dir : test::TempDir {
  Dir() : TempDir("door") {}
  std::string file(const std::string& name, const std::string& text, mode_t mode = 0600) const {
    const std::string p = *this / name;
    std::ofstream(p) << text;
    chmod(p.c_str(), mode);
    return p;
  }
};

using test::error_of;

// ---- token file ----

TEST(TokenFile, ReadsTheFirstLineTrimmed) {
  Dir d;
  EXPECT_EQ(read_token_file(d.file("t", "  " + kToken + " \t\nsecond line\n")), kToken);
}

TEST(TokenFile, RefusesWhatIsNotAPrivateRegularFileOfOneLine) {
  Dir d;
  const std::string good = d.file("good", kToken + "\n");
  const std::string link = d.str() + "/link";
  ASSERT_EQ(symlink(good.c_str(), link.c_str()), 0);
  EXPECT_THAT(error_of([&] { read_token_file(link); }, ErrorKind::kInvalidArgument),
              HasSubstr("symbolic link"));

  // A FIFO with no writer: refused at once instead of blocking the caller.
  const std::string fifo = d.str() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { read_token_file(fifo); }, ErrorKind::kInvalidArgument),
              HasSubstr("not a regular file"));
  EXPECT_THAT(error_of([&] { read_token_file(d.str()); }, ErrorKind::kInvalidArgument),
              HasSubstr("not a regular file"));

  const std::string big = d.file("big", kToken + "\n" + std::string(5000, 'x'));
  EXPECT_THAT(error_of([&] { read_token_file(big); }, ErrorKind::kInvalidArgument), HasSubstr("4096 bytes"));
  const std::string shared = d.file("shared", kToken + "\n", 0640);
  EXPECT_THAT(error_of([&] { read_token_file(shared); }, ErrorKind::kInvalidArgument),
              HasSubstr("chmod 600 " + shared));
  const std::string short_one = d.file("short", "tooshort\n");
  EXPECT_THAT(error_of([&] { read_token_file(short_one); }, ErrorKind::kInvalidArgument),
              HasSubstr("at least 16 characters"));
  EXPECT_THAT(error_of([&] { read_token_file(d.str() + "/missing"); }, ErrorKind::kNotFound),
              HasSubstr(d.str() + "/missing"));
  EXPECT_THAT(error_of([&] { read_token_file(""); }, ErrorKind::kInvalidArgument), HasSubstr("token file"));
}

// The rule: only the owner may have any permission on the file. Every group or other bit, read,
// write or execute, alone or together, is refused naming the mode; owner-only modes pass.
TEST(TokenFile, AnyGroupOrOtherPermissionIsRefusedAndOwnerOnlyModesPass) {
  Dir d;
  for (mode_t mode : {0640, 0604, 0620, 0602, 0610, 0601, 0660, 0644, 0606}) {
    char name[16];
    std::snprintf(name, sizeof name, "m%04o", static_cast<unsigned>(mode));
    const std::string f = d.file(name, kToken + "\n", mode);
    const std::string what = error_of([&] { read_token_file(f); }, ErrorKind::kInvalidArgument);
    EXPECT_THAT(what, HasSubstr(std::string("has mode ") + (name + 1) + ": its group or others may use it"))
        << name;
    EXPECT_THAT(what, HasSubstr("chmod 600 " + f)) << name;
  }
  for (mode_t mode : {0600, 0400, 0700}) {
    char name[16];
    std::snprintf(name, sizeof name, "ok%04o", static_cast<unsigned>(mode));
    EXPECT_EQ(read_token_file(d.file(name, kToken + "\n", mode)), kToken) << name;
  }
}

// ---- records ----

door::OpenRecord an_open(const std::string& run) {
  return door::OpenRecord{run, 3, 2, std::string(32, 'c'), false};
}

// Every byte position of a record flipped: none verifies.
template <typename Verify>
void expect_every_tampered_byte_refused(const std::string& record, Verify&& verify) {
  for (size_t i = 0; i < record.size(); ++i) {
    std::string t = record;
    t[i] = static_cast<char>(t[i] ^ 0x01);
    EXPECT_FALSE(verify(t)) << "byte " << i << " of " << record;
  }
}

TEST(DoorRecords, OpenRoundTripsAndAnyTamperingOrAnotherTokenIsRefused) {
  const std::string run = door::new_run_id();
  const std::string rec = door::encode_open(an_open(run), kToken);
  std::string why;
  const auto o = door::verify_open(rec, kToken, &why);
  ASSERT_TRUE(o) << why;
  EXPECT_EQ(o->run_id, run);
  EXPECT_EQ(o->world_size, 3);
  EXPECT_EQ(o->generation, 2);
  EXPECT_FALSE(o->formed);
  EXPECT_FALSE(door::verify_open(rec, "another token of 16+ chars", &why));
  EXPECT_THAT(why, HasSubstr("does not verify"));
  expect_every_tampered_byte_refused(
      rec, [&](const std::string& t) { return door::verify_open(t, kToken, nullptr); });
  EXPECT_FALSE(door::verify_open("junk", kToken, &why));
  EXPECT_FALSE(door::verify_open(std::string(door::kMaxRecordBytes + 1, 'x'), kToken, &why));
  EXPECT_THAT(why, HasSubstr("too long"));
}

TEST(DoorRecords, AHelloVerifiesOnlyForItsRunGenerationRankAndChallenge) {
  const door::RunKeys k = door::run_keys(kToken, door::new_run_id());
  const std::string challenge(32, 'a');
  const std::string rec = door::encode_hello({std::string(32, 'b'), "{\"x\":\"1\"}"}, k, 4, 2, challenge);
  std::string why;
  const auto h = door::verify_hello(rec, k, 4, 2, challenge, &why);
  ASSERT_TRUE(h) << why;
  EXPECT_EQ(h->nonce, std::string(32, 'b'));
  EXPECT_EQ(h->settings, "{\"x\":\"1\"}");
  // Replayed into another formation, rank, challenge or run: refused, saying why.
  EXPECT_FALSE(door::verify_hello(rec, k, 5, 2, challenge, &why));
  EXPECT_THAT(why, HasSubstr("wrong token"));
  EXPECT_FALSE(door::verify_hello(rec, k, 4, 1, challenge, &why));
  EXPECT_FALSE(door::verify_hello(rec, k, 4, 2, std::string(32, 'd'), &why));
  EXPECT_FALSE(door::verify_hello(rec, door::run_keys(kToken, door::new_run_id()), 4, 2, challenge, &why));
  EXPECT_FALSE(
      door::verify_hello(rec, door::run_keys("another token of 16+ chars", k.run_id), 4, 2, challenge, &why));
  expect_every_tampered_byte_refused(
      rec, [&](const std::string& t) { return door::verify_hello(t, k, 4, 2, challenge, nullptr); });
}

TEST(DoorRecords, AVerdictIsTheGreetingsOwnAndOnlyAnAuthenticatedOneAdmits) {
  const door::RunKeys k = door::run_keys(kToken, door::new_run_id());
  const std::string nonce(32, 'e');
  std::string why;
  const auto yes = door::read_verdict(door::encode_verdict(true, "", k, 1, 1, nonce), k, 1, 1, nonce, &why);
  ASSERT_TRUE(yes) << why;
  EXPECT_TRUE(yes->admitted);
  EXPECT_TRUE(yes->authenticated);
  const auto no = door::read_verdict(door::encode_verdict(false, "settings\x1b[2J differ\n", k, 1, 1, nonce),
                                     k, 1, 1, nonce, &why);
  ASSERT_TRUE(no);
  EXPECT_FALSE(no->admitted);
  EXPECT_EQ(no->reason, "settings?[2J differ?");  // printed sanitized
  // Another greeting's verdict (another nonce) or another rank's: not this worker's.
  EXPECT_FALSE(door::read_verdict(door::encode_verdict(true, "", k, 1, 1, std::string(32, 'f')), k, 1, 1,
                                  nonce, &why));
  EXPECT_FALSE(door::read_verdict(door::encode_verdict(true, "", k, 1, 2, nonce), k, 1, 1, nonce, &why));
  // An unauthenticated answer can only refuse, and says so.
  const auto u =
      door::read_verdict(door::encode_unauthenticated_refusal("wrong token"), k, 1, 1, nonce, &why);
  ASSERT_TRUE(u);
  EXPECT_FALSE(u->authenticated);
  EXPECT_FALSE(u->admitted);
  // A forged "admitted" without a MAC is still no admission.
  const auto forged =
      door::read_verdict("h3door verdict v1\n-\n{\"admitted\":true,\"reason\":\"\"}", k, 1, 1, nonce, &why);
  ASSERT_TRUE(forged);
  EXPECT_FALSE(forged->admitted);
  expect_every_tampered_byte_refused(door::encode_verdict(true, "", k, 1, 1, nonce),
                                     [&](const std::string& t) {
                                       const auto v = door::read_verdict(t, k, 1, 1, nonce, nullptr);
                                       return v && v->admitted;
                                     });
}

TEST(DoorRecords, AClosedRecordOfAnotherRunIsNotThisRunsClose) {
  const door::RunKeys k = door::run_keys(kToken, door::new_run_id());
  std::string why;
  EXPECT_EQ(door::verify_closed(door::encode_closed(k, true), k, &why), std::optional<bool>(true));
  EXPECT_EQ(door::verify_closed(door::encode_closed(k, false), k, &why), std::optional<bool>(false));
  const door::RunKeys earlier = door::run_keys(kToken, door::new_run_id());
  EXPECT_FALSE(
      door::verify_closed(door::encode_closed(earlier, true), k, &why));  // a replay from another run
  EXPECT_THAT(why, HasSubstr("this run"));
  EXPECT_FALSE(door::verify_closed("h3door closed v1\n-\n{\"served\":true}", k, &why));
}

TEST(DoorRecords, PrintableKeepsAsciiAndBoundsTheLength) {
  EXPECT_EQ(door::printable("ok\x01\xff"), "ok??");
  EXPECT_EQ(door::printable(std::string(500, 'a')).size(), door::kMaxReasonChars + 3);
}

// ---- sealed store ----

TEST(SealedStore, ValuesOpenOnlyUnderTheirTokenRunAndName) {
  auto inner = c10::make_intrusive<c10d::HashStore>();
  auto sealed = make_sealed_store(inner, kToken, "run-a");
  sealed->set("addr", std::vector<uint8_t>{1, 2, 3});
  EXPECT_EQ(sealed->get("addr"), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(inner->check({"addr"})) << "the name is stored in the clear";
  EXPECT_EQ(inner->getNumKeys(), 1);

  // The same name under another run or token is another hidden name: nothing to read.
  auto other_run = make_sealed_store(inner, kToken, "run-b");
  EXPECT_FALSE(other_run->check({"addr"}));
  auto other_token = make_sealed_store(inner, "another token of 16+ chars", "run-a");
  EXPECT_FALSE(other_token->check({"addr"}));
}

TEST(SealedStore, ATamperedCiphertextOrTagFailsAuthentication) {
  auto spy = c10::make_intrusive<testing::SpyStore>();
  auto sealed = make_sealed_store(spy, kToken, "run");
  const std::vector<uint8_t> plain{10, 20, 30, 40};
  sealed->set("addr", plain);
  const std::string hidden = spy->last;
  const std::vector<uint8_t> stored = spy->get(hidden);
  ASSERT_EQ(stored.size(), 12 + plain.size() + 16);  // nonce, ciphertext, tag
  for (size_t i = 0; i < stored.size(); ++i) {
    std::vector<uint8_t> t = stored;
    t[i] ^= 0x80;
    spy->c10d::HashStore::set(hidden, t);
    const std::string what = error_of([&] { sealed->get("addr"); }, ErrorKind::kDistributed);
    EXPECT_THAT(what, HasSubstr("fails authentication")) << "byte " << i;
  }
  spy->c10d::HashStore::set(hidden, std::vector<uint8_t>(10, 0));
  EXPECT_THAT(error_of([&] { sealed->get("addr"); }, ErrorKind::kDistributed), HasSubstr("too short"));
  // A sealed value moved under another name fails too (the name is its authenticated data).
  sealed->set("other", std::vector<uint8_t>{1});
  const std::string other_hidden = spy->last;
  spy->c10d::HashStore::set(other_hidden, stored);
  EXPECT_THAT(error_of([&] { sealed->get("other"); }, ErrorKind::kDistributed),
              HasSubstr("fails authentication"));
}

// A value sealed by a holder of one token, copied under the hidden name that another token's view
// gives the same key (what a holder of token B would read): it never opens there.
TEST(SealedStore, AValueSealedUnderOneTokenMovedToAnotherTokensNameIsRefused) {
  auto spy = c10::make_intrusive<testing::SpyStore>();
  auto under_a = make_sealed_store(spy, kToken, "run");
  auto under_b = make_sealed_store(spy, "another token of 16+ chars", "run");
  under_a->set("addr", std::vector<uint8_t>{1, 2, 3});
  const std::string a_name = spy->last;
  under_b->set("addr", std::vector<uint8_t>{9});
  const std::string b_name = spy->last;
  ASSERT_NE(a_name, b_name) << "two tokens hide a key under the same name";
  const std::vector<uint8_t> a_value = spy->get(a_name), b_value = spy->get(b_name);
  spy->c10d::HashStore::set(b_name, a_value);
  EXPECT_THAT(
      error_of([&] { under_b->get("addr"); }, ErrorKind::kDistributed),
      HasSubstr("the value of 'addr' fails authentication: a peer without this world's token wrote it"));
  // ... and the other way round, under the same run and under another.
  spy->c10d::HashStore::set(a_name, b_value);
  EXPECT_THAT(error_of([&] { under_a->get("addr"); }, ErrorKind::kDistributed),
              HasSubstr("fails authentication"));
}

// ---- the data plane's proof ----

TEST(Membership, EveryRankProvesTheTokenAndAStrangersPlaceFailsEveryRank) {
  WorldOptions o;
  o.thread_transport = ThreadTransport::kGloo;  // the data plane a process world uses
  o.timeout = std::chrono::seconds(30);
  testing::run_ok(
      3, [](Group& g) { prove_membership(g, kToken, "run", 1); }, o);

  // Rank 2 brings a proof made with another token (what a stranger in its place would send).
  const auto results = run_threads(
      3,
      [](Group& g) {
        prove_membership(g, g.rank() == 2 ? std::string("not this world's token!") : kToken, "run", 1);
      },
      o);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank << " went on with a stranger in the group";
    EXPECT_THAT(r.error, HasSubstr("proof of the token failed for rank")) << "rank " << r.rank;
  }
  // A proof for another generation of the same run is no proof either (a replay).
  EXPECT_NE(membership_proof(kToken, "run", 1, 0), membership_proof(kToken, "run", 2, 0));
  EXPECT_NE(membership_proof(kToken, "run", 1, 0), membership_proof(kToken, "other", 1, 0));
}

}  // namespace
}  // namespace h3::dist
