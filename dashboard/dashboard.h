// The tuning service's web dashboard (docs/dashboard.md): read-only pages of the farm, the
// jobs, one job's live tuning curves and the results, and the JSON endpoints behind them.
// tunefarm-tuner --http-port serves it next to the gRPC port.
//
// Promises:
// - Who may look is who may call the gRPC service: with a users file, every page and
//   endpoint needs one of its tokens, as `Authorization: Bearer TOKEN` or as the session
//   cookie the login form sets (HttpOnly, SameSite=Strict, Secure under TLS; 12 hours);
//   without one (loopback only) everyone is the user "local". An unauthenticated page
//   request gets the login page (401) and no data; an endpoint gets 401 JSON.
// - Nothing here changes the service: GET only, besides logging in and out.
// - The JSON endpoints answer what the gRPC service answers (the same messages in proto3's
//   JSON mapping, service/queries.h): /api/v1/jobs is `tunefarm jobs --json`.
// - Bad requests (unknown path, a job id or number that does not parse or is out of range)
//   are 4xx with a message naming the value; never a crash.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dashboard/http_server.h"
#include "service/job_manager.h"
#include "service/tuning_service.h"
#include "tuner/farm_client.h"

namespace tf::web {

struct DashboardOptions {
  std::optional<farm::FarmEndpoint> farm;  // the tracker whose boards the farm page shows
  int local_boards = 0;                     // the service's own measurement slots
  bool tls = false;                         // served over TLS (cookies get Secure)
  size_t max_sessions = 10000;              // logged-in sessions kept, all users together
  size_t max_sessions_per_user = 64;        // one user's; their oldest goes first
  std::chrono::seconds session_lifetime{12 * 3600};
};

class Dashboard {
 public:
  Dashboard(JobManager& jobs, std::vector<ServiceUser> users, DashboardOptions o);
  ~Dashboard();
  HttpResponse handle(const HttpRequest& r);

 private:
  struct Session {
    ServiceUser user;
    std::chrono::steady_clock::time_point expires;
  };
  // The caller, or nullopt when a token is needed and none (or a wrong one) was given.
  std::optional<ServiceUser> identify(const HttpRequest& r);
  HttpResponse login(const HttpRequest& r);
  HttpResponse logout(const HttpRequest& r);
  HttpResponse page(const std::string& name, const std::string& title, const ServiceUser& who,
                    const std::string& job_id = "");
  HttpResponse api(const HttpRequest& r, const std::string& path, const ServiceUser& who);
  std::string farm_json();
  std::string jobs_json(bool summary);
  std::string job_records_json(int64_t id, int64_t after_id, int64_t limit);

  JobManager& jobs_;
  std::vector<ServiceUser> users_;
  DashboardOptions opts_;
  std::unique_ptr<farm::FarmClient> tracker_;

  std::mutex sessions_mu_;
  std::map<std::string, Session> sessions_;

  // The farm's summary and the job list are cached briefly: many open browsers poll them,
  // and neither the tracker nor the job manager should feel it.
  struct JsonCache {
    std::chrono::steady_clock::time_point at;
    std::string text;
  };
  std::mutex cache_mu_;          // the cached texts (held briefly)
  std::mutex farm_refresh_mu_;   // the one request asking the tracker
  JsonCache farm_, jobs_full_, jobs_summary_;
  // Per job id: its JobInfo serialized (binary) and its JSON, reused while the two agree.
  std::map<int64_t, std::pair<std::string, std::string>> full_jobs_, summary_jobs_;
};

}  // namespace tf::web
