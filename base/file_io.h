// Files: whole-file reads and writes, and publishing a file so that no reader ever sees half
// of it. Every file tunefarm hands to someone else (a kernel library and its sidecar, a model
// library, an export, a kept model) is published through AtomicFile.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tf {

// Writes `data` to `path`; throws std::runtime_error naming the file when it cannot.
void write_file(const std::string& path, const std::string& data);
// The bytes of `path`; throws std::runtime_error naming the file when it cannot be read.
std::string read_file(const std::string& path);

// A file built under a temporary name beside its final one (same directory, so the rename is
// atomic) and renamed into place by commit(). Until then readers see the old file or none;
// the temporary is removed whatever happens unless committed.
//
//   AtomicFile out("lib.so", ".so");
//   link_shared_library(objects, out.temp_path(), ...);
//   out.commit();
class AtomicFile {
 public:
  // The temporary is `final_path` + ".tmp<pid>.<n>" + `suffix` (some tools want an extension).
  explicit AtomicFile(const std::filesystem::path& final_path, const std::string& suffix = "");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return temp_; }
  const std::string& final_path() const { return final_; }
  // Renames the temporary to the final path; throws std::runtime_error "cannot write <final>:
  // <reason>" when it cannot (the temporary is then removed).
  void commit();

 private:
  std::string final_, temp_;
  bool committed_ = false;
};

// write_file through an AtomicFile.
void write_file_atomic(const std::string& path, const std::string& data);

// Removes the listed files when it goes out of scope (intermediate files of a build).
struct TemporaryFiles {
  std::vector<std::string> paths;
  TemporaryFiles() = default;
  TemporaryFiles(const TemporaryFiles&) = delete;
  TemporaryFiles& operator=(const TemporaryFiles&) = delete;
  ~TemporaryFiles();
  // Adds `path` to the list and returns it.
  std::string add(std::string path);
};

}  // namespace tf
