#include "base/hash.h"

#include <openssl/sha.h>

namespace tf {

std::string sha256_hex(const std::string& data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof md);
  for (unsigned char c : md) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

}  // namespace tf
