// tunefarm-build-worker: compiles one tuning candidate in a process of its own.
//
//   tunefarm-build-worker < {"workload": ..., "target": ..., "config": {...}, "output": "k.so"}
//
// Writes the library and its sidecar, then prints {"ok": true, "compile_s": S} or
// {"ok": false, "error": "..."}.
//
//   tunefarm-build-worker --serve
//
// Answers one request per line, one reply line each, until its input ends: how the tuner's
// LocalBuilder (tuner/builder.h) keeps its workers up across candidates (a compiler crash or
// hang still costs that candidate only: the builder starts a fresh worker), and the cost
// model's feature requests ({"features": [config, ...]}).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "tuner/builder.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--serve") {
    for (std::string line; std::getline(std::cin, line);) {
      std::printf("%s\n", tf::build_worker_main(line).dump().c_str());
      std::fflush(stdout);
    }
    return 0;
  }
  std::string request((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::printf("%s\n", tf::build_worker_main(request).dump().c_str());
  return 0;
}
