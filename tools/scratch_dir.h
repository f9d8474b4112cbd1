// A temporary folder for what a benchmark writes (a random checkpoint or
// model), removed with everything in it when the object goes, error or not.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "h3/error.h"

namespace h3::tools {

class ScratchDir {
 public:
  // Creates a fresh folder `root/<prefix>XXXXXX`; throws kInvalidArgument
  // naming `root` when it cannot.
  ScratchDir(const std::string& root, const std::string& prefix) {
    std::string tmpl = root + "/" + prefix + "XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
      throw Error(ErrorKind::kInvalidArgument,
                  root + ": cannot create a temp folder there (pass another with --dir)");
    }
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace h3::tools
