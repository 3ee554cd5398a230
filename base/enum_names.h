// Enums stored or shown as text: one table of (value, name) per enum, read both ways, so the
// text a database keeps is written in one place.
//
//   constexpr EnumName<JobState> kJobStates[] = {{JobState::Queued, "queued"}, ...};
//   const char* s = enum_name(kJobStates, JobState::Queued);          // "queued"
//   std::optional<JobState> j = enum_from_name(kJobStates, "queued");  // JobState::Queued
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace tf {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `v` in `table`; "" when the table lacks it.
template <typename E, std::size_t N>
constexpr const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const EnumName<E>& e : table) {
    if (e.value == v) return e.name;
  }
  return "";
}

// The value named `text` in `table`, or nullopt.
template <typename E, std::size_t N>
constexpr std::optional<E> enum_from_name(const EnumName<E> (&table)[N], std::string_view text) {
  for (const EnumName<E>& e : table) {
    if (text == e.name) return e.value;
  }
  return std::nullopt;
}

}  // namespace tf
