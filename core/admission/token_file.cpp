#include "admission/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "h3/error.h"

namespace h3::dist {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string read_token_file(const std::string& path) {
  if (path.empty()) {
    throw Error(
        ErrorKind::kInvalidArgument,
        "a rendezvous needs a token file (token-file / --token-file): a file only its owner may read");
  }
  const std::string what = "token file " + path;
  // O_NOFOLLOW: a link could point anywhere the user did not mean to share; O_NONBLOCK: a FIFO or
  // a device must not hold the caller (it is refused below, once the descriptor says what it is).
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0 && errno == ELOOP) {
    throw Error(ErrorKind::kInvalidArgument,
                what + " is a symbolic link: give the path of the file itself (links are not followed)");
  }
  if (f.fd < 0) throw Error(ErrorKind::kNotFound, what + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) throw Error(ErrorKind::kNotFound, what + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kInvalidArgument, what + " is not a regular file (a FIFO, device or folder)");
  }
  // Only the owner may have any permission on it: a group or other bit, even write or execute
  // alone, lets someone else read the token, plant their own, or learn the file's use.
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Error(ErrorKind::kInvalidArgument, what + " has mode " + mode +
                                                 ": its group or others may use it (only its owner may): run "
                                                 "`chmod 600 " +
                                                 path + "`");
  }
  if (static_cast<size_t>(st.st_size) > kMaxTokenFileBytes) {
    throw Error(ErrorKind::kInvalidArgument, what + " is " + std::to_string(st.st_size) +
                                                 " bytes: a token file holds one line (at most " +
                                                 std::to_string(kMaxTokenFileBytes) + " bytes)");
  }
  std::string text(kMaxTokenFileBytes + 1, '\0');
  size_t got = 0;
  for (;;) {
    const ssize_t n = read(f.fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ErrorKind::kNotFound, what + ": cannot read it: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (got > kMaxTokenFileBytes) {
      throw Error(ErrorKind::kInvalidArgument,
                  what + " grew beyond " + std::to_string(kMaxTokenFileBytes) + " bytes while it was read");
    }
  }
  text.resize(got);
  const std::string line = text.substr(0, text.find('\n'));
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  const std::string token = b == std::string::npos ? std::string() : line.substr(b, e - b + 1);
  if (token.size() < kMinTokenChars) {
    throw Error(ErrorKind::kInvalidArgument,
                what + ": the token must be at least " + std::to_string(kMinTokenChars) +
                    " characters (for instance `head -c 32 /dev/urandom | base64 > " + path + "`)");
  }
  return token;
}

}  // namespace h3::dist
