#include "runtime/gpu_model/image.h"

#include <elf.h>

#include <cctype>
#include <cstring>

#include "runtime/gpu_model/plan.h"

namespace tf {
namespace {

// Bytes [offset, offset + bytes) lie within a buffer of `size`.
bool within(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

// The bytes of section `name` of an ELF64 little-endian file, or why there are none.
std::string find_section(const std::string& elf, const char* name, std::string& out) {
  if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return "not an ELF file";
  if (elf[EI_CLASS] != ELFCLASS64 || elf[EI_DATA] != ELFDATA2LSB) return "not a 64-bit little-endian ELF file";
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || !within(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), elf.size()) ||
      eh.e_shstrndx >= eh.e_shnum) {
    return "an ELF file without readable section headers";
  }
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
    return sh;
  };
  Elf64_Shdr names = section(eh.e_shstrndx);
  if (!within(names.sh_offset, names.sh_size, elf.size())) return "an ELF file whose section names lie outside it";
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_name >= names.sh_size) continue;
    const char* n = elf.data() + names.sh_offset + sh.sh_name;
    size_t room = names.sh_size - sh.sh_name;
    if (strnlen(n, room) == room || std::strcmp(n, name) != 0) continue;
    if (sh.sh_type != SHT_PROGBITS || !within(sh.sh_offset, sh.sh_size, elf.size()))
      return std::string("an ELF file whose ") + name + " section lies outside it";
    out = elf.substr(sh.sh_offset, sh.sh_size);
    return "";
  }
  return std::string("not a GPU model library (no ") + name + " section: compile --model for a cuda or rocm target)";
}

// Reads the plan's words in order, each checked against the plan's end.
class Words {
 public:
  explicit Words(std::vector<int64_t> w) : w_(std::move(w)) {}
  bool next(int64_t& v) {
    if (at_ >= w_.size()) return false;
    v = w_[at_++];
    return true;
  }
  int64_t header(int i) const { return w_[static_cast<size_t>(i)]; }
  size_t size() const { return w_.size(); }
  size_t at() const { return at_; }
  void skip_header() { at_ = TF_GPU_PLAN_HEADER_WORDS; }

 private:
  std::vector<int64_t> w_;
  size_t at_ = 0;
};

// Where each module of a plan lies in the blob: (offset, bytes).
using ModuleTable = std::vector<std::pair<int64_t, int64_t>>;

// One plan (its words, from its header), reading modules, names and literals in `blob` and
// checking constants' offsets against the constants' bytes: "" or what is damaged. Its module
// table goes to `table`; given `first` (bucket 0's), the table must be that one and the modules
// are not copied again (m.modules stays empty: plans must not multiply the modules' bytes).
std::string read_plan(std::vector<int64_t> plan, const std::string& blob, size_t constant_bytes,
                      GpuModelImage& m, const ModuleTable* first, ModuleTable& table) {
  Words w(std::move(plan));
  if (w.header(TF_GPU_PLAN_MAGIC_WORD) != TF_GPU_PLAN_MAGIC) return "no magic number";
  int64_t platform = w.header(TF_GPU_PLAN_PLATFORM);
  if (platform != TF_GPU_PLATFORM_CUDA && platform != TF_GPU_PLATFORM_ROCM)
    return "platform " + std::to_string(platform);
  m.platform = platform == TF_GPU_PLATFORM_CUDA ? TargetKind::Cuda : TargetKind::Rocm;
  const int64_t counts[6] = {w.header(TF_GPU_PLAN_INPUTS), w.header(TF_GPU_PLAN_OUTPUTS), w.header(TF_GPU_PLAN_MODULES),
                             w.header(TF_GPU_PLAN_LAUNCHES), w.header(TF_GPU_PLAN_CONVERSIONS), w.header(TF_GPU_PLAN_COPIES)};
  const int64_t limits[6] = {4096, 4096, kGpuModelMaxModules, kGpuModelMaxLaunches, 4096, 4096};
  const char* names[6] = {"inputs", "outputs", "modules", "launches", "conversions", "copies"};
  for (int k = 0; k < 6; ++k) {
    if (counts[k] < 0 || counts[k] > limits[k])
      return std::to_string(counts[k]) + " " + names[k] + " (at most " + std::to_string(limits[k]) +
             ")";
  }
  m.arena_bytes = w.header(TF_GPU_PLAN_ARENA_BYTES);
  if (m.arena_bytes < 0 || m.arena_bytes > kGpuModelMaxArenaBytes)
    return "an arena of " + std::to_string(m.arena_bytes) + " bytes";
  w.skip_header();
  const std::string truncated = "it ends early";
  for (int side = 0; side < 2; ++side) {
    for (int64_t k = 0; k < counts[side]; ++k) {
      GpuModelImage::Tensor t;
      int64_t dtype;
      if (!w.next(t.elements) || !w.next(dtype)) return truncated;
      if (t.elements < 0 || t.elements > (int64_t{1} << 36))
        return "a tensor of " + std::to_string(t.elements) + " elements";
      if (!tf_dtype_known(dtype)) return "element type " + std::to_string(dtype);
      t.dtype = static_cast<int32_t>(dtype);
      (side == 0 ? m.inputs : m.outputs).push_back(t);
    }
  }
  for (int64_t k = 0; k < counts[2]; ++k) {
    int64_t at, bytes;
    if (!w.next(at) || !w.next(bytes)) return truncated;
    table.emplace_back(at, bytes);
    if (first) {
      if (static_cast<size_t>(k) >= first->size() || (*first)[static_cast<size_t>(k)] != table.back())
        return "its modules are not bucket 0's";
      continue;
    }
    if (at < 0 || bytes <= 0 || !within(static_cast<uint64_t>(at), static_cast<uint64_t>(bytes), blob.size()))
      return "module " + std::to_string(k) + " lies outside the library's data";
    m.modules.push_back(blob.substr(static_cast<size_t>(at), static_cast<size_t>(bytes)));
    if (std::string why = check_gpu_module(m.modules.back(), m.platform); !why.empty())
      return "module " + std::to_string(k) + " is " + why;
  }
  // Whether `n` bytes at `a` lie in what the argument names.
  auto arg_ok = [&](const GpuModelImage::Arg& a, int64_t n) {
    switch (a.kind) {
      case GpuModelImage::ArgKind::Input: return a.index >= 0 && a.index < counts[0];
      case GpuModelImage::ArgKind::Output: return a.index >= 0 && a.index < counts[1];
      case GpuModelImage::ArgKind::Constant:
        return a.index >= 0 &&
               within(static_cast<uint64_t>(a.index), static_cast<uint64_t>(n), constant_bytes);
      case GpuModelImage::ArgKind::Arena:
        return a.index >= 0 && within(static_cast<uint64_t>(a.index), static_cast<uint64_t>(n), static_cast<uint64_t>(m.arena_bytes));
    }
    return false;
  };
  auto read_arg = [&](GpuModelImage::Arg& a) {
    int64_t kind;
    if (!w.next(kind) || !w.next(a.index) || kind < 0 || kind > 3) return false;
    a.kind = static_cast<GpuModelImage::ArgKind>(kind);
    return true;
  };
  for (int64_t l = 0; l < counts[3]; ++l) {
    GpuModelImage::Launch launch;
    int64_t v[10];
    for (int64_t& x : v)
      if (!w.next(x)) return truncated;
    std::string where = "launch " + std::to_string(l);
    if (v[0] < 0 || v[0] >= counts[2]) return where + " of module " + std::to_string(v[0]);
    launch.module = v[0];
    if (v[1] < 0 || static_cast<uint64_t>(v[1]) >= blob.size())
      return where + " has no kernel name";
    const char* name = blob.data() + v[1];
    size_t room = blob.size() - static_cast<size_t>(v[1]), len = strnlen(name, std::min<size_t>(room, 256));
    if (len == 0 || len == std::min<size_t>(room, 256)) return where + " has no kernel name";
    launch.function.assign(name, len);
    for (char c : launch.function) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
        return where + " names a kernel that is not a C identifier";
    }
    int64_t threads = 1;
    for (int d = 0; d < 3; ++d) {
      launch.dims.grid[static_cast<size_t>(d)] = v[2 + d];
      launch.dims.block[static_cast<size_t>(d)] = v[5 + d];
      if (v[2 + d] < 1 || v[2 + d] > 2147483647 || v[5 + d] < 1 || v[5 + d] > 1024)
        return where + " (" + launch.function + ") has a grid or block dimension out of range";
      threads *= v[5 + d];
    }
    if (threads > 1024)
      return where + " (" + launch.function + ") has " + std::to_string(threads) +
             " threads per block";
    if (v[8] < 0 || v[8] > 256 * 1024)
      return where + " asks " + std::to_string(v[8]) + " bytes of shared memory";
    launch.dims.dynamic_shared_bytes = v[8];
    if (v[9] < 0 || v[9] > kGpuModelMaxArgs)
      return where + " takes " + std::to_string(v[9]) + " arguments";
    for (int64_t a = 0; a < v[9]; ++a) {
      GpuModelImage::Arg arg;
      if (!read_arg(arg)) return truncated;
      if (!arg_ok(arg, 1))
        return where + " (" + launch.function + ") argument " + std::to_string(a) +
               " lies outside the model's buffers";
      launch.args.push_back(arg);
    }
    m.launches.push_back(std::move(launch));
  }
  for (int64_t c = 0; c < counts[4]; ++c) {
    GpuModelImage::Conversion conv;
    if (!w.next(conv.input) || !w.next(conv.arena_offset)) return truncated;
    // Only int64 and bool inputs are converted (float16 ones are read by kernels as they are).
    if (conv.input < 0 || conv.input >= counts[0] ||
        (m.inputs[static_cast<size_t>(conv.input)].dtype != TF_DTYPE_INT64 &&
         m.inputs[static_cast<size_t>(conv.input)].dtype != TF_DTYPE_BOOL) ||
        !arg_ok({GpuModelImage::ArgKind::Arena, conv.arena_offset},
                m.inputs[static_cast<size_t>(conv.input)].elements * 4)) {
      return "conversion " + std::to_string(c) + " is out of range";
    }
    m.conversions.push_back(conv);
  }
  for (int64_t c = 0; c < counts[5]; ++c) {
    GpuModelImage::Copy copy;
    int64_t literal, bytes;
    if (!read_arg(copy.from) || !w.next(copy.output) || !w.next(literal) || !w.next(bytes)) return truncated;
    std::string where = "copy " + std::to_string(c);
    if (copy.output < 0 || copy.output >= counts[1])
      return where + " writes output " + std::to_string(copy.output);
    const GpuModelImage::Tensor& out = m.outputs[static_cast<size_t>(copy.output)];
    if (literal >= 0) {
      if (bytes != out.bytes() || !within(static_cast<uint64_t>(literal), static_cast<uint64_t>(bytes), blob.size()))
        return where + " has a literal out of range";
      copy.literal = true;
      copy.bytes = blob.substr(static_cast<size_t>(literal), static_cast<size_t>(bytes));
    } else {
      // Float32 data (converted to the output's type), or a 16-bit float output's own type.
      const bool storage16 = out.dtype == TF_DTYPE_FLOAT16 || out.dtype == TF_DTYPE_BFLOAT16;
      auto source_ok = [&](const GpuModelImage::Tensor& t) {
        return t.elements == out.elements && t.dtype == (storage16 ? out.dtype : TF_DTYPE_FLOAT32);
      };
      bool ok = arg_ok(copy.from, out.elements * (storage16 ? 2 : 4));
      if (storage16 && (copy.from.kind == GpuModelImage::ArgKind::Constant ||
                        copy.from.kind == GpuModelImage::ArgKind::Arena))
        ok = false;  // 16-bit outputs are copied only from the model's 16-bit buffers
      if (copy.from.kind == GpuModelImage::ArgKind::Input)
        ok = ok && source_ok(m.inputs[static_cast<size_t>(copy.from.index)]);
      if (copy.from.kind == GpuModelImage::ArgKind::Output)
        ok = ok && source_ok(m.outputs[static_cast<size_t>(copy.from.index)]);
      if (!ok) return where + " reads outside the model's buffers";
    }
    m.copies.push_back(std::move(copy));
  }
  if (w.at() != w.size())
    return "it has " + std::to_string(w.size() - w.at()) + " words past its end";
  return "";
}

}  // namespace

std::string read_gpu_model_image(const std::string& library, GpuModelImage& m) {
  std::string s;
  if (std::string why = find_section(library, TF_GPU_MODEL_SECTION, s); !why.empty()) return why;
  return read_gpu_model_section(s, m);
}

std::string read_gpu_model_section(const std::string& s, GpuModelImage& m) {
  if (s.size() < TF_GPU_MODEL_HEADER_BYTES || std::memcmp(s.data(), TF_GPU_MODEL_MAGIC, 8) != 0)
    return "its " TF_GPU_MODEL_SECTION " section is not a GPU model (no magic number)";
  uint64_t h[6];
  std::memcpy(h, s.data() + 8, sizeof h);
  for (int k = 0; k < 3; ++k) {
    if (!within(h[2 * k], h[2 * k + 1], s.size()))
      return "its " TF_GPU_MODEL_SECTION " section is truncated";
  }
  if (h[1] % 8 != 0 || h[1] < 8 * TF_GPU_PLAN_HEADER_WORDS) return "its plan is truncated";
  std::vector<int64_t> words(h[1] / 8);
  std::memcpy(words.data(), s.data() + h[0], h[1]);
  const std::string blob = s.substr(h[2], h[3]);
  const std::string constants = s.substr(h[4], h[5]);
  // The plans, one per shape bucket, back to back: each read and checked, bucket 0 kept (the
  // others' modules are bucket 0's, compared by their places in the blob, not copied).
  m = GpuModelImage();
  int buckets = 0;
  ModuleTable first_modules;
  for (size_t at = 0; at < words.size();) {
    const std::string which = buckets == 0 ? "" : "bucket " + std::to_string(buckets) + "'s plan: ";
    if (buckets == TF_GPU_MAX_PLANS)
      return "its plan is damaged: more than " + std::to_string(TF_GPU_MAX_PLANS) + " plans";
    if (words.size() - at < TF_GPU_PLAN_HEADER_WORDS)
      return "its plan is damaged: " + which + "it ends early";
    const int64_t size = words[at + TF_GPU_PLAN_WORDS];
    if (size < TF_GPU_PLAN_HEADER_WORDS || static_cast<uint64_t>(size) > words.size() - at)
      return "its plan is damaged: " + which + "a plan of " + std::to_string(size) + " words";
    GpuModelImage plan;
    ModuleTable table;
    const std::string why =
        read_plan(std::vector<int64_t>(words.begin() + static_cast<std::ptrdiff_t>(at),
                                       words.begin() + static_cast<std::ptrdiff_t>(at + size)),
                  blob, constants.size(), plan, buckets == 0 ? nullptr : &first_modules, table);
    if (!why.empty()) return "its plan is damaged: " + which + why;
    if (buckets == 0) {
      m = std::move(plan);
      first_modules = std::move(table);
    } else if (plan.platform != m.platform || table.size() != first_modules.size() ||
               plan.inputs.size() != m.inputs.size() || plan.outputs.size() != m.outputs.size()) {
      return "its plan is damaged: " + which +
             "its platform, modules, inputs or outputs are not bucket 0's";
    }
    ++buckets;
    at += static_cast<size_t>(size);
  }
  m.constants = constants;
  m.buckets = buckets;
  return "";
}

}  // namespace tf
