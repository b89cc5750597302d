// Test support: a text file in the temporary directory for one scope (removed at its end), e.g. a
// calibration table an op or the CLI reads. The name carries the process id, so concurrent test
// processes do not share it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace weave::test {

struct ScopedTextFile {
  std::string path;
  ScopedTextFile(const std::string& stem, const std::string& text)
      : path((std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(::getpid()) + ".txt")).string()) {
    write(text);
  }
  ~ScopedTextFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
  void write(const std::string& text) const { std::ofstream(path) << text; }
  ScopedTextFile(const ScopedTextFile&) = delete;
  ScopedTextFile& operator=(const ScopedTextFile&) = delete;
};

}  // namespace weave::test
