// Content hashes.
#pragma once

#include <string>

namespace tf {

// Hex SHA-256 of `data` (OpenSSL): uploads, kept models, lease directories.
std::string sha256_hex(const std::string& data);

}  // namespace tf
