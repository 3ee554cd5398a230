// Real processes against one database file: concurrent writers lose nothing and never see
// "database is locked"; a writer killed with SIGKILL in the middle of a batch leaves whole
// batches only, and an intact file.
#include <gtest/gtest.h>
#include <SQLiteCpp/SQLiteCpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "db/database.h"

extern char** environ;

namespace tf::db {
namespace {

namespace fs = std::filesystem;

// Starts a writer; its progress lines ("batch I") go to `log` when given.
pid_t spawn_writer(const std::string& path, int writer, int batches, int size, const std::string& log = "/dev/null") {
  std::vector<std::string> args = {TF_DB_WRITER, path, std::to_string(writer), std::to_string(batches),
                                   std::to_string(size)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, TF_DB_WRITER, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << TF_DB_WRITER;
  return pid;
}

std::string temp_db(const std::string& name) {
  std::string t = (fs::temp_directory_path() / "tunefarm-mp-XXXXXX").string();
  return (fs::path(mkdtemp(t.data())) / name).string();
}

std::string integrity(const std::string& path) {
  SQLite::Database raw(path);
  return raw.execAndGet("PRAGMA integrity_check").getString();
}

TEST(MultiProcess, FourWritersLoseNothing) {
  std::string path = temp_db("concurrent.db");
  open_database(path);  // created once, so the writers race on data, not on the schema
  const int writers = 4, batches = 60, size = 50;  // 3000 records each
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) pids.push_back(spawn_writer(path, w, batches, size));
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed, status " << status;
  }
  auto db = open_database(path, OpenMode::ReadOnly);
  EXPECT_EQ(db->stats().records, int64_t{writers} * batches * size);
  EXPECT_EQ(db->stats().workloads, writers);
  EXPECT_EQ(integrity(path), "ok");
  fs::remove_all(fs::path(path).parent_path());
}

TEST(MultiProcess, FourWritersCreatingTheFileTogether) {
  std::string path = temp_db("fresh.db");
  std::vector<pid_t> pids;
  for (int w = 0; w < 4; ++w) pids.push_back(spawn_writer(path, w, 5, 20));
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed, status " << status;
  }
  EXPECT_EQ(open_database(path)->stats().records, 4 * 5 * 20);
  fs::remove_all(fs::path(path).parent_path());
}

// Regression: the schema check read application_id, user_version and the table list in
// separate statements, so an opener that looked while another created the file took it for
// a foreign database ("an SQLite database of something else") and its records were lost
// (8 of 480 writers, 8 at a time). Many small rounds make that window likely.
TEST(MultiProcess, EightOpenersOfANewFileAllSucceed) {
  const int rounds = 30, writers = 8;
  int failures = 0;
  for (int round = 0; round < rounds; ++round) {
    std::string path = temp_db("race.db");
    std::vector<pid_t> pids;
    for (int w = 0; w < writers; ++w) pids.push_back(spawn_writer(path, w, 1, 1));
    for (pid_t p : pids) {
      int status = 0;
      waitpid(p, &status, 0);
      failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    EXPECT_EQ(open_database(path)->stats().records, writers) << "round " << round;
    fs::remove_all(fs::path(path).parent_path());
  }
  EXPECT_EQ(failures, 0) << "writers failed to open a database being created";
}

// Whether the writer's log shows batch `k` committed.
bool committed(const std::string& log, int k) {
  std::ifstream f(log);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return text.find("batch " + std::to_string(k) + "\n") != std::string::npos;
}

TEST(MultiProcess, KillNineLeavesWholeBatchesOnly) {
  const int batches = 40, size = 2000;
  // Kill right after the writer reports batch k: it is then inside batch k+1's transaction.
  for (int k : {0, 1, 3, 6, 10}) {
    std::string path = temp_db("killed.db");
    std::string log = path + ".log";
    open_database(path);
    pid_t pid = spawn_writer(path, 0, batches, size, log);
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!committed(log, k) && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(committed(log, k)) << "the writer never committed batch " << k;
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before the kill";
    ASSERT_EQ(integrity(path), "ok") << "after SIGKILL following batch " << k;
    auto db = open_database(path);
    int64_t n = db->stats().records;
    EXPECT_EQ(n % size, 0) << "a partial batch survived: " << n << " records";
    EXPECT_GE(n, int64_t{k + 1} * size) << "a reported batch was lost";
    EXPECT_LT(n, int64_t{batches} * size);
    // The file stays writable after the crash.
    EXPECT_NO_THROW(db->commit({}));
    fs::remove_all(fs::path(path).parent_path());
  }
}

}  // namespace
}  // namespace tf::db
