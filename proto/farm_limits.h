// The bounds on what a board tells the tracker and a tuner asks of it: every string and count
// that comes from outside has one, checked by the tracker before it stores anything, so no
// caller can grow its memory or its replies (a Summary) without limit.
//
// Boards check their own key and truncate what they read from the machine (/proc/cpuinfo, the
// GPU driver) to these sizes before registering, so a real board is never refused for them.
#pragma once

#include <cstdint>
#include <string>

#include "proto/tunefarm.pb.h"

namespace tf::farm {

// A key names a class of boards (rpi4, cuda-sm90): 1 to 64 of A-Z a-z 0-9 . _ - + : @
constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kMaxBoardIdBytes = 256;
constexpr size_t kMaxAddressBytes = 512;
constexpr size_t kMaxTargetBytes = 1024;
constexpr size_t kMaxInstanceBytes = 256;
constexpr size_t kMaxUserBytes = 128;
// DeviceInfo's strings: models and names of CPUs and GPUs, versions and architectures.
constexpr size_t kMaxDeviceNameBytes = 256;   // cpu_model, gpu_name
constexpr size_t kMaxDeviceShortBytes = 64;   // server_version, arch, gpu_arch
constexpr int32_t kMaxDeviceCores = 1 << 20;
// GPUs one tunefarm-rpc-server serves as boards of their own (--device cuda:all): a host has
// at most 8 or 16.
constexpr int kMaxBoardsPerHost = 64;

// Why `key` is not a valid board key, or "" when it is.
inline std::string check_key(const std::string& key) {
  if (key.empty()) return "the key is empty";
  if (key.size() > kMaxKeyBytes) {
    return "key of " + std::to_string(key.size()) + " bytes is longer than " + std::to_string(kMaxKeyBytes);
  }
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '+' || c == ':' || c == '@';
    if (!ok) {
      return "key '" + key + "' has the character " + std::to_string(static_cast<unsigned char>(c)) +
             " (keys use A-Z a-z 0-9 . _ - + : @)";
    }
  }
  return "";
}

// Why a string field is too long, or "".
inline std::string check_length(const char* field, const std::string& value, size_t limit) {
  if (value.size() <= limit) return "";
  return std::string(field) + " of " + std::to_string(value.size()) + " bytes is longer than " +
         std::to_string(limit);
}

// Why a string field that is printed (farm status, the dashboard, logs) is not text, or "":
// control characters (C0, DEL, and C1 as UTF-8) could move a terminal's cursor or clear its
// screen when printed.
inline std::string check_printable(const char* field, const std::string& value) {
  for (size_t i = 0; i < value.size(); ++i) {
    auto c = static_cast<unsigned char>(value[i]);
    bool c1 = c == 0xC2 && i + 1 < value.size() && static_cast<unsigned char>(value[i + 1]) >= 0x80 &&
              static_cast<unsigned char>(value[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      return std::string(field) + " has the control character " + std::to_string(c1 ? 0x80 + (value[i + 1] & 0x1F) : c) +
             " at byte " + std::to_string(i) + " (only printable text is stored)";
    }
  }
  return "";
}

// Why `address` is not HOST:PORT (a host name or IPv4 address, or an IPv6 address in
// brackets, and a port 1-65535), or "". Tuners dial what boards register.
inline std::string check_address(const std::string& address) {
  auto bad = [&](const std::string& why) {
    std::string shown;
    for (char c : address.substr(0, 80)) shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) ? '?' : c;
    return "address '" + shown + "' is not HOST:PORT: " + why;
  };
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no ':PORT'");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return bad("the port must be a number in 1..65535");
  }
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']' ||
        host.find(':') == std::string::npos ||
        host.find_first_not_of("0123456789abcdefABCDEF:.%", 1) < std::min(host.find('%'), host.size() - 1) ||
        host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:.%_-", 1) != host.size() - 1) {
      return bad("an IPv6 host is hex digits, ':' and '.' in brackets (and a %zone)");
    }
    return "";
  }
  if (host.size() > 253 || host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
                               std::string::npos) {
    return bad("a host is a name or an IPv4 address (letters, digits, '.', '-', '_'), or [IPv6]");
  }
  return "";
}

// Why `d` is not a device description the tracker stores, or "".
inline std::string check_device_info(const tunefarm::v1::DeviceInfo& d) {
  for (std::string e : {check_length("device.cpu_model", d.cpu_model(), kMaxDeviceNameBytes),
                        check_length("device.gpu_name", d.gpu_name(), kMaxDeviceNameBytes),
                        check_length("device.server_version", d.server_version(), kMaxDeviceShortBytes),
                        check_length("device.arch", d.arch(), kMaxDeviceShortBytes),
                        check_length("device.gpu_arch", d.gpu_arch(), kMaxDeviceShortBytes),
                        check_printable("device.cpu_model", d.cpu_model()), check_printable("device.gpu_name", d.gpu_name()),
                        check_printable("device.server_version", d.server_version()),
                        check_printable("device.arch", d.arch()), check_printable("device.gpu_arch", d.gpu_arch())}) {
    if (!e.empty()) return e;
  }
  if (d.cores() < 0 || d.cores() > kMaxDeviceCores) return "device.cores " + std::to_string(d.cores()) + " is out of range";
  if (d.memory_bytes() < 0) return "device.memory_bytes " + std::to_string(d.memory_bytes()) + " is negative";
  if (d.gpu_memory_bytes() < 0) return "device.gpu_memory_bytes " + std::to_string(d.gpu_memory_bytes()) + " is negative";
  return "";
}

// Why a registration is refused before the tracker looks at its state, or "".
inline std::string check_register(const tunefarm::v1::RegisterRequest& r) {
  if (r.board_id().empty() || r.key().empty() || r.address().empty()) return "register needs board_id, key and address";
  for (std::string e : {check_key(r.key()), check_length("board_id", r.board_id(), kMaxBoardIdBytes),
                        check_length("address", r.address(), kMaxAddressBytes),
                        check_length("target", r.target(), kMaxTargetBytes),
                        check_length("instance", r.instance(), kMaxInstanceBytes), check_printable("board_id", r.board_id()),
                        check_address(r.address()), check_printable("target", r.target()),
                        check_printable("instance", r.instance()), check_device_info(r.device())}) {
    if (!e.empty()) return "register: " + e;
  }
  return "";
}

// `s` cut to at most `limit` bytes, not inside a UTF-8 sequence.
inline std::string truncate_utf8(std::string s, size_t limit) {
  if (s.size() <= limit) return s;
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

}  // namespace tf::farm
