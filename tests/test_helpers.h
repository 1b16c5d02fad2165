#pragma once
// Shared by the tests: temporary random models and bitwise comparisons.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "model/random_model.h"

namespace parspec::testing_support {

// A directory under the system temp dir, removed with everything in it at exit of scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "parspec-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

inline std::string write_model(const TempDir& dir, const std::string& name, RandomModelSpec spec) {
  const std::string path = dir.file(name);
  write_random_model(spec, path);
  return path;
}

inline bool bitwise_equal(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace parspec::testing_support
