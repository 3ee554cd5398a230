// Text form of the IR, for --emit loop-ir, pass dumps and golden tests.
//
// The format is stable: FileCheck tests in tests/compiler/golden depend on it.
#pragma once

#include <ostream>
#include <string>

#include "compiler/ir.h"

namespace tf::ir {

std::string to_string(const Expr& e);
std::string to_string(const Stmt& s);
std::string to_string(const LoweredFunc& f);
std::ostream& operator<<(std::ostream& os, const Expr& e);
std::ostream& operator<<(std::ostream& os, const Stmt& s);

}  // namespace tf::ir
