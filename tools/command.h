// The `h3` command line: one binary, subcommands registered by the files that
// implement them (`h3 decode`, `h3 bench vae`, ...). A command's file is
// compiled straight into the executable, so its static registrar always runs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tools/args.h"

namespace h3::tools {

struct Command {
  std::string name;               // "decode", or "bench vae" for a bench section
  std::string summary;            // one line for `h3 --help`
  std::string usage;              // the full --help text: synopsis, options, defaults
  std::function<int(Args&)> run;  // returns the process exit code
};

// All registered commands, keyed by name.
std::map<std::string, Command>& commands();

struct Registrar {
  explicit Registrar(Command c);
};

}  // namespace h3::tools

// Registers a command at static-initialisation time.
#define H3_COMMAND_CAT2(a, b) a##b
#define H3_COMMAND_CAT(a, b) H3_COMMAND_CAT2(a, b)
#define H3_REGISTER_COMMAND(...)                                            \
  static const ::h3::tools::Registrar H3_COMMAND_CAT(h3_command_registrar_, \
                                                     __LINE__)(::h3::tools::Command{__VA_ARGS__})
