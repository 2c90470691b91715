// The built-in web page served at GET / (docs/HTTP.md, "The web page"): one
// self-contained HTML file, gateways/web/index.html, compiled into the binary
// by cmake/EmbedFile.cmake as the troupe_web library.
#pragma once

#include <string_view>

namespace troupe::gateways {

// The page's HTML (UTF-8), valid for the life of the program.
std::string_view web_page();

}  // namespace troupe::gateways
