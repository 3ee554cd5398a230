#include "tuner/session.h"

#include "base/error.h"
#include "costmodel/transfer.h"
#include "runtime/child_process.h"

namespace tf {

Session open_session(const MeasurePlace& place, const std::function<std::unique_ptr<Runner>()>& make_local,
                     std::function<void(const std::string&, const std::string&)> on_board_lost) {
  Session s;
  if (!place.farm) {
    s.target = place.target.empty() ? host_target() : parse_target(place.target);
    if (s.target.arch_name() != host_target().arch_name()) {
      throw UserError(str(place.target_name, " ", place.target, " is ", s.target.arch_name(),
                          ": its kernels cannot run on this ", host_target().arch_name(), " machine"));
    }
    s.runner = make_local();
    return s;
  }
  auto farm = std::make_unique<FarmRunner>(*place.farm);
  if (on_board_lost) farm->on_board_lost = std::move(on_board_lost);
  std::string expected = place.target.empty() ? "" : parse_target(place.target).arch_name();
  std::string board_target = farm->connect(expected);
  s.target = parse_target(place.target.empty() ? board_target : place.target);
  s.farm = farm.get();
  s.runner = std::move(farm);
  return s;
}

Search make_search(const ConfigSpace& space, db::Database* db, const SearchSettings& s) {
  Search out;
  CostModelSearchOptions mo = s.model;
  mo.feature_worker = find_sibling_program("tunefarm-build-worker");
  const Target& t = space.target();
  if (s.strategy == "xgb") {
    // transfer_until 0 never fits on the transfer set: it is not read either.
    if (db && s.transfer && mo.transfer_until > 0) {
      costmodel::TransferData td = costmodel::transfer_from_database(*db, space.template_id(), t.arch_name(),
                                                                     space.workload().canonical(), 4000, t.emulated());
      out.transfer_note = str("cost model starts from ", td.configs, " configs (", td.records, " records) of ",
                              td.workloads, " other workloads of ", space.template_id(), " on ", t.arch_name(),
                              td.skipped ? str(", ", td.skipped, " records skipped") : std::string());
      mo.transfer = std::move(td.set);
    } else {
      out.transfer_note = !s.transfer             ? "cost model starts cold (--no-transfer)"
                          : mo.transfer_until == 0 ? "cost model starts cold (--transfer-until 0)"
                                                   : "cost model starts cold (no database)";
    }
    if (!mo.load_model.empty()) out.transfer_note += str("; ranking with ", mo.load_model, " until the first fit");
  }
  out.strategy = make_search_strategy(s.strategy, space, s.seed, &mo);
  return out;
}

}  // namespace tf
