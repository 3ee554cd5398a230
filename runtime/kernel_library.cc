#include "runtime/kernel_library.h"

#include "base/bfloat16.h"
#include "base/float16.h"
#include "runtime/gpu_runtime.h"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <cstring>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

namespace tf {

namespace {

#if defined(__x86_64__)
constexpr int kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kMachine = EM_AARCH64;
#elif defined(__arm__)
constexpr int kMachine = EM_ARM;
#else
constexpr int kMachine = EM_NONE;  // unchecked
#endif

const char* machine_name(int m) {
  switch (m) {
    case EM_X86_64: return "x86_64";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_386: return "i386";
    case EM_RISCV: return "riscv";
    case 224: return kind_name(TargetKind::Rocm).data();  // EM_AMDGPU: a code object for AMD GPUs (Target::arch_name())
    default: return "another architecture";
  }
}

// The checks on one ELF class (Elf64_* or Elf32_* types).
template <typename Ehdr, typename Phdr, typename Shdr>
std::string check_elf(std::string_view data, bool this_machine) {
  const uint64_t size = data.size();
  if (size < sizeof(Ehdr)) return "truncated: " + std::to_string(size) + " bytes, shorter than an ELF header";
  Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (eh.e_type != ET_DYN) return "not a shared library (ELF type " + std::to_string(eh.e_type) + ")";
  if (this_machine && kMachine != EM_NONE && eh.e_machine != kMachine) {
    return std::string("built for ") + machine_name(eh.e_machine) + ", but this machine is " + machine_name(kMachine);
  }
  auto within = [&](uint64_t offset, uint64_t count, uint64_t entry) {
    return offset <= size && count <= (size - offset) / std::max<uint64_t>(entry, 1);
  };
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Phdr) || !within(eh.e_phoff, eh.e_phnum, sizeof(Phdr))) {
    return "truncated or corrupt: its program headers lie outside the file of " + std::to_string(size) + " bytes";
  }
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    Phdr ph;
    std::memcpy(&ph, data.data() + eh.e_phoff + i * sizeof(Phdr), sizeof ph);
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset) {
      return "truncated: segment " + std::to_string(i) + " ends at byte " +
             std::to_string(static_cast<uint64_t>(ph.p_offset) + ph.p_filesz) + " of a file of " +
             std::to_string(size) + " bytes";
    }
  }
  if (eh.e_shoff != 0 && (eh.e_shentsize != sizeof(Shdr) || !within(eh.e_shoff, eh.e_shnum, sizeof(Shdr)))) {
    return "truncated: its section headers lie outside the file of " + std::to_string(size) + " bytes";
  }
  return "";
}

}  // namespace

std::string check_kernel_library(std::string_view data, bool this_machine) {
  if (data.empty()) return "empty (0 bytes)";
  if (data.size() < EI_NIDENT || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) {
    return "not an ELF file (no ELF magic number)";
  }
  if (data[EI_DATA] != ELFDATA2LSB) return "not a little-endian ELF file";
  if (data[EI_CLASS] == ELFCLASS64) {
    if (this_machine && sizeof(void*) != 8) return "a 64-bit library, but this machine is 32-bit";
    return check_elf<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(data, this_machine);
  }
  if (data[EI_CLASS] == ELFCLASS32) {
    if (this_machine && sizeof(void*) != 4) return "a 32-bit library, but this machine is 64-bit";
    return check_elf<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(data, this_machine);
  }
  return "unknown ELF class " + std::to_string(static_cast<int>(data[EI_CLASS]));
}

KernelLibrary::KernelLibrary(const std::string& path, const std::string& function) {
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) throw std::runtime_error("cannot load kernel library " + path + ": " + dlerror());
  fn_ = dlsym(handle_, function.c_str());
  if (!fn_) {
    std::string err = dlerror();
    dlclose(handle_);
    throw std::runtime_error("kernel library " + path + " has no function " + function + ": " + err);
  }
}

KernelLibrary::~KernelLibrary() {
  if (handle_) dlclose(handle_);
}

namespace {

// A call of `fn` with the N float pointers of `a` (N = the sequence's length).
template <size_t... I>
int call_with(void* fn, const std::vector<float*>& a, std::index_sequence<I...>) {
  using F = int (*)(std::conditional_t<true, float*, std::integral_constant<size_t, I>>...);
  return reinterpret_cast<F>(fn)(a[I]...);
}

template <size_t... N>
constexpr auto make_callers(std::index_sequence<N...>) {
  return std::array<int (*)(void*, const std::vector<float*>&), sizeof...(N)>{
      [](void* fn, const std::vector<float*>& a) { return call_with(fn, a, std::make_index_sequence<N + 1>{}); }...};
}

// Kernels have at most 5 arguments (inputs, bias, output, and a packed copy); tests that
// emulate a GPU block add its shared buffers and thread indices (compiler/gpu.h
// emulate_gpu_thread): a block reduction has up to 8 shared buffers (its partial results and
// tree), a kernel of rows one per reduction.
constexpr size_t kMaxCallArgs = 32;
constexpr auto kCallers = make_callers(std::make_index_sequence<kMaxCallArgs>{});

}  // namespace

int KernelLibrary::call(const std::vector<float*>& a) const {
  if (a.empty() || a.size() > kMaxCallArgs) {
    throw std::invalid_argument("kernels take 1 to " + std::to_string(kMaxCallArgs) + " arguments, not " +
                                std::to_string(a.size()));
  }
  return kCallers[a.size() - 1](fn_, a);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

namespace {

using Clock = std::chrono::steady_clock;

// Calls that fill min_repeat_ms at `per_call_s` a call (at most 2^24).
int calls_to_fill(const TimingOptions& o, double per_call_s) {
  return static_cast<int>(std::min<double>(std::ceil(o.min_repeat_ms / (std::max(per_call_s, 1e-12) * 1e3)), 1 << 24));
}

// The warm-up (kernel_library.h): until two calls in a row ran at the fastest speed seen.
// Returns the fastest call's time; r.status is set when a call failed.
double warm_up(const TimedCall& call, const TimingOptions& o, TimingResult& r) {
  const double warmup_limit_s = kWarmupFactor * std::max(o.min_repeat_ms, kMinWarmupMs) / 1e3;
  const double min_warmup_s = std::max(o.min_warmup_ms, 0.0) / 1e3;
  double fastest = 0;
  int steady = 0;
  for (auto begin = Clock::now();;) {
    double elapsed = seconds_since(begin);
    if (elapsed >= min_warmup_s && r.warmup_calls >= 2 && (steady >= 2 || elapsed >= min_warmup_s + warmup_limit_s)) break;
    auto start = Clock::now();
    r.status = call();
    double s = seconds_since(start);
    ++r.warmup_calls;
    if (r.status != 0) return fastest;
    bool faster = r.warmup_calls == 1 || s < fastest / 1.2;
    steady = !faster && s <= 1.25 * fastest ? steady + 1 : 0;
    fastest = r.warmup_calls == 1 ? s : std::min(fastest, s);
  }
  return fastest;
}

}  // namespace

TimingResult time_kernel(const KernelLibrary& k, const std::vector<float*>& args, const TimingOptions& o) {
  return time_kernels({&k}, {args}, o)[0];
}

std::vector<TimingResult> time_kernels(const std::vector<const KernelLibrary*>& ks,
                                       const std::vector<std::vector<float*>>& args, const TimingOptions& o) {
  if (args.size() != ks.size()) throw std::invalid_argument("time_kernels: one argument list per kernel");
  std::vector<TimedCall> calls;
  for (size_t i = 0; i < ks.size(); ++i) calls.push_back([k = ks[i], &a = args[i]] { return k->call(a); });
  return time_calls(calls, o);
}

std::vector<TimingResult> time_calls(const std::vector<TimedCall>& ks, const TimingOptions& o) {
  if (ks.empty()) return {};
  std::vector<TimingResult> rs(ks.size());
  std::vector<int> repeat(ks.size(), std::max(o.repeat, 1)), recalibrations(ks.size(), 0);
  for (size_t i = 0; i < ks.size(); ++i) {
    TimingResult& r = rs[i];
    double fastest = warm_up(ks[i], o, r);
    if (r.status != 0) return rs;
    r.number = std::max(o.number, 1);
    if (fastest > 0) r.number = std::max(r.number, calls_to_fill(o, fastest));
    if (o.cut_slower_than_s > 0 && fastest > o.cut_slower_than_s) {
      repeat[i] = 1;
      r.cut = true;
    }
  }
  std::vector<char> flush;
  if (o.flush_cache) flush.resize(kFlushBytes);
  // Every round is walked: a cut kernel whose first sample beats the cut takes the full count.
  const int max_repeat = std::max(o.repeat, 1);
  bool first = true;
  size_t last = ks.size() - 1;  // the kernel called last (warmed up last)
  for (int rep = 0; rep < max_repeat; ++rep) {
    for (size_t i = 0; i < ks.size(); ++i) {
      TimingResult& r = rs[i];
      if (rep >= repeat[i]) continue;
      for (;;) {
        if (!first && o.cooldown_ms > 0) {
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.cooldown_ms));
        }
        first = false;
        if (i != last && o.rewarm_ms > 0) {
          for (auto begin = Clock::now(); seconds_since(begin) * 1e3 < o.rewarm_ms;) {
            r.status = ks[i]();
            ++r.warmup_calls;
            if (r.status != 0) return rs;
          }
        }
        last = i;
        if (!flush.empty()) {
          // Volatile stores: the compiler may not drop them.
          volatile char* p = flush.data();
          for (size_t b = 0; b < flush.size(); b += 64) p[b] = static_cast<char>(b + static_cast<size_t>(rep));
        }
        auto start = Clock::now();
        for (int c = 0; c < r.number; ++c) {
          r.status = ks[i]();
          if (r.status != 0) return rs;
        }
        double s = seconds_since(start);
        // Far shorter than asked: the warm-up ended on a plateau of slow calls. The sample is
        // warm-up too, and `number` is raised to the speed it showed.
        if (s * 1e3 < o.min_repeat_ms / 2 && recalibrations[i] < kMaxRecalibrations) {
          ++recalibrations[i];
          r.warmup_calls += r.number;
          r.number = std::max(r.number, calls_to_fill(o, s / r.number));
          continue;
        }
        r.samples_s.push_back(s / r.number);
        // The cut came from one warm-up call; a sample averages `number` calls. Where they
        // disagree (a sub-microsecond kernel's single call is mostly the clock's own cost:
        // 0.2 us calls timed at over 0.5 us on an Intel VM), the sample decides: the kernel
        // is a contender after all and takes its full samples now, not in another run.
        if (r.cut && r.samples_s.back() <= o.cut_slower_than_s) {
          r.cut = false;
          repeat[i] = max_repeat;
        }
        break;
      }
    }
  }
  return rs;
}

void fill_random(float* data, int64_t n, uint64_t seed) {
  uint64_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = static_cast<float>(static_cast<double>(z >> 40) / double(1 << 24) * 2.0 - 1.0);
  }
}

int arg_dtype_bytes(const std::string& dtype) {
  if (dtype.empty() || dtype == "float32" || dtype == "int32" || dtype == "bfloat16x2" || dtype == "float16x2") return 4;
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "int8" || dtype == "uint8") return 1;
  return 0;
}

void fill_typed(const std::string& dtype, float* data, int64_t n, uint64_t seed) {
  if (dtype == "bfloat16x2") {
    // Word i: fill_random's values 2i (low half) and 2i + 1 (high half), truncated to
    // bfloat16; the word's bits held in the float.
    std::vector<float> v(static_cast<size_t>(n) * 2);
    fill_random(v.data(), n * 2, seed);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t lo = std::bit_cast<uint32_t>(v[static_cast<size_t>(2 * i)]) >> 16;
      const uint32_t hi = std::bit_cast<uint32_t>(v[static_cast<size_t>(2 * i + 1)]) & 0xFFFF0000u;
      data[i] = std::bit_cast<float>(hi | lo);
    }
    return;
  }
  if (dtype == "float16x2") {
    // Word i: fill_random's values 2i (low half) and 2i + 1 (high half) rounded to float16.
    std::vector<float> v(static_cast<size_t>(n) * 2);
    fill_random(v.data(), n * 2, seed);
    for (int64_t i = 0; i < n; ++i) data[i] = f16_pair(v[static_cast<size_t>(2 * i)], v[static_cast<size_t>(2 * i + 1)]);
    return;
  }
  fill_random(data, n, seed);
  if (dtype == "float16" || dtype == "bfloat16") {
    // Rounded to the type (to nearest, ties to even): values a reference reads exactly.
    float (*round)(float) = dtype == "float16" ? round_f16 : round_bf16;
    for (int64_t i = 0; i < n; ++i) data[i] = round(data[i]);
    return;
  }
  if (arg_dtype_bytes(dtype) == 4 && dtype != "int32") return;
  const bool u8 = dtype == "uint8";
  for (int64_t i = 0; i < n; ++i) {
    double v = std::floor((double(data[i]) + (u8 ? 1.0 : 0.0)) * 128.0);
    data[i] = static_cast<float>(std::clamp(v, u8 ? 0.0 : -128.0, u8 ? 255.0 : 127.0));
  }
}

void store_as(const std::string& dtype, float* data, int64_t n) {
  // Forwards: element i's bytes end at or before float i + 1's start, which is read later.
  if (dtype == "int8") {
    auto* out = reinterpret_cast<int8_t*>(data);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(data[i]);
  } else if (dtype == "uint8") {
    auto* out = reinterpret_cast<uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(data[i]);
  } else if (dtype == "int32") {
    for (int64_t i = 0; i < n; ++i) {
      auto v = static_cast<int32_t>(data[i]);
      std::memcpy(&data[i], &v, 4);
    }
  } else if (dtype == "float16" || dtype == "bfloat16") {
    auto* out = reinterpret_cast<uint16_t*>(data);
    uint16_t (*bits)(float) = dtype == "float16" ? f16_bits : bf16_bits;
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = bits(data[i]);
      std::memcpy(&out[i], &h, 2);
    }
  }
}

void load_as(const std::string& dtype, float* data, int64_t n) {
  // Backwards: float i's bytes start at or after element i's end, already read.
  if (dtype == "int8") {
    const auto* in = reinterpret_cast<const int8_t*>(data);
    for (int64_t i = n - 1; i >= 0; --i) data[i] = in[i];
  } else if (dtype == "uint8") {
    const auto* in = reinterpret_cast<const uint8_t*>(data);
    for (int64_t i = n - 1; i >= 0; --i) data[i] = in[i];
  } else if (dtype == "float16" || dtype == "bfloat16") {
    const auto* in = reinterpret_cast<const uint16_t*>(data);
    float (*value)(uint16_t) = dtype == "float16" ? f16_value : bf16_value;
    for (int64_t i = n - 1; i >= 0; --i) {
      uint16_t h;
      std::memcpy(&h, &in[i], 2);
      data[i] = value(h);
    }
  } else if (dtype == "int32") {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, &data[i], 4);
      data[i] = static_cast<float>(v);
    }
  }
}

std::string kernel_library_arch(const std::string& data) {
  // A GPU module: the kind of GPU it is for (PTX and cubins: cuda).
  if (std::optional<TargetKind> k = kind_of_module_format(gpu_module_kind(data))) return std::string(kind_name(*k));
  // e_machine sits at byte 18 in both ELF classes.
  if (data.size() < 20 || data.compare(0, 4, "\x7f" "ELF") != 0 || data[5] != ELFDATA2LSB) return "";
  uint16_t m;
  std::memcpy(&m, data.data() + 18, sizeof m);
  return machine_name(m);
}

}  // namespace tf
