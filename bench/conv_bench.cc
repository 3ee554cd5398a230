// Convolutions with tunefarm's default (and, with --db, tuned) schedules against oneDNN 2.6,
// measured in the same run, interleaved (issue 8, benchmark 1).
//
//   bench_conv [--layers resnet50,squeezenet1_1,mobilenet_v2] [--threads 1,2] [--min-ms 100] [--db tuning.db]
//              [--only N] [--list] [--cold]
//
// --list prints the workloads instead (each layer in NCHW and blocked), for tuning them:
// bench/conv_tune.sh. --cold: every timed call starts with cold caches (a 64 MiB buffer
// written between calls, untimed), as a layer of a model whose weights do not fit the caches
// finds them.
//
// Our kernels run twice too: the NCHW workload, and the same layer as conv2d_nchwc /
// depthwise_conv2d_nchwc with channel blocks of one vector (data, weights and output in the
// blocked layout, converted before timing) -- the fair peer of oneDNN's blocked run.
// Layers: the 23 distinct conv2d layers of ResNet-50 (torchvision, batch 1, NCHW) and 4
// depthwise layers of MobileNet-v2. oneDNN runs twice: in the kernel's own layout (NCHW data,
// OIHW weights, NCHW output) and with the blocked layouts it prefers (format_tag::any; the
// inputs are reordered before timing, so only the convolution is timed). Prints GFLOPS and
// the ratios ours / oneDNN for each layer and thread count, their geometric means, the worst
// layer, and checks that all computed the same output.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "compiler/driver.h"
#include "db/database.h"
#include "runtime/kernel_library.h"
#include "tuner/tuning_records.h"

namespace {

using tf::bench::median_seconds;
using tf::bench::parse_list;

namespace fs = std::filesystem;
using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct Layer {
  const char* net;
  int c, h, w, k, r, stride, pad;
  bool depthwise;
  int oh() const { return (h + 2 * pad - r) / stride + 1; }
  int ow() const { return (w + 2 * pad - r) / stride + 1; }
  double flops() const { return 2.0 * oh() * ow() * k * r * r * (depthwise ? 1 : c); }
  // Our blocked-layout kernel for the layer: channel blocks of `lanes` where they divide the
  // channels, else one block of all of them.
  std::string blocked_spec(int lanes) const {
    std::ostringstream s;
    int ib = c % lanes == 0 ? lanes : c, ob = k % lanes == 0 ? lanes : k;
    if (depthwise) {
      s << "depthwise_conv2d_nchwc(N=1,C=" << c << ",H=" << h << ",W=" << w << ",R=" << r
        << ",S=" << r;
      s << ",stride=" << stride << ",pad=" << pad << ",block=" << ib << ")";
    } else {
      s << "conv2d_nchwc(N=1,C=" << c << ",H=" << h << ",W=" << w << ",K=" << k << ",R=" << r
        << ",S=" << r;
      s << ",stride=" << stride << ",pad=" << pad << ",ic_block=" << ib << ",oc_block=" << ob
        << ")";
    }
    return s.str();
  }
  std::string spec() const {
    std::ostringstream s;
    if (depthwise) {
      s << "depthwise_conv2d_nchw(N=1,C=" << c << ",H=" << h << ",W=" << w << ",R=" << r << ",S=" << r;
    } else {
      s << "conv2d_nchw(N=1,C=" << c << ",H=" << h << ",W=" << w << ",K=" << k << ",R=" << r << ",S=" << r;
    }
    s << ",stride=" << stride << ",pad=" << pad << ")";
    return s.str();
  }
};

const std::vector<Layer>& layers() {
  static const std::vector<Layer> all = {
      {"resnet50", 3, 224, 224, 64, 7, 2, 3, false},     {"resnet50", 64, 56, 56, 64, 1, 1, 0, false},
      {"resnet50", 64, 56, 56, 64, 3, 1, 1, false},      {"resnet50", 64, 56, 56, 256, 1, 1, 0, false},
      {"resnet50", 256, 56, 56, 64, 1, 1, 0, false},     {"resnet50", 256, 56, 56, 128, 1, 1, 0, false},
      {"resnet50", 128, 56, 56, 128, 3, 2, 1, false},    {"resnet50", 128, 28, 28, 512, 1, 1, 0, false},
      {"resnet50", 256, 56, 56, 512, 1, 2, 0, false},    {"resnet50", 512, 28, 28, 128, 1, 1, 0, false},
      {"resnet50", 128, 28, 28, 128, 3, 1, 1, false},    {"resnet50", 512, 28, 28, 256, 1, 1, 0, false},
      {"resnet50", 256, 28, 28, 256, 3, 2, 1, false},    {"resnet50", 256, 14, 14, 1024, 1, 1, 0, false},
      {"resnet50", 512, 28, 28, 1024, 1, 2, 0, false},   {"resnet50", 1024, 14, 14, 256, 1, 1, 0, false},
      {"resnet50", 256, 14, 14, 256, 3, 1, 1, false},    {"resnet50", 1024, 14, 14, 512, 1, 1, 0, false},
      {"resnet50", 512, 14, 14, 512, 3, 2, 1, false},    {"resnet50", 512, 7, 7, 2048, 1, 1, 0, false},
      {"resnet50", 1024, 14, 14, 2048, 1, 2, 0, false},  {"resnet50", 2048, 7, 7, 512, 1, 1, 0, false},
      {"resnet50", 512, 7, 7, 512, 3, 1, 1, false},
      // SqueezeNet 1.1's fire modules (squeeze 1x1, expand 1x1 and 3x3 side by side) and its
      // classifier's 1x1 convolution on 13 x 13.
      {"squeezenet1_1", 64, 55, 55, 16, 1, 1, 0, false}, {"squeezenet1_1", 16, 55, 55, 64, 1, 1, 0, false},
      {"squeezenet1_1", 16, 55, 55, 64, 3, 1, 1, false}, {"squeezenet1_1", 128, 27, 27, 32, 1, 1, 0, false},
      {"squeezenet1_1", 32, 27, 27, 128, 3, 1, 1, false}, {"squeezenet1_1", 256, 13, 13, 48, 1, 1, 0, false},
      {"squeezenet1_1", 48, 13, 13, 192, 3, 1, 1, false}, {"squeezenet1_1", 64, 13, 13, 256, 3, 1, 1, false},
      {"squeezenet1_1", 512, 13, 13, 1000, 1, 1, 0, false},
      {"mobilenet_v2", 32, 112, 112, 32, 3, 1, 1, true}, {"mobilenet_v2", 144, 56, 56, 144, 3, 2, 1, true},
      {"mobilenet_v2", 384, 14, 14, 384, 3, 1, 1, true}, {"mobilenet_v2", 960, 7, 7, 960, 3, 1, 1, true},
  };
  return all;
}

std::vector<float> yp_copy(const float* p, size_t n) { return std::vector<float>(p, p + n); }

// [C][H][W] (one image) as [C/b][H][W][b].
std::vector<float> to_blocked(const std::vector<float>& x, int c, int hw, int b) {
  std::vector<float> y(x.size());
  for (int i = 0; i < c; ++i)
    for (int p = 0; p < hw; ++p) y[(size_t(i / b) * hw + p) * b + i % b] = x[size_t(i) * hw + p];
  return y;
}

// Weights [K][C][R][S] as [K/ob][C/ib][R][S][ib][ob]; depthwise [C][1][R][S] as [C/b][R][S][b].
std::vector<float> weights_blocked(const std::vector<float>& w, const Layer& l, int ib, int ob) {
  std::vector<float> y(w.size());
  int rs = l.r * l.r;
  if (l.depthwise) return to_blocked(w, l.c, rs, ib);
  for (int k = 0; k < l.k; ++k)
    for (int c = 0; c < l.c; ++c)
      for (int p = 0; p < rs; ++p) {
        size_t at = ((size_t(k / ob) * (l.c / ib) + c / ib) * rs + p) * ib * ob +
                    size_t(c % ib) * ob + k % ob;
        y[at] = w[(size_t(k) * l.c + c) * rs + p];
      }
  return y;
}

// One oneDNN convolution: in the plain layout (blocked = false) or the layouts oneDNN picks.
struct OneDnnConv {
  dnnl::convolution_forward conv;
  memory src, wei, dst, dst_plain;
  dnnl::reorder dst_back;
  bool reorder_out = false;

  OneDnnConv(const Layer& l, dnnl::engine& eng, dnnl::stream& s, bool blocked, float* x, float* wt) {
    memory::dims src_d = {1, l.c, l.h, l.w}, dst_d = {1, l.k, l.oh(), l.ow()};
    memory::dims wei_d = l.depthwise ? memory::dims{l.c, 1, 1, l.r, l.r} : memory::dims{l.k, l.c, l.r, l.r};
    tag wei_plain = l.depthwise ? tag::goihw : tag::oihw;
    memory::desc src_md(src_d, dt::f32, blocked ? tag::any : tag::nchw);
    memory::desc wei_md(wei_d, dt::f32, blocked ? tag::any : wei_plain);
    memory::desc dst_md(dst_d, dt::f32, blocked ? tag::any : tag::nchw);
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md,
                                      wei_md, dst_md, {l.stride, l.stride}, {l.pad, l.pad}, {l.pad, l.pad});
    dnnl::convolution_forward::primitive_desc pd(d, eng);
    memory user_src({src_d, dt::f32, tag::nchw}, eng, x), user_wei({wei_d, dt::f32, wei_plain}, eng, wt);
    src = memory(pd.src_desc(), eng);
    wei = memory(pd.weights_desc(), eng);
    dst = memory(pd.dst_desc(), eng);
    dnnl::reorder(user_src, src).execute(s, user_src, src);
    dnnl::reorder(user_wei, wei).execute(s, user_wei, wei);
    dst_plain = memory({dst_d, dt::f32, tag::nchw}, eng);
    reorder_out = pd.dst_desc() != dst_plain.get_desc();
    if (reorder_out) dst_back = dnnl::reorder(dst, dst_plain);
    s.wait();
    conv = dnnl::convolution_forward(pd);
  }
  void run(dnnl::stream& s) {
    conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    s.wait();
  }
  // The output in NCHW.
  const float* output(dnnl::stream& s) {
    if (!reorder_out) return static_cast<const float*>(dst.get_data_handle());
    dst_back.execute(s, dst, dst_plain);
    s.wait();
    return static_cast<const float*>(dst_plain.get_data_handle());
  }
};

}  // namespace

static int run(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  std::string db_path, nets = "resnet50,mobilenet_v2";
  double min_ms = 100;
  int only = -1;
  bool list = false, cold = false;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: bench_conv [--layers resnet50,mobilenet_v2] [--threads 1,2] [--min-ms 100] "
                  "[--db tuning.db] [--only N] [--list] [--cold]\n");
      return 0;
    }
    if (a == "--list" || a == "--cold") {
      (a == "--list" ? list : cold) = true;
      --i;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "option %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--threads") threads = parse_list(argv[i + 1]);
    else if (a == "--db") db_path = argv[i + 1];
    else if (a == "--min-ms") min_ms = std::atof(argv[i + 1]);
    else if (a == "--layers") nets = argv[i + 1];
    else if (a == "--only") only = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  tf::Target target = tf::host_target();
  if (list) {
    // The workloads this run would time, ours in both layouts, one per line (to tune them).
    for (size_t li = 0; li < layers().size(); ++li) {
      const Layer& l = layers()[li];
      if (nets.find(l.net) == std::string::npos || (only >= 0 && static_cast<int>(li) != only)) continue;
      std::printf("%s\n%s\n", l.spec().c_str(), l.blocked_spec(target.vector_lanes()).c_str());
    }
    return 0;
  }
  std::printf("target: %s, oneDNN %d.%d.%d%s\n", target.short_str().c_str(), dnnl_version()->major,
              dnnl_version()->minor, dnnl_version()->patch, cold ? ", cold caches (64 MiB written before each call)" : "");
  std::unique_ptr<tf::db::Database> db;
  if (!db_path.empty()) db = tf::db::open_database(db_path, tf::db::OpenMode::ReadOnly);
  fs::path dir = fs::temp_directory_path() / ("tunefarm-conv-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);

  std::printf("%-3s %-62s %3s %8s %8s %8s %8s %7s %7s %7s %s\n", "#", "layer", "thr", "ours",
              "dnnl", "ours-blk", "dnnl-blk", "/dnnl", "/blk", "blk/blk",
              "(GFLOPS; ours = best of default and tuned; -blk: blocked layouts)");
  bool all_ok = true;
  // Per (net, threads): sums of log ratios, counts and the worst ratio.
  struct Agg {
    double log_plain = 0, log_blocked = 0, worst_plain = INFINITY, worst_blocked = INFINITY;
    double log_bb = 0, worst_bb = INFINITY;
    int n = 0;
  };
  std::map<std::pair<std::string, int>, Agg> agg;
  // --cold: written between timed calls, past any cache this machine has (empty otherwise).
  std::vector<float> flush(cold ? (64u << 20) / sizeof(float) : 0);
  float flush_value = 0;
  auto evict = [&] { std::fill(flush.begin(), flush.end(), ++flush_value); };
  for (size_t li = 0; li < layers().size(); ++li) {
    const Layer& l = layers()[li];
    if (nets.find(l.net) == std::string::npos || (only >= 0 && static_cast<int>(li) != only)) continue;
    tf::Workload w = tf::parse_workload(l.spec());
    tf::ConfigChoice tuned = tf::choose_config(db.get(), w, target);
    auto build = [&](const nlohmann::json& config, const std::string& name) {
      tf::CompiledKernel k = tf::compile_kernel(w, target, config, "bench", "");
      std::string so = (dir / (name + std::to_string(li) + ".so")).string();
      tf::write_kernel(k, tf::EmitKind::SharedLibrary, so);
      return std::make_unique<tf::KernelLibrary>(so, k.name);
    };
    auto def = build(nlohmann::json(), "def");
    auto tun = tuned.config.is_null() ? nullptr : build(tuned.config, "tuned");
    // Our blocked-layout kernel, with its own tuned config when the database has one.
    tf::Workload wb = tf::parse_workload(l.blocked_spec(target.vector_lanes()));
    int ib = int(wb.get(l.depthwise ? "block" : "ic_block")),
        ob = l.depthwise ? ib : int(wb.get("oc_block"));
    tf::ConfigChoice tuned_b = tf::choose_config(db.get(), wb, target);
    tf::CompiledKernel kb = tf::compile_kernel(wb, target, tuned_b.config, "bench", "");
    std::string so_b = (dir / ("blk" + std::to_string(li) + ".so")).string();
    tf::write_kernel(kb, tf::EmitKind::SharedLibrary, so_b);
    tf::KernelLibrary blk(so_b, kb.name);
    size_t wsize = l.depthwise ? size_t(l.c) * l.r * l.r : size_t(l.k) * l.c * l.r * l.r;
    std::vector<float> x(size_t(l.c) * l.h * l.w), wt(wsize), y(size_t(l.k) * l.oh() * l.ow()), y2(y.size());
    tf::fill_random(x.data(), static_cast<int64_t>(x.size()), 1);
    tf::fill_random(wt.data(), static_cast<int64_t>(wt.size()), 2);
    std::vector<float> xb = to_blocked(x, l.c, l.h * l.w, ib),
                       wb_data = weights_blocked(wt, l, ib, ob), yb_out(y.size());
    for (int t : threads) {
      omp_set_num_threads(t);
      // Made after the thread count is set: oneDNN's kernels divide the work by the threads
      // they see when they are created.
      OneDnnConv plain(l, eng, strm, false, x.data(), wt.data());
      OneDnnConv blocked(l, eng, strm, true, x.data(), wt.data());
      double ours = INFINITY, best = INFINITY, p = INFINITY, b = INFINITY, ob_t = INFINITY;
      auto time = [&](auto&& call) { return median_seconds(call, min_ms / 3, evict); };
      for (int round = 0; round < 3; ++round) {
        ours = std::min(ours, time([&] { def->call({x.data(), wt.data(), y.data()}); }));
        ob_t = std::min(ob_t, time([&] { blk.call({xb.data(), wb_data.data(), yb_out.data()}); }));
        p = std::min(p, time([&] { plain.run(strm); }));
        b = std::min(b, time([&] { blocked.run(strm); }));
        if (tun) best = std::min(best, time([&] { tun->call({x.data(), wt.data(), y2.data()}); }));
      }
      const float* yp = plain.output(strm);
      const float* yb = blocked.output(strm);
      double max_err = 0, scale = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        scale = std::max(scale, double(std::fabs(yp[i])));
        max_err = std::max({max_err, double(std::fabs(y[i] - yp[i])), double(std::fabs(yb[i] - yp[i]))});
        if (tun) max_err = std::max(max_err, double(std::fabs(y2[i] - yp[i])));
      }
      std::vector<float> yb_plain = to_blocked(yp_copy(yp, y.size()), l.k, l.oh() * l.ow(), ob);
      for (size_t i = 0; i < y.size(); ++i)
        max_err = std::max(max_err, double(std::fabs(yb_out[i] - yb_plain[i])));
      bool ok = max_err <= 1e-4 * std::max(1.0, scale) * std::sqrt(double(l.c) * l.r * l.r);
      all_ok &= ok;
      double top = tun ? std::min(best, ours) : ours;
      double f = l.flops() * 1e-9;
      Agg& a = agg[{l.net, t}];
      a.log_plain += std::log(p / top);
      a.log_blocked += std::log(b / top);
      a.worst_plain = std::min(a.worst_plain, p / top);
      a.worst_blocked = std::min(a.worst_blocked, b / top);
      a.log_bb += std::log(b / ob_t);
      a.worst_bb = std::min(a.worst_bb, b / ob_t);
      ++a.n;
      std::printf("%-3zu %-62s %3d %8.1f %8.1f %8.1f %8.1f %7.2f %7.2f %7.2f%s%s\n", li,
                  l.spec().c_str(), t, f / top, f / p, f / ob_t, f / b, p / top, b / top, b / ob_t,
                  tun ? (best < ours ? "  tuned" : "  tuned (default faster)") : "",
                  ok ? "" : "  RESULTS DIFFER");
      std::fflush(stdout);
    }
  }
  for (const auto& [key, a] : agg) {
    std::printf(
        "%s, %d thread%s: ours / oneDNN same layout %.2f (worst %.2f), ours / oneDNN blocked %.2f "
        "(worst "
        "%.2f), ours blocked / oneDNN blocked %.2f (worst %.2f), geometric means over %d layers\n",
        key.first.c_str(), key.second, key.second == 1 ? "" : "s", std::exp(a.log_plain / a.n),
        a.worst_plain, std::exp(a.log_blocked / a.n), a.worst_blocked, std::exp(a.log_bb / a.n),
        a.worst_bb, a.n);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return all_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return tf::bench::guarded_main("bench_conv", [&] { return run(argc, argv); });
}
