// tunefarm-rpc-server: the program on each board. Registers with the tracker, heartbeats,
// re-registers whenever the tracker forgot it or went away, and serves the Board service.
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "proto/daemon.h"
#include "proto/farm_limits.h"
#include "runtime/gpu_runtime.h"
#include "runtime/child_process.h"
#include "proto/credentials.h"
#include "rpc_server/board_service.h"
#include "runtime/sandbox.h"

namespace {

namespace fs = std::filesystem;
namespace pb = tunefarm::v1;
constexpr const char* kVersion = "0.1.0";

// Keeps the board registered until `stop`: heartbeats, and registers again with backoff
// when a heartbeat fails or the tracker does not know the board.
void registration_loop(pb::Tracker::Stub& tracker, const pb::RegisterRequest& reg, const std::string& token,
                       tf::farm::BoardService& board, int lease_check_ms, std::atomic<bool>& stop) {
  bool registered = false, refused_logged = false;
  int interval_ms = 1000, backoff_ms = 200;
  auto last_collect = std::chrono::steady_clock::now();
  while (!stop) {
    grpc::ClientContext ctx;
    tf::farm::add_token(ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    if (!registered) {
      pb::RegisterReply reply;
      grpc::Status s = tracker.Register(&ctx, reg, &reply);
      if (s.ok()) {
        registered = true;
        refused_logged = false;
        interval_ms = std::max(reply.heartbeat_interval_ms(), 10);
        backoff_ms = 200;
        std::printf("registered with the tracker as %s (key %s)\n", reg.board_id().c_str(), reg.key().c_str());
        std::fflush(stdout);
      } else {
        bool refused = s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                       s.error_code() == grpc::StatusCode::ALREADY_EXISTS ||
                       s.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
        if (refused && !refused_logged) {
          // Said once; we keep trying, as a board of the same id that died frees its id when
          // the tracker times it out.
          std::fprintf(stderr, "error: the tracker refused to register this board: %s\n", s.error_message().c_str());
          refused_logged = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
        backoff_ms = std::min(backoff_ms * 2, 5000);
        continue;
      }
    } else {
      pb::HeartbeatRequest hb;
      hb.set_board_id(reg.board_id());
      hb.set_instance(reg.instance());
      pb::HeartbeatReply reply;
      grpc::Status s = tracker.Heartbeat(&ctx, hb, &reply);
      if (!s.ok() || !reply.known()) {
        registered = false;
        continue;
      }
    }
    if (std::chrono::steady_clock::now() - last_collect > std::chrono::milliseconds(lease_check_ms)) {
      board.collect_lease_dirs();
      last_collect = std::chrono::steady_clock::now();
    }
    for (int waited = 0; waited < interval_ms && !stop; waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

// Removes the work directories of boards that are gone (killed with -9, crashed): each live
// board holds an exclusive lock on the ".lock" file in its directory for as long as it runs.
void remove_stale_work_dirs(const fs::path& root) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    if (e.path().filename().string().rfind("tunefarm-board-", 0) != 0 || !e.is_directory(ec)) continue;
    int fd = open((e.path() / ".lock").c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      // No lock file: a board that is starting right now, or one killed before it made it.
      auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), ec);
      if (!ec && age > std::chrono::minutes(1)) fs::remove_all(e.path(), ec);
      continue;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      fs::remove_all(e.path(), ec);
      std::printf("removed the work directory of a board that is gone: %s\n", e.path().c_str());
    }
    close(fd);
  }
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// `name` as an absolute path: as given when it has a slash, else the first executable of that
// name in PATH (the runner is started with posix_spawn, which does not search).
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) != 0) throw tf::farm::ConfigError("--runner-prefix: " + name + " is not an executable");
    return name;
  }
  const char* path = getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw tf::farm::ConfigError("--runner-prefix: " + name + " is not found in PATH");
}

// Asks the runner which GPU `device` is (tunefarm-board-runner --probe): the runner, not this
// long-lived server, loads the vendor's driver. Throws ConfigError with the runner's reason.
pb::GpuProbe probe_gpu(const std::string& runner, const std::string& device, double timeout_s) {
  tf::ChildResult r = tf::run_child({runner, "--probe", device}, "", timeout_s);
  if (!r.started) throw tf::farm::ConfigError("--device " + device + ": cannot start " + runner + ": " + r.err);
  if (r.timed_out) {
    std::ostringstream t;
    t << timeout_s;
    throw tf::farm::ConfigError("--device " + device + ": the runner's probe did not answer within " + t.str() +
                                " s (a stuck driver; --probe-timeout-s)");
  }
  pb::GpuProbe p;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &p).ok()) {
    std::string how = r.signal ? "killed by signal " + std::to_string(r.signal) : "status " + std::to_string(r.exit_status);
    throw tf::farm::ConfigError("--device " + device + ": the runner's probe failed (" + how + "): " + r.out);
  }
  if (!p.error().empty()) throw tf::farm::ConfigError("--device " + p.error());
  return p;
}

// This machine's CPU as a target (tf::farm::default_cpu_target).
std::string default_target() {
  utsname u{};
  uname(&u);
  std::ifstream f("/proc/cpuinfo");
  std::stringstream cpuinfo;
  cpuinfo << f.rdbuf();
  return tf::farm::default_cpu_target(u.machine, cpuinfo.str());
}

// The devices `spec` (--device) names: cpu; cuda:N or rocm:N; a comma-separated list of GPUs;
// or cuda:all, rocm:all, all (cuda:all): every device the driver reports, counted by probing
// the first. Each GPU is a board of its own.
std::vector<std::string> expand_devices(const std::string& spec, const std::string& runner, double probe_timeout_s) {
  if (spec.empty() || spec == "cpu") return {"cpu"};
  std::string platform = spec == "all" ? "cuda" : spec.size() > 4 && spec.substr(spec.size() - 4) == ":all"
                                                   ? spec.substr(0, spec.size() - 4) : "";
  std::vector<std::string> devices;
  if (!platform.empty()) {
    try {
      tf::parse_gpu_device(platform + ":0");
    } catch (const std::runtime_error&) {
      throw tf::farm::ConfigError("--device '" + spec + "' is not cpu, cuda:N, rocm:N, a list of them, or cuda:all / rocm:all / all");
    }
    pb::GpuProbe first = probe_gpu(runner, platform + ":0", probe_timeout_s);
    if (first.devices() < 1) throw tf::farm::ConfigError("--device " + spec + ": the driver reports no " + platform + " device");
    if (first.devices() > tf::farm::kMaxBoardsPerHost) {
      throw tf::farm::ConfigError("--device " + spec + ": the driver reports " + std::to_string(first.devices()) +
                                  " devices, more than the " + std::to_string(tf::farm::kMaxBoardsPerHost) +
                                  " boards one server serves (list the ones to serve)");
    }
    for (int i = 0; i < first.devices(); ++i) devices.push_back(platform + ":" + std::to_string(i));
    return devices;
  }
  std::stringstream list(spec);
  for (std::string d; std::getline(list, d, ',');) {
    if (d == "cpu") throw tf::farm::ConfigError("--device " + spec + ": cpu is a board of its own, not one of a list of GPUs");
    try {
      tf::parse_gpu_device(d);
    } catch (const std::runtime_error& e) {
      throw tf::farm::ConfigError(e.what());
    }
    if (std::find(devices.begin(), devices.end(), d) != devices.end()) {
      throw tf::farm::ConfigError("--device " + spec + " names " + d + " twice");
    }
    devices.push_back(d);
  }
  if (devices.empty() || spec.back() == ',') throw tf::farm::ConfigError("--device '" + spec + "' names no device");
  if (devices.size() > static_cast<size_t>(tf::farm::kMaxBoardsPerHost)) {
    throw tf::farm::ConfigError("--device " + spec + " names " + std::to_string(devices.size()) + " devices, more than the " +
                                std::to_string(tf::farm::kMaxBoardsPerHost) + " boards one server serves");
  }
  return devices;
}

// One board this server serves: a device, its service, its listener and its registration.
struct Board {
  std::string device;
  tf::farm::BoardOptions opts;
  std::unique_ptr<tf::farm::BoardService> service;
  tf::farm::Listening listening;
  pb::RegisterRequest reg;
  std::unique_ptr<pb::Tracker::Stub> tracker;
  std::thread registrar;
};

}  // namespace

int main(int argc, char** argv) {
  tf::farm::block_termination_signals();
  CLI::App app{"tunefarm-rpc-server: run kernels for the holder of a lease on this board"};
  std::string tracker_addr, key, host = "127.0.0.1", token_file, advertise, board_id, work_root = "/tmp", runner,
              runner_prefix;
  std::string target = default_target();
  int port = 9191;
  double max_upload_mb = 64, memory_limit_mb = 1024, probe_timeout_s = 60;
  tf::farm::TlsFiles tls;
  tf::farm::BoardOptions opts;
  app.add_option("--tracker", tracker_addr, "tracker address HOST:PORT")->required();
  std::string device = "cpu";
  app.add_option("--key", key, "device class, e.g. rpi4, rocm-gfx906, cuda-sm80 (required for CPU boards; a GPU "
                               "board defaults to one from its device, e.g. cuda-sm90)");
  app.add_option("--target", target, "target string kernels for this board are compiled with (default: this CPU's "
                                     "architecture and, on x86-64, its vector features; name -mcpu for its scheduling "
                                     "model; a GPU board defaults to its device's, e.g. 'cuda -arch=sm_90')")
      ->capture_default_str();
  app.add_option("--device", device, "what measures: cpu, or the GPU cuda:N (NVIDIA driver) or rocm:N (ROCm); "
                                     "several GPUs (cuda:0,cuda:1, or every one: cuda:all, rocm:all, all) are a "
                                     "board each, on consecutive ports from --port")
      ->capture_default_str();
  app.add_option("--host", host, "address to listen on (beyond loopback needs --token-file)")->capture_default_str();
  app.add_option("--port", port, "port (0: any free one; the bound port is printed)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--advertise", advertise, "HOST:PORT the tracker gives to tuners (default: --host and the bound port)");
  app.add_option("--board-id", board_id, "stable id of this board (default: random per start)");
  std::string client_token_file;
  app.add_option("--token-file", token_file, "file whose first line is the token this board presents to the tracker "
                                             "(the board token, or the farm's one shared token)");
  app.add_option("--client-token-file", client_token_file, "file whose first line is the token tuners must present "
                                                           "(default: --token-file's, one shared token)");
  app.add_option("--tls-cert", tls.cert, "PEM certificate: serve TLS (and present it to the tracker)");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls.ca, "PEM CA: verify the tracker, and require client certificates (mutual TLS)");
  std::string tls_server_name;
  app.add_option("--tls-server-name", tls_server_name,
                 "name the tracker's certificate must carry (default: the host of --tracker)");
  app.add_option("--work-dir", work_root, "where per-lease upload directories go")->capture_default_str();
  app.add_option("--runner", runner, "path of tunefarm-board-runner (default: next to this program)");
  // Loading a driver takes seconds; a probe still running after this is stuck.
  app.add_option("--probe-timeout-s", probe_timeout_s, "--device: how long the runner may take to load the driver")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--runner-prefix", runner_prefix,
                 "command put before the runner, e.g. qemu-aarch64 when this board itself runs under user-mode "
                 "emulation (the first word is looked up in PATH)");
  bool runner_per_measurement = false;
  app.add_flag("--runner-per-measurement", runner_per_measurement,
               "GPU boards: start a runner (and a device context) for each measurement instead of keeping one "
               "measuring process per GPU (slower; for comparison and diagnosis)");
  app.add_option("--max-upload-mb", max_upload_mb, "largest kernel library accepted")->capture_default_str()
      ->check(CLI::Range(0.001, 256.0));
  app.add_option("--timeout-s", opts.default_timeout_s, "time limit of a measurement that sets none")->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--max-timeout-s", opts.max_timeout_s, "largest time limit a request may set")->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--lease-check-ms", opts.lease_check_ms, "how often to delete uploads of ended leases")
      ->capture_default_str()->check(CLI::Range(50, 3600000));
  app.add_option("--memory-limit-mb", memory_limit_mb, "memory limit of a measurement that sets none")->capture_default_str()
      ->check(CLI::Range(16.0, 1048576.0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  fs::path work;
  int work_lock = -1;
  // Uploaded kernels run as this user: nothing of this process (its memory, environment,
  // open files) may be read through /proc by them.
  prctl(PR_SET_DUMPABLE, 0);
  try {
    if (!token_file.empty()) opts.token = tf::farm::read_token_file(token_file);
    if (!client_token_file.empty()) {
      if (token_file.empty()) throw tf::farm::ConfigError("--client-token-file needs --token-file (the board token)");
      opts.client_token = tf::farm::read_token_file(client_token_file);
    }
    tf::farm::check_listen_policy(host, opts.token, "tunefarm-rpc-server");
    if (runner.empty()) runner = (fs::read_symlink("/proc/self/exe").parent_path() / "tunefarm-board-runner").string();
    if (access(runner.c_str(), X_OK) != 0) throw tf::farm::ConfigError("runner " + runner + " is not an executable");
    opts.device = tf::farm::local_device_info(kVersion);
    if (!runner_prefix.empty() && device != "cpu" && !device.empty()) {
      throw tf::farm::ConfigError("--runner-prefix (an emulated board) cannot go with --device " + device);
    }
    if (runner_per_measurement && (device == "cpu" || device.empty())) {
      throw tf::farm::ConfigError("--runner-per-measurement is for GPU boards (--device cuda:N, rocm:N, all); a CPU "
                                  "board always starts a runner per measurement");
    }
    std::vector<std::string> devices = expand_devices(device, runner, probe_timeout_s);
    const bool several = devices.size() > 1;
    // Each GPU a board: its options from the device's probe (key and target unless given).
    std::vector<Board> boards(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      Board& b = boards[i];
      b.device = devices[i];
      b.opts = opts;
      std::string board_key = key, board_target = target;
      if (b.device != "cpu") {
        pb::GpuProbe gpu = probe_gpu(runner, b.device, probe_timeout_s);
        if (app.count("--target") == 0) board_target = gpu.target();
        if (board_key.empty()) board_key = gpu.key();
        b.opts.gpu_device = b.device;
        b.opts.gpu_measuring_process = !runner_per_measurement;
        b.opts.device.set_gpu_name(tf::farm::truncate_utf8(gpu.name(), tf::farm::kMaxDeviceNameBytes));
        b.opts.device.set_gpu_memory_bytes(gpu.memory_bytes());
        b.opts.device.set_gpu_arch(tf::farm::truncate_utf8(gpu.arch(), tf::farm::kMaxDeviceShortBytes));
        b.opts.device.set_gpu_driver_version(gpu.driver_version());
        std::printf("device %s: %s, %s, %.1f GiB\n", b.device.c_str(), gpu.name().c_str(), gpu.arch().c_str(),
                    static_cast<double>(gpu.memory_bytes()) / (1 << 30));
      }
      if (board_key.empty()) throw tf::farm::ConfigError("--key is required for a CPU board (the kind of board, e.g. rpi4)");
      if (std::string why = tf::farm::check_key(board_key); !why.empty()) throw tf::farm::ConfigError("--key: " + why);
      b.opts.key = board_key;
      b.opts.target = board_target;
    }
    // HOST:PORT, or [IPv6]:PORT; a bracketed IPv6 address alone has no port.
    const bool advertise_port = advertise.empty() || advertise[0] != '['
                                    ? advertise.find(':') != std::string::npos
                                    : advertise.find("]:") != std::string::npos;
    if (several && advertise_port) {
      throw tf::farm::ConfigError("--advertise " + advertise + " names one board's address; with " +
                                  std::to_string(devices.size()) + " devices give its HOST alone (each board adds its port)");
    }
    std::vector<std::string> prefix = split_words(runner_prefix);
    if (!prefix.empty()) prefix[0] = find_program(prefix[0]);
    if (!fs::is_directory(work_root)) throw tf::farm::ConfigError("--work-dir " + work_root + " is not a directory");
    remove_stale_work_dirs(work_root);
    std::string tmpl = (fs::path(work_root) / "tunefarm-board-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw tf::farm::ConfigError("cannot create a directory in " + work_root);
    work = tmpl;
    work_lock = open((work / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (work_lock < 0 || flock(work_lock, LOCK_EX | LOCK_NB) != 0) {
      throw tf::farm::ConfigError("cannot lock " + (work / ".lock").string());
    }

    if (board_id.empty()) board_id = "board-" + tf::farm::random_token().substr(0, 12);
    tf::farm::TlsFiles tracker_tls = tls;
    tracker_tls.server_name = tls_server_name;
    std::shared_ptr<grpc::Channel> channel = tf::farm::make_channel(tracker_addr, tracker_tls);
    for (size_t i = 0; i < boards.size(); ++i) {
      Board& b = boards[i];
      std::string name = b.device;
      name.erase(std::remove(name.begin(), name.end(), ':'), name.end());
      b.opts.board_id = several ? board_id + "-" + name : board_id;
      fs::path dir = several ? work / name : work;
      if (several) fs::create_directory(dir);
      b.opts.work_dir = dir.string();
      b.opts.sandbox = b.device == "cpu" ? tf::farm::describe_sandbox(prefix.empty())
                                         : "process group, no_new_privs (GPU board: modules run on the GPU, loaded by the "
                                           "vendor's driver; no Landlock or seccomp, which the driver's device files and "
                                           "ioctls need)";
      b.opts.runner = runner;
      b.opts.runner_prefix = prefix;
      b.opts.max_upload_bytes = static_cast<int64_t>(max_upload_mb * (1 << 20));
      b.opts.default_memory_limit = static_cast<int64_t>(memory_limit_mb * (1 << 20));
      if (b.opts.default_timeout_s > b.opts.max_timeout_s) {
        throw tf::farm::ConfigError("--timeout-s must not exceed --max-timeout-s");
      }
      b.service = std::make_unique<tf::farm::BoardService>(b.opts, pb::Tracker::NewStub(channel));
      // With several boards and a given --port, consecutive ports from it.
      b.listening = tf::farm::listen(host, port == 0 ? 0 : port + static_cast<int>(i), tls, {b.service.get()});
    }
    if (opts.token.empty()) std::printf("warning: no --token-file: serving loopback only, without authentication\n");
    if (tf::farm::landlock_abi() == 0) {
      std::printf("warning: this kernel has no Landlock: uploaded kernels can read every file this board's user can "
                  "(run the board as a dedicated user)\n");
    }
    std::printf("sandbox: %s\n", boards[0].opts.sandbox.c_str());
    if (!prefix.empty()) {
      // qemu-user, the one emulator this is for, does not apply RLIMIT_AS to its guest.
      std::printf("warning: runner prefix %s: a test board. Under user-mode emulation kernels run without seccomp, "
                  "memory limits are not enforced, and timings are the emulator's, not the hardware's\n",
                  runner_prefix.c_str());
    }
    for (Board& b : boards) {
      std::printf("tunefarm-rpc-server listening on %s:%d, key %s, board %s%s\n", host.c_str(), b.listening.port,
                  b.opts.key.c_str(), b.opts.board_id.c_str(), several ? (" (device " + b.device + ")").c_str() : "");
    }
    std::fflush(stdout);

    std::atomic<bool> stop{false};
    for (Board& b : boards) {
      b.reg.set_board_id(b.opts.board_id);
      b.reg.set_key(b.opts.key);
      b.reg.set_target(b.opts.target);
      b.reg.set_address(advertise.empty() ? host + ":" + std::to_string(b.listening.port)
                        : several        ? advertise + ":" + std::to_string(b.listening.port)
                                         : advertise);
      *b.reg.mutable_device() = b.opts.device;
      b.reg.set_instance(tf::farm::random_token());
      b.tracker = pb::Tracker::NewStub(channel);
      b.registrar = std::thread([&b, &stop] {
        registration_loop(*b.tracker, b.reg, b.opts.token, *b.service, b.opts.lease_check_ms, stop);
      });
    }
    tf::farm::wait_for_termination_signal();
    // Stop the measurements in progress first: their clients hear UNAVAILABLE at once, instead
    // of the boards waiting for the kernels' time limits.
    for (Board& b : boards) b.service->shutdown();
    for (Board& b : boards) b.listening.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    stop = true;
    for (Board& b : boards) b.registrar.join();
  } catch (const tf::farm::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (!work.empty()) fs::remove_all(work);
    return 2;
  }
  std::error_code ec;
  fs::remove_all(work, ec);
  return 0;
}
