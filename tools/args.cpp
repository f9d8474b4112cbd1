#include "tools/args.h"

#include <cerrno>
#include <cstdlib>

namespace h3::tools {

Args::Args(std::string command, std::vector<std::string> argv) : command_(std::move(command)) {
  bool options_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (options_done || a.size() < 3 || a.compare(0, 2, "--") != 0) {
      if (a == "--") {
        options_done = true;
        continue;
      }
      if (a == "-h") {
        help_ = true;
        continue;
      }
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    if (name == "help") {
      help_ = true;
      continue;
    }
    Given g;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      g.name = name.substr(0, eq);
      g.value = name.substr(eq + 1);
    } else {
      g.name = name;
      // A value follows unless the next word is another option (boolean flag).
      if (i + 1 < argv.size() && !(argv[i + 1].size() > 2 && argv[i + 1].compare(0, 2, "--") == 0)) {
        g.value = argv[++i];
      }
    }
    // A repeated option is refused where it is read as one value (find), kept for strings().
    given_.push_back(std::move(g));
  }
}

const Args::Given* Args::find(const std::string& name) {
  read_.insert(name);
  const Given* found = nullptr;
  for (const auto& g : given_) {
    if (g.name != name) continue;
    if (found) throw UsageError{"option --" + name + " given twice"};
    found = &g;
  }
  return found;
}

std::vector<std::string> Args::strings(const std::string& name) {
  read_.insert(name);
  std::vector<std::string> values;
  for (const auto& g : given_) {
    if (g.name != name) continue;
    if (!g.value) throw UsageError{"option --" + name + " needs a value"};
    values.push_back(*g.value);
  }
  return values;
}

std::optional<std::string> Args::opt_string(const std::string& name) {
  const Given* g = find(name);
  if (!g) return std::nullopt;
  if (!g->value) throw UsageError{"option --" + name + " needs a value"};
  return g->value;
}

std::string Args::string(const std::string& name) {
  auto v = opt_string(name);
  if (!v) throw UsageError{"option --" + name + " is required"};
  return *v;
}

std::string Args::string_or(const std::string& name, const std::string& fallback) {
  auto v = opt_string(name);
  return v ? *v : fallback;
}

namespace {
int64_t parse_int(const std::string& name, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw UsageError{"option --" + name + " takes an integer, not '" + text + "'"};
  }
  if (v < min || v > max) {
    throw UsageError{"option --" + name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], not " + text};
  }
  return v;
}
}  // namespace

int64_t Args::int_or(const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  auto v = opt_string(name);
  return v ? parse_int(name, *v, min, max) : fallback;
}

int64_t Args::int_required(const std::string& name, int64_t min, int64_t max) {
  return parse_int(name, string(name), min, max);
}

double Args::double_or(const std::string& name, double fallback) {
  auto v = opt_string(name);
  if (!v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0') throw UsageError{"option --" + name + " takes a number, not '" + *v + "'"};
  return d;
}

bool Args::flag(const std::string& name) {
  const Given* g = find(name);
  if (!g) return false;
  if (g->value) {
    // `--flag value` where value was meant as positional: give it back.
    positional_.push_back(*g->value);
  }
  return true;
}

void Args::finish() {
  for (const auto& g : given_) {
    if (!read_.count(g.name)) throw UsageError{"unknown option --" + g.name};
  }
}

}  // namespace h3::tools
