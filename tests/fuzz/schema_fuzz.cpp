// libFuzzer target for JSON schema -> grammar (response_format / tool parameters come from any client): any
// JSON must compile or raise GrammarError, within the grammar's own limits, never crash or recurse unbounded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/sampler/json_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    nlohmann::json schema;
    try {
        schema = nlohmann::json::parse(text, nullptr, true, false);
    } catch (const nlohmann::json::exception&) { return 0; }
    try {
        moe::JsonGrammar g;
        g.set_root(g.from_schema(schema));
    } catch (const moe::GrammarError&) {}
    return 0;
}
