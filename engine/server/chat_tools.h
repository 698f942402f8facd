// Function tools in the chat templates: the tool list as each family's template declares it, earlier tool
// calls as each family writes them, and the JSON formatting the templates' `tojson` produces (Python's
// json.dumps: ", " and ": " separators, keys in the order given, non-ASCII kept).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moe {

using ordered_json = nlohmann::ordered_json;

// One function tool of a request, as the client declared it.
struct ToolSpec {
    std::string name, description;
    ordered_json declaration;  // the whole {"type":"function","function":{...}} object, key order kept
    ordered_json parameters;   // its JSON schema (an object; empty object when none was given)
};

// A call the model made (or an earlier one the client sends back).
struct ToolCall {
    std::string id, name;
    std::string arguments;  // a JSON object, as text
};

// Python json.dumps(value, ensure_ascii=False): what the templates' `tojson` writes.
std::string python_json(const ordered_json& value);
// Python str(value) as Qwen3.5's template writes argument values: strings bare, True/False/None, others JSON.
std::string python_str(const ordered_json& value);
// The arguments text parsed as a JSON object; a non-object or invalid text gives an empty object.
ordered_json arguments_object(const std::string& arguments);
// Whether the schema of `tool`'s parameter `key` admits only strings (so a value stays text, never JSON).
bool parameter_is_string(const ToolSpec* tool, const std::string& key);
const ToolSpec* find_tool(const std::vector<ToolSpec>& tools, const std::string& name);
// An argument value of a tag-style call (Qwen3.5, GLM, MiniMax): text for string parameters, else JSON when it
// parses as JSON.
ordered_json tag_argument_value(const ToolSpec* tool, const std::string& key, const std::string& raw);

}  // namespace moe
