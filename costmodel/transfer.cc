#include "costmodel/transfer.h"

#include <cmath>
#include <map>

#include "base/error.h"
#include "compiler/operators.h"
#include "compiler/target.h"
#include "costmodel/features.h"

namespace tf::costmodel {

TransferData transfer_from_database(db::Database& db, const std::string& template_id, const std::string& arch,
                                    const std::string& exclude_workload, size_t max_records, bool emulated) {
  TransferData out;
  // (workload, target) -> config hash -> (config, medians; +inf for a failure)
  struct Config {
    nlohmann::json config;
    std::vector<double> medians;
  };
  std::map<std::pair<std::string, std::string>, std::map<std::string, Config>> groups;
  std::vector<db::MeasureRecord> all = db.history({});
  size_t taken = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const db::MeasureRecord& r = *it;
    if (r.template_name != template_id || r.arch != arch || r.workload == exclude_workload) continue;
    if (r.error_code == "board_lost" || db::emulated_target(r.target) != emulated) continue;
    if (max_records && taken >= max_records) break;
    ++taken;
    Config& c = groups[{r.workload, r.target}][r.config_hash()];
    c.config = r.config;
    c.medians.push_back(r.cost_s());
  }
  out.records = taken;
  for (const auto& [key, configs] : groups) {
    std::vector<std::vector<float>> rows;
    std::vector<double> costs;
    try {
      Target t = parse_target(key.second);
      OpGraph g = build_op(parse_workload(key.first));
      for (const auto& [hash, c] : configs) {
        try {
          rows.push_back(config_features(g, t, c.config));
        } catch (const UserError&) {
          out.skipped += c.medians.size();
          continue;
        }
        costs.push_back(db::combined_cost(c.medians));
      }
    } catch (const UserError&) {
      for (const auto& [hash, c] : configs) out.skipped += c.medians.size();
      continue;
    }
    size_t before = out.set.rows();
    out.set.add_group(rows, costs);
    if (out.set.rows() > before) {
      out.configs += out.set.rows() - before;
      ++out.workloads;
    }
  }
  return out;
}

}  // namespace tf::costmodel
