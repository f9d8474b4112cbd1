// Minimal, strict option parsing for the `h3` subcommands: `--name value`,
// `--name=value` and boolean `--flag`; positional arguments kept in order.
// Every option a command reads is declared by reading it; `finish()` then
// rejects whatever the user gave that the command did not read, so a typo
// is an error instead of a silently ignored option.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace h3::tools {

class Args {
 public:
  Args(std::string command, std::vector<std::string> argv);

  const std::string& command() const { return command_; }
  bool help_requested() const { return help_; }

  std::optional<std::string> opt_string(const std::string& name);
  std::string string(const std::string& name);  // required
  std::string string_or(const std::string& name, const std::string& fallback);
  int64_t int_or(const std::string& name, int64_t fallback, int64_t min, int64_t max);
  int64_t int_required(const std::string& name, int64_t min, int64_t max);
  double double_or(const std::string& name, double fallback);
  bool flag(const std::string& name);
  // Every value of an option that may be given several times, in order (empty: not given).
  std::vector<std::string> strings(const std::string& name);
  const std::vector<std::string>& positional() const { return positional_; }

  // Throws UsageError for options given but never read.
  void finish();

 private:
  struct Given {
    std::string name;
    std::optional<std::string> value;
  };
  const Given* find(const std::string& name);

  std::string command_;
  std::vector<Given> given_;
  std::vector<std::string> positional_;
  std::set<std::string> read_;
  bool help_ = false;
};

// A mistake in how the command was called: printed with the command's usage, exit code 2.
struct UsageError {
  std::string message;
};

}  // namespace h3::tools
