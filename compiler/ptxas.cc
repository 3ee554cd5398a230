#include "compiler/ptxas.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "compiler/link.h"

namespace tf {

int ptxas_cuda_version(const std::string& version_output) {
  static const std::regex release("release ([0-9]{1,3})\\.([0-9])");
  std::smatch m;
  if (!std::regex_search(version_output, m, release)) return 0;
  return std::stoi(m[1].str()) * 1000 + std::stoi(m[2].str()) * 10;
}

std::optional<Ptxas> find_ptxas(std::string* why) {
  std::string path;
  if (const char* env = std::getenv("TF_PTXAS"); env && *env) {
    if (std::string(env) == "off") {
      if (why) *why = "TF_PTXAS=off";
      return std::nullopt;
    }
    path = env;
  } else {
    const char* dirs = std::getenv("PATH");
    std::string rest = dirs ? dirs : "";
    for (size_t start = 0; path.empty() && start <= rest.size();) {
      size_t end = rest.find(':', start);
      if (end == std::string::npos) end = rest.size();
      std::string dir = rest.substr(start, end - start);
      if (!dir.empty() && access((dir + "/ptxas").c_str(), X_OK) == 0) path = dir + "/ptxas";
      start = end + 1;
    }
    if (path.empty() && access("/usr/local/cuda/bin/ptxas", X_OK) == 0) path = "/usr/local/cuda/bin/ptxas";
    if (path.empty()) {
      if (why) *why = "no ptxas in PATH or /usr/local/cuda/bin (NVIDIA's CUDA toolkit; $TF_PTXAS names one)";
      return std::nullopt;
    }
  }
  CommandResult r = run_command({path, "--version"});
  int version = r.exit_code == 0 ? ptxas_cuda_version(r.output) : 0;
  if (version == 0) {
    if (why) *why = "ptxas " + path + " does not say its version (" + r.output.substr(0, 200) + ")";
    return std::nullopt;
  }
  return Ptxas{path, version};
}

AssembleResult assemble_ptx(const Ptxas& ptxas, const std::string& ptx_path, const std::string& arch,
                            const std::string& cubin_path) {
  CommandResult r = run_command({ptxas.path, "-arch=" + arch, ptx_path, "-o", cubin_path});
  if (r.exit_code == 0 && std::filesystem::exists(cubin_path)) return {AssembleStatus::Ok, ""};
  std::error_code ec;
  std::filesystem::remove(cubin_path, ec);
  // What this ptxas says of an architecture it does not have.
  if (r.output.find("is not defined for option 'gpu-name'") != std::string::npos) {
    return {AssembleStatus::NoSuchArch, "this ptxas (" + ptxas.path + ") has no " + arch};
  }
  std::string words = r.output.size() > 2000 ? r.output.substr(0, 2000) + "..." : r.output;
  while (!words.empty() && (words.back() == '\n' || words.back() == ' ')) words.pop_back();
  return {AssembleStatus::Failed, "ptxas " + ptxas.path + " -arch=" + arch + " refused the kernel: " + words};
}

}  // namespace tf
