#include "engine/server/chat_tools.h"

namespace moe {

std::string python_json(const ordered_json& v) {
    // Strings through nlohmann's writer: it escapes exactly what Python's json.dumps escapes with
    // ensure_ascii=False (quote, backslash, control characters as \n \t ... or \u00XX).
    auto str = [](const std::string& s) { return ordered_json(s).dump(-1, ' ', false, ordered_json::error_handler_t::replace); };
    if (v.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& [key, value] : v.items()) {
            out += (first ? "" : ", ") + str(key) + ": " + python_json(value);
            first = false;
        }
        return out + "}";
    }
    if (v.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_json(v[i]);
        return out + "]";
    }
    if (v.is_string()) return str(v.get<std::string>());
    return v.dump();
}

std::string python_str(const ordered_json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (v.is_null()) return "None";
    return python_json(v);
}

ordered_json arguments_object(const std::string& arguments) {
    ordered_json j = ordered_json::parse(arguments, nullptr, false);
    return j.is_object() ? j : ordered_json::object();
}

const ToolSpec* find_tool(const std::vector<ToolSpec>& tools, const std::string& name) {
    for (const auto& t : tools)
        if (t.name == name) return &t;
    return nullptr;
}

ordered_json tag_argument_value(const ToolSpec* tool, const std::string& key, const std::string& raw) {
    if (parameter_is_string(tool, key)) return raw;
    ordered_json v = ordered_json::parse(raw, nullptr, false);
    return v.is_discarded() ? ordered_json(raw) : v;
}

bool parameter_is_string(const ToolSpec* tool, const std::string& key) {
    if (!tool || !tool->parameters.is_object() || !tool->parameters.contains("properties")) return false;
    const auto& props = tool->parameters["properties"];
    if (!props.is_object() || !props.contains(key) || !props[key].is_object() || !props[key].contains("type")) return false;
    const auto& type = props[key]["type"];
    if (type.is_string()) return type.get<std::string>() == "string";
    if (type.is_array()) {  // ["string", "null"]: text unless it reads as null
        for (const auto& t : type)
            if (t.is_string() && t.get<std::string>() != "string" && t.get<std::string>() != "null") return false;
        return true;
    }
    return false;
}

}  // namespace moe
