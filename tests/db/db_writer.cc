// A writer process for the multi-process database tests:
//   test_db_writer PATH WRITER BATCHES BATCH_SIZE
// commits BATCHES batches of BATCH_SIZE distinct records, printing "batch I" after each.
#include <cstdio>
#include <cstdlib>

#include "db/database.h"
#include "tests/db/db_test_util.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s PATH WRITER BATCHES BATCH_SIZE\n", argv[0]);
    return 2;
  }
  int writer = std::atoi(argv[2]), batches = std::atoi(argv[3]), size = std::atoi(argv[4]);
  try {
    auto db = tf::db::open_database(argv[1]);
    for (int b = 0; b < batches; ++b) {
      std::vector<tf::db::MeasureRecord> batch;
      for (int i = 0; i < size; ++i) {
        int id = (writer * batches + b) * size + i;
        auto r = tf::db::testing::record(64 + writer, 64, 64, "llvm -mcpu=test", id, 1e-3 + id * 1e-9);
        r.measured_at = 1.7e9 + id;
        batch.push_back(r);
      }
      db->commit(batch);
      std::printf("batch %d\n", b);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %d: %s\n", writer, e.what());
    return 1;
  }
  return 0;
}
