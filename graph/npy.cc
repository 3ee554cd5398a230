#include "graph/npy.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "graph/element_types.h"
#include "graph/memory_budget.h"
#include "graph/ops.h"

namespace tf::graph {

namespace {

// numpy's header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline. Parsed strictly: the three keys once each, nothing else.
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  Shape shape;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      std::string key = quoted();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (seen_descr) fail("'descr' appears twice");
        seen_descr = true;
        h.descr = quoted();
      } else if (key == "fortran_order") {
        if (seen_fortran) fail("'fortran_order' appears twice");
        seen_fortran = true;
        h.fortran = boolean();
      } else if (key == "shape") {
        if (seen_shape) fail("'shape' appears twice");
        seen_shape = true;
        h.shape = tuple();
      } else {
        fail(str("unknown key '", key, "'"));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail(str("expected ',' or '}' at offset ", pos_));
    }
    expect('}');
    // Padding: spaces, then the newline numpy ends the header with.
    for (; pos_ < s_.size(); ++pos_) {
      if (s_[pos_] != ' ' && s_[pos_] != '\n' && s_[pos_] != '\0') fail(str("junk after the header at offset ", pos_));
    }
    if (!seen_descr) fail("header has no descr");
    if (!seen_shape) fail("header has no shape");
    if (!seen_fortran) fail("header has no fortran_order");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { throw UserError(str(path_, ": bad .npy header: ", why)); }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail(str("expected '", c, "' at offset ", pos_));
    ++pos_;
  }
  std::string quoted() {
    char q = peek();
    if (q != '\'' && q != '"') fail(str("expected a quoted string at offset ", pos_));
    size_t close = s_.find(q, pos_ + 1);
    if (close == std::string::npos || close - pos_ > 64) fail("unterminated or overlong string");
    std::string v = s_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    return v;
  }
  bool boolean() {
    if (s_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (s_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail(str("fortran_order is neither True nor False at offset ", pos_));
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      size_t start = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      std::string digits = s_.substr(start, pos_ - start);
      if (digits.empty()) fail(str("shape: expected a dimension (a non-negative integer) at offset ", start, ", found '",
                                   s_.substr(start, 8), "'"));
      if (digits.size() > 12) fail(str("shape: dimension ", digits, " is too large"));
      shape.push_back(std::stoll(digits));
      if (shape.size() > 32) fail("shape: more than 32 dimensions");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail(str("shape: expected ',' or ')' at offset ", pos_));
    }
    expect(')');
    return shape;
  }

  const std::string& path_;
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

HostTensor read_npy(const std::string& path, int64_t max_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UserError(str("cannot open ", path));
  // Not a device or a pipe: /dev/zero would be read without end.
  if (!std::filesystem::is_regular_file(path, ec)) throw UserError(str(path, " is not a regular file"));
  uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  if (!ec && file_bytes > static_cast<uintmax_t>(max_bytes)) {
    throw UserError(str(path, ": ", format_bytes(static_cast<int64_t>(std::min<uintmax_t>(file_bytes, INT64_MAX))),
                        ", over the memory budget of ", format_bytes(max_bytes), " (--max-memory)"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(str("cannot open ", path));
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_npy(data, path);
}

HostTensor parse_npy(const std::string& data, const std::string& path) {
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw UserError(str(path, ": not a .npy file"));
  int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | (static_cast<unsigned char>(data[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) throw UserError(str(path, ": truncated header"));
    uint32_t len = 0;
    std::memcpy(&len, data.data() + 8, 4);
    header_len = len;
    start = 12;
  } else {
    throw UserError(str(path, ": .npy format version ", major, " is not supported"));
  }
  if (data.size() < start + header_len) throw UserError(str(path, ": truncated header"));
  NpyHeader h = HeaderParser(path, data.substr(start, header_len)).parse();
  const std::string& descr = h.descr;
  if (h.fortran) {
    throw UserError(
        str(path, ": Fortran-ordered arrays are not supported (save with np.ascontiguousarray)"));
  }
  Shape shape = h.shape;
  try {
    check_tensor_size("the array", shape);
  } catch (const UserError& e) {
    throw UserError(str(path, ": ", e.what()));
  }
  int64_t n = num_elements(shape);
  const char* body = data.data() + start + header_len;
  size_t avail = data.size() - start - header_len;
  const size_t width = descr == "<f4" || descr == "<i4"   ? 4
                       : descr == "<f8" || descr == "<i8" ? 8
                       : descr == "<f2"                   ? 2
                       : descr == "|b1"                   ? 1
                                                          : 0;
  if (width == 0) {
    throw UserError(
        str(path, ": element type '", descr,
            "' is not supported (float32 '<f4', float64 '<f8', float16 '<f2', int64 '<i8', int32 "
            "'<i4', bool '|b1')"));
  }
  if (avail != static_cast<size_t>(n) * width) {
    throw UserError(str(path, ": holds ", avail, " bytes of data for shape ", shape_str(shape), " (",
                        static_cast<size_t>(n) * width, " expected)"));
  }
  if (descr == "<f2") {
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) {
      uint16_t h;
      std::memcpy(&h, body + k * 2, 2);
      v[k] = storage16_value(DType::F16, h);
    }
    return HostTensor::floats(shape, std::move(v), DType::F16);
  }
  if (descr == "<f4" || descr == "<f8") {
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) {
      if (width == 4) {
        std::memcpy(&v[k], body + k * 4, 4);
      } else {
        double d;
        std::memcpy(&d, body + k * 8, 8);
        v[k] = static_cast<float>(d);
      }
    }
    return HostTensor::floats(shape, std::move(v));
  }
  std::vector<int64_t> v(n);
  for (int64_t k = 0; k < n; ++k) {
    if (width == 8) {
      std::memcpy(&v[k], body + k * 8, 8);
    } else if (width == 4) {  // int32, widened: int64 is the graph's integer type
      int32_t x;
      std::memcpy(&x, body + k * 4, 4);
      v[k] = x;
    } else {
      v[k] = body[k] != 0;
    }
  }
  return HostTensor::ints(shape, std::move(v), width == 1 ? DType::Bool : DType::I64);
}

void write_npy(const std::string& path, const HostTensor& t) {
  std::string shape = "(";
  for (int64_t d : t.shape) shape += std::to_string(d) + ",";
  if (t.shape.size() > 1) shape.pop_back();
  shape += ")";
  // bfloat16, which NumPy has no type for, as float32 (exact).
  const char* descr = t.dtype == DType::F32 || t.dtype == DType::BF16 ? "<f4"
                      : t.dtype == DType::F16                         ? "<f2"
                      : t.dtype == DType::I64                         ? "<i8"
                                                                      : "|b1";
  std::string header = str("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64 bytes.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) throw UserError(str("cannot write ", path));
  f.write("\x93NUMPY\x01\x00", 8);
  auto len = static_cast<uint16_t>(header.size());
  char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(lb, 2);
  f << header;
  if (t.dtype == DType::F32 || t.dtype == DType::BF16) {
    f.write(reinterpret_cast<const char*>(t.f.data()), static_cast<std::streamsize>(t.f.size() * 4));
  } else if (t.dtype == DType::F16) {
    for (float x : t.f) {
      const uint16_t h = storage16_bits(DType::F16, x);
      f.write(reinterpret_cast<const char*>(&h), 2);
    }
  } else if (t.dtype == DType::I64) {
    f.write(reinterpret_cast<const char*>(t.i.data()), static_cast<std::streamsize>(t.i.size() * 8));
  } else {
    for (int64_t x : t.i) f.put(x != 0 ? 1 : 0);
  }
  if (!f) throw UserError(str("cannot write ", path));
}

HostTensor npy_as_input(HostTensor t, DType want) {
  if (want == DType::BF16 && t.dtype == DType::F32) {
    for (float& x : t.f) x = round_to(DType::BF16, x);
    t.dtype = DType::BF16;
  }
  return t;
}

}  // namespace tf::graph
