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

// Why `d` is not a device description the tracker stores, or "".
inline std::string check_device_info(const tunefarm::v1::DeviceInfo& d) {
  for (std::string e : {check_length("device.cpu_model", d.cpu_model(), kMaxDeviceNameBytes),
                        check_length("device.gpu_name", d.gpu_name(), kMaxDeviceNameBytes),
                        check_length("device.server_version", d.server_version(), kMaxDeviceShortBytes),
                        check_length("device.arch", d.arch(), kMaxDeviceShortBytes),
                        check_length("device.gpu_arch", d.gpu_arch(), kMaxDeviceShortBytes)}) {
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
                        check_length("instance", r.instance(), kMaxInstanceBytes), check_device_info(r.device())}) {
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
