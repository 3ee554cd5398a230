// tunefarm-tuner: the tuning service. Takes tuning jobs from `tunefarm submit`, runs them on
// the farm's boards (or this machine's), owns the tuning database and answers its queries.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/error.h"
#include "dashboard/dashboard.h"
#include "dashboard/http_server.h"
#include "db/database.h"
#include "proto/daemon.h"
#include "proto/credentials.h"
#include "service/job_manager.h"
#include "service/tuning_service.h"

int main(int argc, char** argv) {
  tf::farm::block_termination_signals();
  CLI::App app{"tunefarm-tuner: the tuning service; runs users' tuning jobs on the farm and owns the tuning database"};
  std::string host = "127.0.0.1", users_file, db_flag, tracker, farm_token_file;
  int port = 9192;
  tf::farm::TlsFiles tls, farm_tls;
  tf::JobManagerOptions opts;
  int local_boards = -1;
  int http_port = -1;
  app.add_option("--host", host, "address to listen on (beyond loopback needs --users-file)")->capture_default_str();
  app.add_option("--port", port, "port (0: any free one; the bound port is printed)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--users-file", users_file, "file of `TOKEN USER [admin]` lines: who may call, and as whom");
  app.add_option("--db", db_flag, "the tuning database it owns (default: $TUNEFARM_DB, else "
                                  "~/.local/share/tunefarm/tuning.db)");
  app.add_option("--local-boards", local_boards, "measure jobs without a key on this machine, this many at once "
                                                 "(default: 1 without --tracker, else 0)")
      ->check(CLI::Range(0, 64));
  app.add_option("--max-running", opts.max_running, "jobs running at once; the rest queue")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--max-jobs-per-user", opts.max_jobs_per_user, "queued or running jobs one user may have")
      ->capture_default_str()->check(CLI::Range(1, 1000000));
  app.add_option("--workers", opts.build_workers, "compile processes per running job (0: one per core)")
      ->capture_default_str()->check(CLI::Range(0, 256));
  app.add_option("--tracker", tracker, "the farm's tracker, HOST:PORT: jobs with a key lease its boards");
  app.add_option("--farm-token-file", farm_token_file, "file whose first line is the farm's client token");
  app.add_option("--farm-tls-ca", farm_tls.ca, "PEM CA of the farm: use TLS to the tracker and boards");
  app.add_option("--farm-tls-cert", farm_tls.cert, "PEM client certificate for the farm (mutual TLS)");
  app.add_option("--farm-tls-key", farm_tls.key, "PEM key of --farm-tls-cert");
  app.add_option("--wait-ms", opts.wait_ms, "how long a farm job waits for a board")->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{86400000}));
  app.add_option("--http-port", http_port, "serve the web dashboard on this port of --host (0: any free one; "
                                          "HTTPS with --tls-cert, client certificates with --tls-ca; docs/dashboard.md)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--tls-cert", tls.cert, "PEM certificate: serve TLS");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls.ca, "PEM CA: require and verify client certificates (mutual TLS)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    std::vector<tf::ServiceUser> users;
    if (!users_file.empty()) users = tf::read_users_file(users_file);
    tf::farm::check_listen_policy(host, users.empty() ? "" : users[0].token, "tunefarm-tuner", "--users-file",
                                  "anyone who reaches it could submit jobs, read the tuning database and its "
                                  "dashboard as any user");
    if (!tracker.empty()) {
      tf::farm::FarmEndpoint farm;
      farm.tracker = tracker;
      if (!farm_token_file.empty()) farm.token = tf::farm::read_token_file(farm_token_file);
      farm.tls = farm_tls;
      opts.farm = farm;
    } else if (!farm_token_file.empty() || !farm_tls.ca.empty()) {
      throw tf::farm::ConfigError("--farm-token-file and --farm-tls-* need --tracker");
    }
    opts.local_boards = local_boards >= 0 ? local_boards : (tracker.empty() ? 1 : 0);
    if (opts.local_boards == 0 && tracker.empty()) {
      throw tf::farm::ConfigError("--local-boards 0 without --tracker: the service would have nowhere to measure");
    }
    opts.db_path = tf::db::database_path(db_flag);
    tf::JobManager jobs(opts);
    tf::TuningService service(jobs, users);
    // The dashboard first: it checks the TLS files with a message naming them.
    std::unique_ptr<tf::web::Dashboard> dashboard;
    std::unique_ptr<tf::web::HttpServer> http;
    if (http_port >= 0) {
      tf::web::DashboardOptions d;
      d.farm = opts.farm;
      d.local_boards = opts.local_boards;
      d.tls = !tls.cert.empty();
      dashboard = std::make_unique<tf::web::Dashboard>(jobs, users, d);
      http = std::make_unique<tf::web::HttpServer>(
          host, http_port, tls, [&dashboard](const tf::web::HttpRequest& r) { return dashboard->handle(r); });
    }
    tf::farm::Listening l = tf::farm::listen(host, port, tls, {&service});
    if (users.empty()) std::printf("warning: no --users-file: serving loopback only, every caller is the user local\n");
    std::printf("tunefarm-tuner listening on %s:%d%s; database %s; %d local boards%s%s\n", host.c_str(), l.port,
                tls.cert.empty() ? "" : " (TLS)", opts.db_path.c_str(), opts.local_boards,
                tracker.empty() ? "" : "; farm at ", tracker.c_str());
    if (http) {
      std::printf("dashboard at %s://%s:%d/\n", tls.cert.empty() ? "http" : "https",
                  host.find(':') != std::string::npos ? ("[" + host + "]").c_str() : host.c_str(), http->port());
    }
    std::fflush(stdout);
    tf::farm::serve_until_signal(*l.server);
  } catch (const tf::farm::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const tf::db::DbError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const tf::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
