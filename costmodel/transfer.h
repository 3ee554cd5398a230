// Transfer: what the database already knows, as training data for a new workload's model.
//
// A tuning run of a new shape starts warm: records of the same schedule template (name and
// version) measured on targets of the same architecture, for other workloads, become one
// training group per (workload, target). Each config counts once, at the median of its
// measurements' medians; a config that ever failed counts as a failure. Records whose config
// the current template rejects are skipped and counted. Records of emulated boards
// (db::emulated_target) teach only models for emulated targets, and real boards' records only
// real ones: an emulator's timings rank configs unlike the hardware does.
#pragma once

#include <string>

#include "costmodel/cost_model.h"
#include "db/database.h"

namespace tf::costmodel {

struct TransferData {
  TrainingSet set;
  size_t records = 0;    // database records read into the set
  size_t configs = 0;    // rows of the set
  size_t workloads = 0;  // groups (workload and target pairs) of the set
  size_t skipped = 0;    // records whose config or workload no longer lowers
};

// The newest `max_records` matching records (0: all); `emulated`: for an emulated target.
TransferData transfer_from_database(db::Database& db, const std::string& template_id, const std::string& arch,
                                    const std::string& exclude_workload, size_t max_records = 4000,
                                    bool emulated = false);

}  // namespace tf::costmodel
