// The web page at GET / (engine/server/web/index.html, embedded at build time): chat through the server's own
// OpenAI endpoint, and a live view of the engine from /v1/engine/stats. No CDN, no external requests.
#pragma once

namespace moe {

const char* web_page_html();

}  // namespace moe
