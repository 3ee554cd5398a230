// Records for database tests.
#pragma once

#include <string>

#include "db/records.h"

namespace tf::db::testing {

// A well-formed ok record of matmul(M=m,N=n,K=k) on `target` with one knob `tile` and a
// single sample of `seconds`.
inline MeasureRecord record(int m, int n, int k, const std::string& target, int tile, double seconds,
                            const std::string& arch = "x86_64") {
  MeasureRecord r;
  r.workload = "matmul(M=" + std::to_string(m) + ",N=" + std::to_string(n) + ",K=" + std::to_string(k) +
               ",epilogue=none)";
  r.op = "matmul";
  r.params = {{"M", m}, {"N", n}, {"K", k}};
  r.flops = 2LL * m * n * k;
  r.target = target;
  r.arch = arch;
  r.device_key = "local";
  r.device_model = "test cpu";
  r.toolchain = "test";
  r.template_name = "dense.cpu.v1";
  r.config = {{"tile", tile}};
  r.samples_s = {seconds};
  r.settings.number = 1;
  r.settings.repeat = 1;
  r.measured_at = 1.7e9 + tile;
  return r;
}

}  // namespace tf::db::testing
