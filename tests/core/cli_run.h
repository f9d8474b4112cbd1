// Runs an `h3` command line through the shell for the command-line tests and keeps what it
// printed, so that a test reads the output instead of trusting the exit code alone.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace h3::test {

struct CliRun {
  int code = -1;       // the exit status; -1 when it did not exit normally
  std::string output;  // stdout and stderr together
};

// `args` follows the binary's quoted path (H3_EXE, the built `h3`); `env`, when given, precedes it
// ("NAME=value ...": the command's environment beside the test's).
inline CliRun run_h3(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + (env.empty() ? "" : " ") + "'" + H3_EXE + "' " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) r.output += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace h3::test
