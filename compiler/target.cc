#include "compiler/target.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <cctype>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "base/error.h"

namespace tf {
namespace {

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

// The host's features that differ from what its CPU name implies (a VM often hides some),
// so `native` gets a short, exact -mattr.
std::string host_feature_delta(const llvm::Target& t, const std::string& triple, const std::string& cpu) {
  std::unique_ptr<llvm::MCSubtargetInfo> sti(t.createMCSubtargetInfo(triple, cpu, ""));
  std::set<std::string> known;
  for (const llvm::SubtargetFeatureKV& kv : sti->getAllProcessorFeatures()) known.insert(kv.Key);
  std::map<std::string, bool> host;  // sorted, so the text is stable
  for (const auto& kv : llvm::sys::getHostCPUFeatures()) host[kv.first().str()] = kv.second;
  std::string delta;
  for (const auto& [name, on] : host) {
    if (!known.count(name) || sti->checkFeatures("+" + name) == on) continue;
    delta += (delta.empty() ? "" : ",") + std::string(on ? "+" : "-") + name;
  }
  return delta;
}

// `llvm` targets are CPUs with a Linux userland our kernels link against. GPU and other
// back ends exist in LLVM too, but their code needs another lowering and runtime.
void check_cpu_triple(const std::string& spec, const std::string& triple) {
  llvm::Triple tt(triple);
  switch (tt.getArch()) {
    case llvm::Triple::x86_64:
    case llvm::Triple::aarch64:
    case llvm::Triple::arm:
      break;
    case llvm::Triple::nvptx:
    case llvm::Triple::nvptx64:
      throw UserError(str("target '", spec, "': ", triple, " is a GPU triple; NVIDIA GPUs are the 'cuda' target kind, "
                          "e.g. 'cuda -arch=sm_80'"));
    case llvm::Triple::amdgcn:
    case llvm::Triple::r600:
      throw UserError(str("target '", spec, "': ", triple, " is a GPU triple; AMD GPUs are the 'rocm' target kind, "
                          "e.g. 'rocm -mcpu=gfx906'"));
    default:
      throw UserError(str("target '", spec, "': architecture '", tt.getArchName().str(), "' of ", triple,
                          " is not a CPU tunefarm compiles for (x86_64, aarch64, arm); GPUs are the 'cuda' and "
                          "'rocm' target kinds"));
  }
  if (!tt.isOSLinux()) {
    throw UserError(str("target '", spec, "': ", triple, " is not a Linux triple; kernels are ELF shared "
                        "libraries for Linux (e.g. aarch64-linux-gnu)"));
  }
  if (tt.getArch() == llvm::Triple::arm && tt.getEnvironment() != llvm::Triple::GNUEABIHF) {
    throw UserError(str("target '", spec, "': 32-bit arm needs the hard-float ABI, e.g. "
                        "armv7l-linux-gnueabihf (Raspberry Pi OS)"));
  }
}

}  // namespace

std::string Target::str() const {
  std::string s;
  if (is_gpu()) {
    s = tf::str(kind_name(), " -", info().arch_option, "=", chip());
  } else {
    s = "llvm -mtriple=" + triple + " -mcpu=" + cpu;
    if (!features.empty()) s += " -mattr=" + features;
  }
  if (!model.empty()) s += " -model=" + model;
  return s;
}

std::string Target::short_str() const {
  Target t = *this;
  t.features.clear();
  return t.str();
}

std::string Target::arch_name() const {
  if (is_gpu()) return std::string(kind_name());
  llvm::Triple tt(triple);
  // armv7l, armv7, armv8l... are one architecture for lookups and library folders.
  if (tt.getArch() == llvm::Triple::arm) return "arm";
  return tt.getArchName().str();
}

std::string Target::multiarch() const {
  if (is_gpu()) return "";
  std::string arch = arch_name();
  return arch == "arm" ? "arm-linux-gnueabihf" : arch + "-linux-gnu";
}

int Target::vector_lanes() const {
  if (is_gpu()) return 1;
  init_llvm();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  TF_CHECK(t, "target ", triple, " vanished: ", err);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(t->createMCSubtargetInfo(triple, cpu, features));
  llvm::Triple tt(triple);
  if (tt.isX86()) {
    if (sti->checkFeatures("+avx512f")) return 16;
    if (sti->checkFeatures("+avx")) return 8;
    return 4;
  }
  return 4;  // NEON, and a safe width elsewhere
}

bool Target::has_feature(const std::string& name) const {
  if (is_gpu()) return false;
  init_llvm();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  TF_CHECK(t, "target ", triple, " vanished: ", err);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(t->createMCSubtargetInfo(triple, cpu, features));
  return sti->checkFeatures("+" + name);
}

Target::ByteDot Target::byte_dot() const {
  const std::string a = arch_name();
  if (a == "x86_64" && has_feature("avx512vnni")) return ByteDot::Vnni512;
  if (a == "x86_64" && has_feature("avxvnni")) return ByteDot::AvxVnni;
  if (a == "aarch64" && has_feature("i8mm")) return ByteDot::Usdot;
  if (a == "aarch64" && has_feature("dotprod")) return ByteDot::Sdot;
  return ByteDot::None;
}

const char* byte_dot_name(Target::ByteDot d) {
  switch (d) {
    case Target::ByteDot::Vnni512: return "vpdpbusd, AVX512-VNNI";
    case Target::ByteDot::AvxVnni: return "vpdpbusd, AVX-VNNI";
    case Target::ByteDot::Usdot: return "usdot";
    case Target::ByteDot::Sdot: return "sdot";
    case Target::ByteDot::None: break;
  }
  return "widened: this target has no byte dot product";
}

Target parse_target(const std::string& spec) {
  std::vector<std::string> w = words(spec);
  if (w.empty()) throw UserError("empty target string (try 'llvm -mcpu=native')");
  Target t;
  std::optional<TargetKind> kind = parse_target_kind(w[0]);
  if (!kind) throw UserError(str("target '", spec, "': unknown kind '", w[0], "' (", target_kind_names(), ")"));
  t.kind = *kind;
  const TargetKindInfo& info = t.info();
  for (size_t i = 1; i < w.size(); ++i) {
    size_t eq = w[i].find('=');
    if (w[i].rfind("-", 0) != 0 || eq == std::string::npos || eq + 1 == w[i].size()) {
      throw UserError(str("target '", spec, "': option '", w[i], "' is not -key=value"));
    }
    std::string key = w[i].substr(1, eq - 1), value = w[i].substr(eq + 1);
    if (!info.gpu && key == "mtriple") t.triple = value;
    else if (key == info.arch_option) (t.kind == TargetKind::Cuda ? t.arch : t.cpu) = value;
    else if (!info.gpu && key == "mattr") t.features = value;
    else if (key == "model") t.model = value;
    else throw UserError(str("target '", spec, "': unknown option -", key, " for ", info.name));
  }
  for (char c : t.model) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      throw UserError(str("target '", spec, "': -model=", t.model, " may hold only letters, digits, '-', '_' and '.'"));
    }
  }
  init_llvm();
  if (info.gpu) {
    const bool cuda = t.kind == TargetKind::Cuda;
    const std::string& name = t.chip();
    if (cuda && name.rfind("sm_", 0) != 0) throw UserError(str("target '", spec, "': cuda needs -arch=sm_XX"));
    if (!cuda && name.rfind("gfx", 0) != 0) throw UserError(str("target '", spec, "': rocm needs -mcpu=gfxXXX"));
    t.triple = info.triple;
    std::string err;
    const llvm::Target* lt = llvm::TargetRegistry::lookupTarget(t.triple, err);
    if (!lt) throw UserError(str("target '", spec, "': this LLVM has no back end for ", t.triple));
    std::unique_ptr<llvm::MCSubtargetInfo> sti(lt->createMCSubtargetInfo(t.triple, "", ""));
    if (!sti->isCPUStringValid(name)) {
      throw UserError(str("target '", spec, "': LLVM 19 does not know the ", cuda ? "NVIDIA architecture " : "AMD GPU ",
                          name));
    }
    return t;
  }
  bool native = t.cpu == "native";
  t.triple = llvm::Triple::normalize(t.triple.empty() ? llvm::sys::getDefaultTargetTriple() : t.triple);
  std::string err;
  const llvm::Target* lt = llvm::TargetRegistry::lookupTarget(t.triple, err);
  if (!lt) throw UserError(str("target '", spec, "': no LLVM backend for triple ", t.triple));
  check_cpu_triple(spec, t.triple);
  if (native) {
    if (llvm::Triple(t.triple).getArch() != llvm::Triple(llvm::sys::getDefaultTargetTriple()).getArch()) {
      throw UserError(str("target '", spec, "': -mcpu=native names this machine's CPU, but the triple is ",
                          t.triple));
    }
    t.cpu = llvm::sys::getHostCPUName().str();
    if (t.features.empty()) t.features = host_feature_delta(*lt, t.triple, t.cpu);
  }
  if (t.cpu.empty()) t.cpu = "generic";
  std::unique_ptr<llvm::MCSubtargetInfo> sti(lt->createMCSubtargetInfo(t.triple, t.cpu, ""));
  if (t.cpu != "generic" && !sti->isCPUStringValid(t.cpu)) {
    throw UserError(str("target '", spec, "': unknown CPU '", t.cpu, "' for ", t.triple));
  }
  return t;
}

Target host_target() { return parse_target("llvm -mcpu=native"); }

}  // namespace tf
