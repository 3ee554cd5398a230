#include "base/file_io.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/error.h"

namespace tf {
namespace fs = std::filesystem;

void write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(str("cannot write ", path, ": ", std::strerror(errno)));
  f << data;
  if (!f.flush()) throw std::runtime_error(str("cannot write ", path, ": ", std::strerror(errno)));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(str("cannot read ", path, ": ", std::strerror(errno)));
  std::error_code ec;
  const uintmax_t size = fs::is_regular_file(path, ec) ? fs::file_size(path, ec) : 0;
  if (size == 0 || ec) {  // not a regular file (a pipe, a directory): as it comes
    std::ostringstream data;
    if (!(data << f.rdbuf()))
      throw std::runtime_error(str("cannot read ", path, ": ", std::strerror(errno)));
    return data.str();
  }
  // In place: models and libraries are mostly weights (hundreds of MB), copied once here.
  std::string data(static_cast<size_t>(size), '\0');
  if (!f.read(data.data(), static_cast<std::streamsize>(size)))
    throw std::runtime_error(str("cannot read ", path, ": ", std::strerror(errno)));
  return data;
}

AtomicFile::AtomicFile(const fs::path& final_path, const std::string& suffix) : final_(final_path.string()) {
  // The process id keeps two processes apart, the counter two threads of one.
  static std::atomic<unsigned> counter{0};
  temp_ = str(final_, ".tmp", ::getpid(), ".", counter++, suffix);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  std::error_code ec;
  fs::remove(temp_, ec);
}

void AtomicFile::commit() {
  std::error_code ec;
  fs::rename(temp_, final_, ec);
  if (ec) {
    fs::remove(temp_, ec);
    throw std::runtime_error(str("cannot write ", final_, ": ", ec.message()));
  }
  committed_ = true;
}

void write_file_atomic(const std::string& path, const std::string& data) {
  AtomicFile f(path);
  write_file(f.temp_path(), data);
  f.commit();
}

TemporaryFiles::~TemporaryFiles() {
  std::error_code ec;
  for (const std::string& p : paths) fs::remove(p, ec);
}

std::string TemporaryFiles::add(std::string path) {
  paths.push_back(path);
  return path;
}

}  // namespace tf
