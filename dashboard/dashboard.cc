#include "dashboard/dashboard.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <ctime>

#include "base/error.h"
#include "dashboard/assets.h"
#include "db/query_json.h"
#include "service/queries.h"

namespace tf::web {

namespace pb = tunefarm::v1;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kCookie = "tf_session";
constexpr int64_t kDefaultRecords = 2000, kMaxRecords = 5000;      // a job's records, per request
constexpr int64_t kDefaultHistory = 10000, kMaxHistory = 1000000;  // history lines, streamed
constexpr int64_t kHistoryPiece = 200;                              // lines per piece sent
constexpr int64_t kMaxTopK = 1000;

// A request the dashboard refuses, with its HTTP status.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& m) : std::runtime_error(m), status(status) {}
  int status;
};

void secure(HttpResponse& r, bool no_store) {
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"X-Frame-Options", "DENY"});
  r.headers.push_back({"Referrer-Policy", "no-referrer"});
  r.headers.push_back({"Content-Security-Policy",
                       "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"});
  if (no_store) r.headers.push_back({"Cache-Control", "no-store"});
}

HttpResponse json_response(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

HttpResponse json_error(int status, const std::string& message) {
  return json_response(status, queries::json_text(json{{"error", message}}) + "\n");
}

HttpResponse redirect(const std::string& to) {
  HttpResponse r;
  r.status = 303;
  r.headers.push_back({"Location", to});
  return r;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// `text` with each {{name}} replaced by the HTML-escaped value.
std::string fill(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [name, value] : values) {
    std::string key = "{{" + name + "}}";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
      std::string v = html_escape(value);
      text.replace(at, key.size(), v);
      at += v.size();
    }
  }
  return text;
}

// An integer query parameter in [lo, hi], `dflt` when absent; 400 naming it otherwise.
int64_t int_param(const HttpRequest& r, const std::string& name, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = r.query.find(name);
  if (it == r.query.end() || it->second.empty()) return dflt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) {
    throw HttpError(400, str(name, " \"", it->second.substr(0, 64), "\" is not an integer in ", lo, "..", hi));
  }
  return v;
}

std::string str_param(const HttpRequest& r, const std::string& name) {
  auto it = r.query.find(name);
  if (it == r.query.end()) return "";
  if (it->second.size() > db::kMaxNameLength) {
    throw HttpError(400, str(name, " is ", it->second.size(), " characters long, more than ", db::kMaxNameLength));
  }
  return it->second;
}

int64_t job_id(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < 1) {
    throw HttpError(404, str("no job \"", text.substr(0, 64), "\": job ids are positive integers"));
  }
  return v;
}

std::string cookie(const HttpRequest& r, const std::string& name) {
  std::string all = r.header("cookie");
  size_t at = 0;
  while (at < all.size()) {
    size_t semi = all.find(';', at);
    std::string part = all.substr(at, semi == std::string::npos ? std::string::npos : semi - at);
    size_t b = part.find_first_not_of(' ');
    if (b != std::string::npos) part = part.substr(b);
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
    if (semi == std::string::npos) break;
    at = semi + 1;
  }
  return "";
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// Where a login goes on to: a path of this dashboard (never another site, not even through
// //host or a backslash), else the jobs page.
std::string local_path(const std::string& next) {
  if (next.empty() || next[0] != '/' || next.size() > 512 || next.find("//") != std::string::npos ||
      next.find('\\') != std::string::npos) {
    return "/jobs";
  }
  for (unsigned char c : next) {
    if (c < 0x20 || c == 0x7f) return "/jobs";
  }
  return next;
}

// A POST from a page of another site carries its Origin: refused (the cookie is SameSite
// already; this covers browsers that send it anyway).
void check_origin(const HttpRequest& r) {
  std::string origin = r.header("origin");
  if (origin.empty() || origin == "null") return;
  size_t scheme = origin.find("://");
  std::string host = scheme == std::string::npos ? origin : origin.substr(scheme + 3);
  if (host != r.header("host")) throw HttpError(403, str("a form of ", origin, " may not post here"));
}

}  // namespace

Dashboard::Dashboard(JobManager& jobs, std::vector<ServiceUser> users, DashboardOptions o)
    : jobs_(jobs), users_(std::move(users)), opts_(std::move(o)) {
  if (opts_.farm) tracker_ = std::make_unique<farm::FarmClient>(*opts_.farm);
}

Dashboard::~Dashboard() = default;

std::optional<ServiceUser> Dashboard::identify(const HttpRequest& r) {
  if (users_.empty()) return ServiceUser{"", "local", false};
  std::string auth = r.header("authorization");
  if (auth.rfind("Bearer ", 0) == 0) {
    if (const ServiceUser* u = find_user(users_, auth.substr(7))) return *u;
    return std::nullopt;
  }
  std::string id = cookie(r, kCookie);
  if (id.empty()) return std::nullopt;
  std::lock_guard<std::mutex> l(sessions_mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expires < Clock::now()) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second.user;
}

HttpResponse Dashboard::login(const HttpRequest& r) {
  std::map<std::string, std::string> fields = r.method == "POST" ? parse_form(r.body) : r.query;
  std::string next = local_path(fields["next"]);
  auto form = [&](const std::string& message, int status) {
    HttpResponse p;
    p.status = status;
    p.content_type = "text/html; charset=utf-8";
    p.body = fill(std::string(asset("login.html")), {{"message", message}, {"next", next}});
    return p;
  };
  if (users_.empty()) return redirect(next);
  if (r.method == "GET") return form("", 200);
  check_origin(r);
  const ServiceUser* u = find_user(users_, fields["token"]);
  if (!u) return form("wrong token: no user of this service has it", 401);
  std::string id = farm::random_token() + farm::random_token();
  {
    std::lock_guard<std::mutex> l(sessions_mu_);
    Clock::time_point now = Clock::now();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      it = it->second.expires < now ? sessions_.erase(it) : std::next(it);
    }
    // A user's sessions are bounded on their own: logging in again and again ends that
    // user's oldest session, never another user's. When every user together reach the
    // service's bound, the user with the most sessions loses their oldest.
    std::map<std::string, size_t> per_user;
    for (const auto& [sid, sess] : sessions_) ++per_user[sess.user.name];
    auto end_oldest_of = [&](const std::string& name) {
      auto oldest = sessions_.end();
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        if (it->second.user.name == name && (oldest == sessions_.end() || it->second.expires < oldest->second.expires)) {
          oldest = it;
        }
      }
      if (oldest != sessions_.end()) {
        sessions_.erase(oldest);
        --per_user[name];
      }
    };
    while (per_user[u->name] >= std::max<size_t>(1, opts_.max_sessions_per_user)) end_oldest_of(u->name);
    while (!sessions_.empty() && sessions_.size() >= std::max<size_t>(1, opts_.max_sessions)) {
      auto most = std::max_element(per_user.begin(), per_user.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
      end_oldest_of(most->first);
    }
    sessions_[id] = {*u, now + opts_.session_lifetime};
  }
  HttpResponse out = redirect(next);
  out.authenticated = true;
  out.headers.push_back({"Set-Cookie", str(kCookie, "=", id, "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                                           opts_.session_lifetime.count(), opts_.tls ? "; Secure" : "")});
  return out;
}

HttpResponse Dashboard::logout(const HttpRequest& r) {
  check_origin(r);
  std::string id = cookie(r, kCookie);
  if (!id.empty()) {
    std::lock_guard<std::mutex> l(sessions_mu_);
    sessions_.erase(id);
  }
  HttpResponse out = redirect(users_.empty() ? "/jobs" : "/login");
  out.headers.push_back({"Set-Cookie", str(kCookie, "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")});
  return out;
}

HttpResponse Dashboard::page(const std::string& name, const std::string& title, const ServiceUser& who,
                             const std::string& job) {
  HttpResponse p;
  p.content_type = "text/html; charset=utf-8";
  // The page's first request, started while app.js loads.
  std::string preload = name == "jobs" ? "/api/v1/jobs?view=summary" : name == "farm" ? "/api/v1/farm" : "/api/v1/best-per-pair";
  if (!job.empty()) preload = "/api/v1/jobs/" + job;
  p.body = fill(std::string(asset("page.html")), {{"page", name},
                                                  {"preload", preload},
                                                  {"title", title},
                                                  {"job", job},
                                                  {"user", who.name},
                                                  {"logout", users_.empty() ? "" : "yes"}});
  return p;
}

HttpResponse Dashboard::handle(const HttpRequest& r) {
  HttpResponse out;
  bool no_store = true;
  try {
    const std::string& path = r.path;
    bool is_api = path.rfind("/api/", 0) == 0;
    if (path.rfind("/static/", 0) == 0) {
      if (r.method != "GET") throw HttpError(405, str("method ", r.method, " is not allowed on ", path));
      std::string name = path.substr(8);
      std::string_view data = name.ends_with(".js") || name.ends_with(".css") ? asset(name) : std::string_view();
      if (data.empty()) throw HttpError(404, str("no asset ", name.substr(0, 200)));
      out.body = std::string(data);
      out.content_type = name.ends_with(".js")    ? "text/javascript; charset=utf-8"
                         : name.ends_with(".css") ? "text/css; charset=utf-8"
                                                  : "text/plain; charset=utf-8";
      out.headers.push_back({"Cache-Control", "max-age=300"});
      no_store = false;
    } else if (path == "/login") {
      if (r.method != "GET" && r.method != "POST") throw HttpError(405, str("method ", r.method, " is not allowed on /login"));
      out = login(r);
    } else if (path == "/logout") {
      if (r.method != "POST") throw HttpError(405, str("method ", r.method, " is not allowed on /logout (POST)"));
      out = logout(r);
    } else {
      if (r.method != "GET") throw HttpError(405, str("method ", r.method, " is not allowed on ", path, ": the dashboard is read-only"));
      std::optional<ServiceUser> who = identify(r);
      if (!who) {
        if (is_api) {
          out = json_error(401, r.header("authorization").empty() && cookie(r, kCookie).empty()
                                    ? "this service needs a token: log in, or send Authorization: Bearer TOKEN"
                                    : "wrong token, or the session ended: log in again");
          out.headers.push_back({"WWW-Authenticate", "Bearer"});
        } else {
          out = redirect("/login?next=" + url_encode(path));
        }
      } else if (is_api) {
        out = api(r, path.substr(4), *who);
      } else if (path == "/" || path.empty()) {
        out = redirect("/jobs");
      } else if (path == "/jobs") {
        out = page("jobs", "Jobs", *who);
      } else if (path == "/farm") {
        out = page("farm", "Farm", *who);
      } else if (path == "/results") {
        out = page("results", "Results", *who);
      } else if (path.rfind("/jobs/", 0) == 0) {
        int64_t id = job_id(path.substr(6));
        jobs_.get(id);  // 404 for an unknown job
        out = page("job", str("Job ", id), *who, std::to_string(id));
      } else {
        throw HttpError(404, str("no page ", path.substr(0, 200)));
      }
      out.authenticated = who.has_value();  // the connection leaves the server's unauthenticated budget
    }
  } catch (const HttpError& e) {
    out = json_error(e.status, e.what());
    if (e.status == 405) {
      out.headers.push_back({"Allow", r.path == "/logout" ? "POST" : r.path == "/login" ? "GET, POST" : "GET"});
    }
  } catch (const JobError& e) {
    out = json_error(e.code == grpc::NOT_FOUND ? 404 : e.code == grpc::UNAVAILABLE ? 503 : 400, e.what());
  } catch (const UserError& e) {
    out = json_error(400, e.what());
  } catch (const db::DbError& e) {
    out = json_error(503, e.what());
  } catch (const farm::FarmError& e) {
    out = json_error(502, e.what());
  } catch (const std::exception& e) {
    out = json_error(500, e.what());
  }
  secure(out, no_store);
  return out;
}

HttpResponse Dashboard::api(const HttpRequest& r, const std::string& path, const ServiceUser& who) {
  const std::string& db = jobs_.db_path();
  if (path == "/v1/whoami") {
    return json_response(200, queries::json_text(json{{"user", who.name},
                                   {"admin", who.admin},
                                   {"login", !users_.empty()}}));
  }
  if (path == "/v1/jobs") {
    std::string view = str_param(r, "view");
    if (view != "" && view != "full" && view != "summary") {
      throw HttpError(400, str("view \"", view.substr(0, 64), "\" is not one of full, summary"));
    }
    return json_response(200, jobs_json(view == "summary"));
  }
  if (path.rfind("/v1/jobs/", 0) == 0) {
    std::string rest = path.substr(9);
    size_t slash = rest.find('/');
    int64_t id = job_id(rest.substr(0, slash));
    if (slash == std::string::npos) return json_response(200, queries::proto_json(jobs_.get(id)));
    if (rest.substr(slash) == "/records") {
      return json_response(200, job_records_json(id, int_param(r, "after_id", 0, 0, INT64_MAX),
                                                 int_param(r, "limit", kDefaultRecords, 1, kMaxRecords)));
    }
    throw HttpError(404, str("no endpoint /api", path.substr(0, 200)));
  }
  if (path == "/v1/farm") return json_response(200, farm_json());
  if (path == "/v1/best") {
    pb::BestRequest q;
    q.set_workload(str_param(r, "workload"));
    q.set_target(str_param(r, "target"));
    if (q.workload().empty()) throw HttpError(400, "best needs ?workload=W (and &target=T)");
    return json_response(200, queries::proto_json(queries::best(db, q)));
  }
  if (path == "/v1/best-per-pair") return json_response(200, queries::proto_json(queries::best_per_pair(db)));
  if (path == "/v1/top-k") {
    pb::TopKRequest q;
    q.set_workload(str_param(r, "workload"));
    q.set_target(str_param(r, "target"));
    q.set_k(int_param(r, "k", 10, 1, kMaxTopK));
    return json_response(200, queries::proto_json(queries::top_k(db, q)));
  }
  if (path == "/v1/history") {
    pb::HistoryRequest q;
    q.set_workload(str_param(r, "workload"));
    q.set_target(str_param(r, "target"));
    q.set_run(str_param(r, "run"));
    q.set_limit(int_param(r, "limit", kDefaultHistory, 1, kMaxHistory));
    q.set_after_id(int_param(r, "after_id", 0, 0, INT64_MAX));
    // Streamed a piece at a time (the connection holds one piece, never the whole answer); the
    // pager's constructor tells the request's mistakes and an unreadable database before the
    // status is sent.
    auto pager = std::make_shared<queries::HistoryPager>(db, q);
    HttpResponse out;
    out.content_type = "application/x-ndjson";
    out.headers.push_back({"Content-Disposition", "attachment; filename=\"tunefarm-records.jsonl\""});
    out.stream = [pager](std::string& piece) {
      std::vector<std::string> lines = pager->next(kHistoryPiece);
      for (const std::string& l : lines) piece += l + "\n";
      return !lines.empty();
    };
    return out;
  }
  if (path == "/v1/stats") return json_response(200, queries::proto_json(queries::stats(db)));
  if (path == "/v1/runs") return json_response(200, queries::proto_json(queries::runs(db)));
  if (path == "/v1/models") {
    std::string out = "{\"models\":[";
    const auto& lines = queries::models(db).models_json();
    for (int i = 0; i < lines.size(); ++i) out += (i ? "," : "") + lines[i];
    return json_response(200, out + "]}");
  }
  throw HttpError(404, str("no endpoint /api", path.substr(0, 200)));
}

std::string Dashboard::jobs_json(bool summary) {
  std::lock_guard<std::mutex> l(cache_mu_);
  JsonCache& c = summary ? jobs_summary_ : jobs_full_;
  if (!c.text.empty() && Clock::now() - c.at < std::chrono::milliseconds(500)) return c.text;
  // protobuf's JSON printer is slow (about 60 ms for 1,000 jobs here): each job's JSON is kept
  // while its message is unchanged, and the list is the jobs' JSON joined, which is the
  // printer's output for the whole ListJobsReply.
  std::map<int64_t, std::pair<std::string, std::string>>& per_job = summary ? summary_jobs_ : full_jobs_;
  std::map<int64_t, std::pair<std::string, std::string>> kept;
  std::string out = "{\"jobs\":[";
  bool first = true;
  for (pb::JobInfo& i : jobs_.list()) {
    if (summary) {
      // What the jobs page shows: the per-workload configs and runs stay on the job's page.
      for (pb::TaskInfo& t : *i.mutable_tasks()) {
        t.clear_best_config();
        t.clear_runs();
        t.clear_stop_reason();
      }
    }
    std::string binary = i.SerializeAsString();
    auto it = per_job.find(i.id());
    std::pair<std::string, std::string>& k = kept[i.id()];
    if (it != per_job.end() && it->second.first == binary) {
      k = std::move(it->second);
    } else {
      k = {std::move(binary), queries::proto_json(i)};
    }
    out += (first ? "" : ",") + k.second;
    first = false;
  }
  per_job = std::move(kept);  // jobs no longer listed are forgotten
  c.text = out + "]}";
  c.at = Clock::now();
  return c.text;
}

std::string Dashboard::farm_json() {
  {
    std::lock_guard<std::mutex> l(cache_mu_);
    if (!farm_.text.empty() && Clock::now() - farm_.at < std::chrono::seconds(1)) return farm_.text;
  }
  // One request refreshes (it may wait up to 3 s for a tracker that does not answer); the
  // others meanwhile get the last answer rather than holding the server's threads.
  std::unique_lock<std::mutex> refreshing(farm_refresh_mu_, std::try_to_lock);
  if (!refreshing.owns_lock()) {
    {
      std::lock_guard<std::mutex> l(cache_mu_);
      if (!farm_.text.empty()) return farm_.text;
    }
    refreshing.lock();
  }
  json j = {{"tracker", opts_.farm ? opts_.farm->tracker : ""}, {"local_boards", opts_.local_boards}, {"error", ""}};
  std::string summary = "{}";
  if (tracker_) {
    try {
      summary = queries::proto_json(tracker_->summary(3));  // spliced in: no parse and re-print
    } catch (const farm::FarmError& e) {
      j["error"] = e.what();
    }
  }
  double now = static_cast<double>(std::time(nullptr));
  j["measurements_per_minute"] = db::open_database(jobs_.db_path(), db::OpenMode::ReadOnly)->records_per_key_since(now - 60);
  j["at"] = now;
  std::string text = queries::json_text(j);
  text.pop_back();  // the closing brace
  text += ",\"summary\":" + summary + "}";
  std::lock_guard<std::mutex> l(cache_mu_);
  farm_ = {Clock::now(), text};
  return text;
}

std::string Dashboard::job_records_json(int64_t id, int64_t after_id, int64_t limit) {
  pb::JobInfo job = jobs_.get(id);
  std::unique_ptr<db::Database> db = db::open_database(jobs_.db_path(), db::OpenMode::ReadOnly);
  std::vector<db::MeasureRecord> rs;
  for (const pb::TaskInfo& t : job.tasks()) {
    for (const std::string& run : t.runs()) {
      db::HistoryFilter f{t.workload(), "", limit + 1, run, after_id};
      f.by_id = true;
      for (db::MeasureRecord& rec : db->history(f)) rs.push_back(std::move(rec));
    }
  }
  std::sort(rs.begin(), rs.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  bool more = static_cast<int64_t>(rs.size()) > limit;
  if (more) rs.resize(static_cast<size_t>(limit));
  std::string out = "{\"job_id\":" + std::to_string(id) + ",\"more\":" + (more ? "true" : "false") +
                    ",\"last_id\":" + std::to_string(rs.empty() ? after_id : rs.back().id) + ",\"records\":[";
  for (size_t i = 0; i < rs.size(); ++i) out += (i ? "," : "") + queries::record_line(rs[i]);
  return out + "]}";
}

}  // namespace tf::web
