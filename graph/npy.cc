#include "graph/npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "compiler/error.h"

namespace tf::graph {

HostTensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UserError(str("cannot open ", path));
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
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
  std::string header = data.substr(start, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'")))
    throw UserError(str(path, ": header has no descr"));
  std::string descr = m[1];
  if (std::regex_search(header, std::regex("'fortran_order':\\s*True"))) {
    throw UserError(
        str(path, ": Fortran-ordered arrays are not supported (save with np.ascontiguousarray)"));
  }
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)")))
    throw UserError(str(path, ": header has no shape"));
  Shape shape;
  std::string dims = m[1];
  const std::regex number("[0-9]+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    shape.push_back(std::stoll(it->str()));
  }
  int64_t n = num_elements(shape);
  const char* body = data.data() + start + header_len;
  size_t avail = data.size() - start - header_len;
  const size_t width = descr == "<f4" || descr == "<i4"   ? 4
                       : descr == "<f8" || descr == "<i8" ? 8
                       : descr == "|b1"                   ? 1
                                                          : 0;
  if (width == 0) {
    throw UserError(str(path, ": element type '", descr,
                        "' is not supported (float32 '<f4', float64 '<f8', int64 '<i8', int32 "
                        "'<i4', bool '|b1')"));
  }
  if (avail < static_cast<size_t>(n) * width) {
    throw UserError(str(path, ": holds ", avail, " bytes of data for shape ", shape_str(shape)));
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
  const char* descr = t.dtype == DType::F32 ? "<f4" : t.dtype == DType::I64 ? "<i8" : "|b1";
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
  if (t.dtype == DType::F32) {
    f.write(reinterpret_cast<const char*>(t.f.data()), static_cast<std::streamsize>(t.f.size() * 4));
  } else if (t.dtype == DType::I64) {
    f.write(reinterpret_cast<const char*>(t.i.data()), static_cast<std::streamsize>(t.i.size() * 8));
  } else {
    for (int64_t x : t.i) f.put(x != 0 ? 1 : 0);
  }
  if (!f) throw UserError(str("cannot write ", path));
}

}  // namespace tf::graph
