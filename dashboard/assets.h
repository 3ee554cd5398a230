// The dashboard's static files (dashboard/assets/), compiled into the program by
// dashboard/embed_assets.cmake: the service needs no files beside its binary.
#pragma once

#include <string_view>

namespace tf::web {

// The asset of that file name (app.js, style.css, page.html, login.html), or empty.
std::string_view asset(std::string_view name);

}  // namespace tf::web
