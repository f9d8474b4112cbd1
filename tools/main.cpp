// `h3`: the project's command line. Dispatches to registered subcommands;
// `h3 bench SECTION` picks a benchmark section registered as "bench SECTION".
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "h3/error.h"
#include "tools/command.h"

namespace h3::tools {

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> table;
  return table;
}

Registrar::Registrar(Command c) {
  commands().emplace(c.name, std::move(c));
}

}  // namespace h3::tools

namespace {

void print_overview() {
  std::fprintf(stdout, "usage: h3 COMMAND [OPTIONS]   (h3 COMMAND --help for its options)\n\ncommands:\n");
  for (const auto& [name, c] : h3::tools::commands()) {
    std::fprintf(stdout, "  %-16s %s\n", name.c_str(), c.summary.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace h3::tools;
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty() || words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
    print_overview();
    return words.empty() ? 2 : 0;
  }
  std::string name = words[0];
  size_t consumed = 1;
  if (name == "bench" && words.size() > 1 && words[1].compare(0, 1, "-") != 0) {
    name += " " + words[1];
    consumed = 2;
  }
  auto it = commands().find(name);
  if (it == commands().end()) {
    std::fprintf(stderr, "h3: unknown command '%s'\n\n", name.c_str());
    print_overview();
    return 2;
  }
  const Command& cmd = it->second;
  try {
    Args args(name, std::vector<std::string>(words.begin() + consumed, words.end()));
    if (args.help_requested()) {
      std::fprintf(stdout, "%s\n", cmd.usage.c_str());
      return 0;
    }
    return cmd.run(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "h3 %s: %s\n\n%s\n", name.c_str(), e.message.c_str(), cmd.usage.c_str());
    return 2;
  } catch (const h3::Error& e) {
    std::fprintf(stderr, "h3 %s: %s: %s\n", name.c_str(), h3::to_string(e.kind()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "h3 %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}
